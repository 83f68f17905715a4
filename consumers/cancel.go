package consumers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/streams"
)

// ErrUnknownJob is returned for a job id no record has.
var ErrUnknownJob = errors.New("unknown job")

// CancelWaitDefault is how long Cancel waits for the record of a job that
// has none yet: a job is recorded once its chunks are published, a moment
// after it was submitted.
const CancelWaitDefault = 5 * time.Second

// Cancel cancels a job: its record says so at once, so running chunks stop
// at their next stage (workers watch for it) as cancelled-at-stage-N; its
// queued chunks leave the work queue and the backlog in one purge each and
// count as cancelled at stage 0; chunks that started but that no live
// worker holds are recorded cancelled at their stage; envelopes of its
// chunks that were still being recovered are resolved, as a person's
// doing. A job submitted a moment ago and not yet recorded is waited for,
// up to CancelWaitDefault. Cancelling twice is harmless, and the sweeper
// finishes a cancel whose caller died part-way. It returns the job as it
// then stands, or ErrUnknownJob.
func (o *Operator) Cancel(ctx context.Context, id, by string) (kv.Job, error) {
	if err := streams.ValidateJobID(id); err != nil {
		return kv.Job{}, err
	}
	deadline := time.Now().Add(CancelWaitDefault)
	job, err := o.stores.Jobs.Cancel(ctx, id)
	for errors.Is(err, kv.ErrNotFound) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return job, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		job, err = o.stores.Jobs.Cancel(ctx, id)
	}
	if errors.Is(err, kv.ErrNotFound) {
		return job, fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	if err != nil {
		return job, err
	}
	return cancelRest(ctx, tracker{js: o.js, stores: o.stores}, job, by)
}

// cancelRest does what a cancelled job needs after its record says so:
// purge, record, settle. It is repeat-safe.
func cancelRest(ctx context.Context, t tracker, job kv.Job, by string) (kv.Job, error) {
	if err := purgeSubject(ctx, t.js, streams.Chunks, streams.ChunksForJob(job.Pipeline, job.ID)); err != nil {
		return job, err
	}
	if job.Window > 0 {
		if err := purgeSubject(ctx, t.js, streams.Backlog, streams.BacklogForJob(job.Pipeline, job.ID)); err != nil {
			return job, err
		}
	}
	// Held chunks are cancelled below like any other stopped chunk; their
	// parked messages go now rather than when their breaker closes.
	if err := purgeSubject(ctx, t.js, streams.Hold, streams.HoldForJob(job.ID)); err != nil {
		return job, err
	}
	cps, err := t.stores.Checkpoints.ForJob(ctx, job.ID, job.Chunks)
	if err != nil {
		return job, err
	}
	now := time.Now()
	for _, cp := range cps {
		if cp.Terminal() && cp.Status != kv.StatusDeadLettered {
			continue
		}
		if cp.Status == kv.StatusPending && cp.ClaimedBy == "" && cp.Envelope == "" {
			continue // never started: Derive counts it cancelled at stage 0
		}
		if lease, err := t.stores.Claims.Get(ctx, job.ID, cp.Chunk); err == nil && lease.Live(now) {
			continue // its worker records the cancellation itself
		}
		if cp.Status == kv.StatusDeadLettered {
			continue // it ended in an envelope; the envelope says how
		}
		done, err := t.stores.Checkpoints.Mutate(ctx, job.ID, cp.Chunk, func(c *kv.Checkpoint) error {
			if c.Terminal() {
				return kv.ErrNoChange
			}
			c.Status, c.Reason, c.ClaimedBy = kv.CancelledAtStage(c.Stage), job.StopReason(), ""
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
