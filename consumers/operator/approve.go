package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Decision is a person's answer to a chunk awaiting approval.
type Decision struct {
	// Approve lets the chunk run the stage; false rejects it: what it did
	// is compensated and its envelope ends abandoned.
	Approve bool
	// By names who decided; Note says why.
	By, Note string
}

// Approve answers a chunk parked before a stage that requires approval.
// An approval releases the parked message to SALVAGE_CHUNKS carrying the
// approval (Salvage-Approved-By, Salvage-Approved-Stage): the worker that
// takes it records the approval in the checkpoint, in the CAS that takes
// the chunk, so a crash between the release and the delete of the parked
// copy loses nothing (the worker purges the copy). A rejection
// dead-letters the chunk with a COMPENSATE_AND_ABANDON envelope marked
// human. A chunk whose checkpoint says it awaits approval while its
// parked copy is still on its way is waited for, up to parkWait. It
// returns the chunk's checkpoint as Approve left it, or an
// error wrapping ErrUnknownJob or ErrNotAwaitingApproval.
func (o *Operator) Approve(ctx context.Context, job string, chunk int, d Decision) (kv.Checkpoint, error) {
	j, err := o.stores.Jobs.Get(ctx, job)
	if errors.Is(err, kv.ErrNotFound) {
		return kv.Checkpoint{}, fmt.Errorf("%w: %s", salvagetype.ErrUnknownJob, job)
	} else if err != nil {
		return kv.Checkpoint{}, err
	}
	part, err := o.stores.PartOf(ctx, j)
	if err != nil {
		return kv.Checkpoint{}, err
	}
	cp, _, err := part.Checkpoints.Get(ctx, job, chunk)
	if errors.Is(err, kv.ErrNotFound) {
		return cp, fmt.Errorf("%w: job %s has no chunk %d that started", salvagetype.ErrNotAwaitingApproval, job, chunk)
	}
	if err != nil {
		return cp, err
	}
	subject := streams.ChunkRef{Job: job, Chunk: chunk}.Hold(streams.SystemApproval)
	if cp.Status != salvagetype.ChunkAwaitingApproval {
		// A parked copy a crash left behind (a rejection that died before
		// its purge) goes now: nothing will ever release it.
		if err := flow.PurgeSubject(ctx, o.js, streams.Hold, subject); err != nil {
			return cp, err
		}
		return cp, fmt.Errorf("%w: chunk %d of job %s is %s", salvagetype.ErrNotAwaitingApproval, chunk, job, cp.Status)
	}
	hold, err := o.js.Stream(ctx, streams.Hold)
	if err != nil {
		return cp, err
	}
	parked, err := parkedCopy(ctx, hold, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return cp, fmt.Errorf("%w: chunk %d of job %s is being parked; try again in a moment", salvagetype.ErrNotAwaitingApproval, chunk, job)
	}
	if err != nil {
		return cp, err
	}
	if d.Approve {
		extra := nats.Header{}
		extra.Set(salvagetype.HeaderApprovedBy, d.By)
		extra.Set(salvagetype.HeaderApprovedStage, strconv.Itoa(cp.Stage))
		if d.Note != "" {
			extra.Set(salvagetype.HeaderApprovalNote, streams.Clip(d.Note, salvagetype.ErrorTextMax))
		}
		if err := flow.Unpark(ctx, o.js, parked.Subject, parked.Data, parked.Header, extra, parked.Sequence); err != nil {
			return cp, err
		}
		return cp, flow.DeleteMsg(ctx, o.js, streams.Hold, parked.Sequence)
	}
	var c salvagetype.ChunkMsg
	if err := json.Unmarshal(parked.Data, &c); err != nil {
		return cp, fmt.Errorf("parked message of chunk %d of job %s: %w", chunk, job, err)
	}
	why := fmt.Sprintf("approval of stage %d rejected by %s", cp.Stage, d.By)
	if d.Note != "" {
		why += ": " + d.Note
	}
	tr := flow.Tracker{JS: o.js, Stores: o.stores}
	l := flow.Letterer{JS: o.js, Stores: o.stores, Tracker: tr, Log: zerolog.Nop()}
	if _, err := l.Send(ctx, flow.Letter{
		Seq: cp.MsgSeq, Subject: streams.ChunkRef{Partition: j.Partition, Pipeline: c.Pipeline, Job: c.Job, Chunk: c.Chunk}.Subject(), Data: parked.Data, Chunk: c,
		Deliveries: cp.Deliveries, Failure: recovery.Failure{Class: salvagetype.ClassPermanent, Rejected: true}, Err: why, Human: true,
	}); err != nil {
		return cp, err
	}
	if err := flow.PurgeSubject(ctx, o.js, streams.Hold, subject); err != nil {
		return cp, err
	}
	cp, _, err = part.Checkpoints.Get(ctx, job, chunk)
	return cp, err
}

// parkWait bounds how long Approve waits for the parked copy of a chunk
// whose checkpoint already says it awaits approval: a worker writes the
// checkpoint, then the copy, a moment apart. A copy still missing after
// it means the worker died in between; the redelivery parks the chunk
// again (after the AckWait) and the caller is told to try again.
const parkWait = 5 * time.Second

// parkedCopy reads the last message on subject of SALVAGE_HOLD, waiting
// up to parkWait for one to arrive.
func parkedCopy(parent context.Context, hold jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(parent, parkWait)
	defer cancel()
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		m, err := hold.GetLastMsgForSubject(ctx, subject)
		switch {
		case err == nil || parent.Err() != nil:
			return m, err
		case ctx.Err() != nil:
			return nil, jetstream.ErrMsgNotFound // parkWait is up
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}
