package consumers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// cancelWaitDefault is how long Cancel waits for the record of a job that
// has none yet: a job is recorded once its chunks are published, a moment
// after it was submitted.
const cancelWaitDefault = 5 * time.Second

// Cancel cancels a job: its record says so at once, and its cancelled
// event follows, so running chunks stop at their next stage (workers
// follow the cancellations) as cancelled-at-stage-N; its
// queued chunks leave the work queue and the backlog in one purge each and
// count as cancelled at stage 0; chunks that started but that no live
// worker holds are recorded cancelled at their stage; envelopes of its
// chunks that were still being recovered are resolved, as a person's
// doing. A job submitted a moment ago, its message still in SALVAGE_JOBS,
// is waited for up to cancelWaitDefault; an id that names no record and
// no waiting message is ErrUnknownJob at once, and a job that finished is
// ErrJobFinished. Cancelling twice is harmless, and the sweeper
// finishes a cancel whose caller died part-way. It returns the job as it
// then stands, or ErrUnknownJob.
func (o *Operator) Cancel(ctx context.Context, id, by string) (kv.Job, error) {
	if err := streams.ValidateJobID(id); err != nil {
		return kv.Job{}, err
	}
	deadline := time.Now().Add(cancelWaitDefault)
	job, err := o.stores.Jobs.Cancel(ctx, id)
	if errors.Is(err, kv.ErrNotFound) {
		// No record: a job still waiting in SALVAGE_JOBS gets a moment to
		// be split; an id never submitted is unknown at once (read the
		// record again: the splitter may have written it and taken the
		// message away between the two reads).
		if _, waiting := streams.FindWaitingJob(ctx, o.js, id); !waiting {
			if job, err = o.stores.Jobs.Cancel(ctx, id); errors.Is(err, kv.ErrNotFound) {
				return job, fmt.Errorf("%w: %s", salvagetype.ErrUnknownJob, id)
			}
		}
	}
	for errors.Is(err, kv.ErrNotFound) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return job, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		job, err = o.stores.Jobs.Cancel(ctx, id)
	}
	if errors.Is(err, kv.ErrNotFound) {
		return job, fmt.Errorf("%w: %s", salvagetype.ErrUnknownJob, id)
	}
	if errors.Is(err, kv.ErrJobFinished) {
		return job, fmt.Errorf("%w: %s is %s; nothing of it runs (resolve its envelopes to close them)", salvagetype.ErrJobFinished, id, job.Status)
	}
	if err != nil {
		return job, err
	}
	return cancelRest(ctx, tracker{js: o.js, stores: o.stores}, job, by)
}

// cancelRest does what a cancelled job needs after its record says so:
// purge, record, settle. It is repeat-safe.
func cancelRest(ctx context.Context, t tracker, job kv.Job, by string) (kv.Job, error) {
	if err := publishCancelled(ctx, t.js, job); err != nil {
		return job, err
	}
	if err := purgeSubject(ctx, t.js, streams.ChunksStream(job.Partition), job.Ref().Chunks()); err != nil {
		return job, err
	}
	if job.Window > 0 {
		if err := purgeSubject(ctx, t.js, streams.Backlog, job.Ref().Backlog()); err != nil {
			return job, err
		}
	}
	// Held chunks are cancelled below like any other stopped chunk; their
	// parked messages go now rather than when their breaker closes.
	if err := purgeSubject(ctx, t.js, streams.Hold, job.Ref().Held()); err != nil {
		return job, err
	}
	part, err := t.stores.PartOf(ctx, job)
	if err != nil {
		return job, err
	}
	cps, err := part.Checkpoints.ForJob(ctx, job.ID, job.Chunks)
	if err != nil {
		return job, err
	}
	now := time.Now()
	for _, cp := range cps {
		if cp.Terminal() && cp.Status != salvagetype.ChunkDeadLettered {
			continue
		}
		if cp.Status == salvagetype.ChunkPending && cp.ClaimedBy == "" && cp.Envelope == "" {
			continue // never started: Derive counts it cancelled at stage 0
		}
		if lease, err := part.Claims.Get(ctx, job.ID, cp.Chunk); err == nil && lease.Live(now) {
			continue // its worker records the cancellation itself
		}
		if cp.Status == salvagetype.ChunkDeadLettered {
			continue // it ended in an envelope; the envelope says how
		}
		if settled, err := settleStopped(ctx, t, job, cp, salvagetype.ChunkMsg{}, letter{}); settled || err != nil {
			if err != nil {
				return job, err
			}
			continue
		}
		// Its dead worker made calls nobody counted yet.
		tally, err := chunkTally(ctx, part, cp, nil)
		if err != nil {
			return job, err
		}
		done, err := part.Checkpoints.Mutate(ctx, job.ID, cp.Chunk, func(c *kv.Checkpoint) error {
			if c.Terminal() {
				return kv.ErrNoChange
			}
			c.Status, c.Reason, c.ClaimedBy = salvagetype.CancelledAtStage(c.Stage), job.StopReason(), ""
			setTally(c, tally)
			c.Recount() // counted by the Settle below
			return nil
		})
		if err != nil {
			return job, err
		}
		if err := settleEnvelope(ctx, t.stores, done, by); err != nil {
			return job, err
		}
	}
	return t.settle(ctx, job.ID)
}

