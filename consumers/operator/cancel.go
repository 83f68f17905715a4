package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
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
	return flow.Tracker{JS: o.js, Stores: o.stores}.CancelRest(ctx, job, by)
}
