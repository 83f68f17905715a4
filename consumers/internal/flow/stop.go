package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// CancelRest does what a cancelled job needs after its record says so:
// purge, record, settle. It is repeat-safe.
func (t Tracker) CancelRest(ctx context.Context, job kv.Job, by string) (kv.Job, error) {
	if err := publishCancelled(ctx, t.JS, job); err != nil {
		return job, err
	}
	if err := PurgeSubject(ctx, t.JS, streams.ChunksStream(job.Partition), job.Ref().Chunks()); err != nil {
		return job, err
	}
	if job.Window > 0 {
		if err := PurgeSubject(ctx, t.JS, streams.Backlog, job.Ref().Backlog()); err != nil {
			return job, err
		}
	}
	// Held chunks are cancelled below like any other stopped chunk; their
	// parked messages go now rather than when their breaker closes.
	if err := PurgeSubject(ctx, t.JS, streams.Hold, job.Ref().Held()); err != nil {
		return job, err
	}
	part, err := t.Stores.PartOf(ctx, job)
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
		if settled, err := t.SettleStopped(ctx, job, cp, salvagetype.ChunkMsg{}, Letter{}); settled || err != nil {
			if err != nil {
				return job, err
			}
			continue
		}
		// Its dead worker made calls nobody counted yet.
		tally, err := ChunkTally(ctx, part, cp, nil)
		if err != nil {
			return job, err
		}
		done, err := part.Checkpoints.Mutate(ctx, job.ID, cp.Chunk, func(c *kv.Checkpoint) error {
			if c.Terminal() {
				return kv.ErrNoChange
			}
			c.Status, c.Reason, c.ClaimedBy = salvagetype.CancelledAtStage(c.Stage), job.StopReason(), ""
			SetTally(c, tally)
			c.Recount() // counted by the Settle below
			return nil
		})
		if err != nil {
			return job, err
		}
		if err := SettleEnvelope(ctx, t.Stores, done, by); err != nil {
			return job, err
		}
	}
	return t.settle(ctx, job.ID)
}

// SettleStopped writes the envelope that settles the effects of a chunk
// its job's cancel stops, when any may stand (invariant 4): side effects
// that took place and calls whose outcome is unknown. The chunk then ends
// cancelled-at-stage-N naming it, and the orchestrator verifies,
// compensates newest first and escalates what is irreversible, as for any
// failure. It reports false, writing nothing, for a chunk that never ran
// or whose epoch holds no such effect. base carries the chunk's message
// when there is one (its Seq, Subject, Data, Deliveries); without, the
// envelope's original is the chunk's identity. Repeat-safe: the envelope
// is guarded per chunk epoch.
func (t Tracker) SettleStopped(ctx context.Context, job kv.Job, cp kv.Checkpoint, chunk salvagetype.ChunkMsg, base Letter) (bool, error) {
	if cp.MsgSeq == 0 {
		return false, nil // never taken: no worker wrote a row for it
	}
	part, err := t.Stores.PartOf(ctx, job)
	if err != nil {
		return false, err
	}
	rows, err := part.Journal.Load(ctx, job.ID, cp.Chunk, cp.Epoch)
	if err != nil {
		return false, err
	}
	return t.SendStopped(ctx, job, cp, rows, chunk, base)
}

// SendStopped is settleStopped over the epoch's rows already read.
func (t Tracker) SendStopped(ctx context.Context, job kv.Job, cp kv.Checkpoint, rows map[string]kv.StoredRow, chunk salvagetype.ChunkMsg, base Letter) (bool, error) {
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
	d := Letterer{JS: t.JS, Stores: t.Stores, Tracker: t, Log: zerolog.Nop()}
	if _, err := d.Send(ctx, l); err != nil {
		return false, err
	}
	return true, nil
}