// settleStopped writes the envelope that settles the effects of a chunk
// its job's cancel stops, when any may stand (invariant 4): side effects
// that took place and calls whose outcome is unknown. The chunk then ends
// cancelled-at-stage-N naming it, and the orchestrator verifies,
// compensates newest first and escalates what is irreversible, as for any
// failure. It reports false, writing nothing, for a chunk that never ran
// or whose epoch holds no such effect. base carries the chunk's message
// when there is one (its Seq, Subject, Data, Deliveries); without, the
// envelope's original is the chunk's identity. Repeat-safe: the envelope
// is guarded per chunk epoch.
func settleStopped(ctx context.Context, t tracker, job kv.Job, cp kv.Checkpoint, chunk salvagetype.ChunkMsg, base letter) (bool, error) {
	if cp.MsgSeq == 0 {
		return false, nil // never taken: no worker wrote a row for it
	}
	part, err := t.stores.PartOf(ctx, job)
	if err != nil {
		return false, err
	}
	rows, err := part.Journal.Load(ctx, job.ID, cp.Chunk, cp.Epoch)
	if err != nil {
		return false, err
	}
	return sendStopped(ctx, t, job, cp, rows, chunk, base)
}

// sendStopped is settleStopped over the epoch's rows already read.
func sendStopped(ctx context.Context, t tracker, job kv.Job, cp kv.Checkpoint, rows map[string]kv.StoredRow, chunk salvagetype.ChunkMsg, base letter) (bool, error) {
	left := recovery.Rows(rows).Standing()
	if len(left) == 0 {
		return false, nil
	}
	if chunk.Job == "" {
		chunk = salvagetype.ChunkMsg{Job: job.ID, Chunk: cp.Chunk, Pipeline: job.Pipeline, Epoch: cp.Epoch, TraceID: job.TraceID, Partition: job.Partition}
	}
	l := base
	if l.Subject == "" {
		l.Subject = job.Ref().Chunk(cp.Chunk).Subject()
		l.Data, _ = json.Marshal(chunk)
	}
	l.Chunk = chunk
	l.Failure = recovery.Failure{Class: salvagetype.ClassCancelled, Cancelled: true}
	l.Err = fmt.Sprintf("%s at stage %d with %d effects that may stand: settled by this envelope", job.StopReason(), max(cp.Stage, 1), len(left))
	l.Stopped, l.Stage, l.Epoch = salvagetype.StoppedCancelled, max(cp.Stage, 1), cp.Epoch
	l.Human = true
	d := letterer{js: t.js, stores: t.stores, tracker: t, log: zerolog.Nop()}
	if _, err := d.send(ctx, l); err != nil {
		return false, err
	}
	return true, nil
}
