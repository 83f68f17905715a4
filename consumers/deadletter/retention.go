package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Retention paging and pacing.
const (
	// retainPage is how many checkpoints one read brings: memory stays
	// bounded whatever the job's size.
	retainPage = 1000
	// retainParallel is how many chunks are retired at once.
	retainParallel = 8
	// retainJobs is how many finished jobs are retired at once.
	retainJobs = 4
	// retainLaterMax caps the wait before a job whose chunks still have
	// open envelopes is looked at again.
	retainLaterMax = 24 * time.Hour
)

// retainer applies retention to finished jobs, one finished event at a
// time from the retention consumer. A job is looked at once its Calls
// window passed: each chunk that will not run again has its journal
// retired (pure calls removed, side effects kept with a TTL; every row of
// a chunk whose envelope settled kept with the records' TTL), then its
// checkpoint gets the records' TTL; once every chunk is retired the job
// record gets it too. A chunk with an open envelope, or not finished, is
// left whole: the event is asked for again later. Every step is
// repeat-safe, and each chunk's checkpoint is written last, so a crash
// between steps is repaired by the event's redelivery.
type retainer struct {
	js       jetstream.JetStream
	stores   *kv.Stores
	defaults salvagetype.Retention
	log      zerolog.Logger
	now      func() time.Time
}

// run consumes finished events until ctx ends.
func (r *retainer) run(ctx context.Context) {
	cons, err := flow.BindConsumer(ctx, r.js, streams.Events, streams.RetentionConsumer)
	if err != nil || cons == nil {
		if err != nil {
			r.log.Error().Err(err).Msg("retention: bind consumer")
		}
		return
	}
	// Up to retainJobs jobs are retired side by side.
	var wg sync.WaitGroup
	slots := make(chan struct{}, retainJobs)
	flow.FetchLoop(ctx, cons, retainJobs, r.log, func(m jetstream.Msg) {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			r.handle(ctx, m)
		})
	})
	wg.Wait()
}

func (r *retainer) handle(ctx context.Context, m jetstream.Msg) {
	var ev salvagetype.JobEvent
	if err := json.Unmarshal(m.Data(), &ev); err != nil || ev.Job == "" {
		r.log.Error().Err(err).Str("subject", m.Subject()).Msg("retention: unreadable finished event, dropped")
		_ = m.Term()
		return
	}
	meta, _ := m.Metadata()
	later, err := r.retain(ctx, m, ev, meta)
	switch {
	case err != nil:
		r.log.Warn().Err(err).Str("job_id", ev.Job).Msg("retention: will retry")
		// Retried less and less often, at most daily, for as long as
		// SALVAGE_EVENTS keeps the event (14 days): a job whose retention
		// keeps failing (a permission, a server refusing) costs one look
		// a day, not one a minute.
		_ = m.NakWithDelay(backoff(meta, time.Second))
	case later > 0:
		_ = m.NakWithDelay(later)
	default:
		if err := m.Ack(); err != nil {
			r.log.Debug().Err(err).Str("job_id", ev.Job).Msg("retention: ack")
		}
	}
}

// retain applies retention to ev's job, or says how long to wait first.
func (r *retainer) retain(ctx context.Context, m jetstream.Msg, ev salvagetype.JobEvent, meta *jetstream.MsgMetadata) (time.Duration, error) {
	job, rev, err := r.stores.Jobs.GetRev(ctx, ev.Job)
	if errors.Is(err, kv.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if !job.Finished() || job.KeptUntil != nil {
		// Running again (its next finish brings another event), or done.
		return 0, nil
	}
	keep := r.defaults
	if job.Retention != nil {
		keep = job.Retention.Or(r.defaults)
	}
	finished := ev.At
	if job.FinishedAt != nil {
		finished = *job.FinishedAt
	}
	if wait := finished.Add(keep.Calls).Sub(r.now()); wait > 0 {
		return wait, nil
	}
	log := r.log.With().Str("job_id", job.ID).Logger()
	left, stats, err := r.chunks(ctx, m, job, keep, finished)
	if err != nil {
		return 0, err
	}
	log.Info().Int32("chunks", stats.chunks.Load()).Int64("rows_removed", stats.removed.Load()).Int64("rows_kept", stats.kept.Load()).
		Int("left", left).Msg("retention ran")
	if left > 0 {
		// Chunks whose envelope is open: looked at again, less and less
		// often.
		return backoff(meta, max(keep.Calls, time.Second)), nil
	}
	if _, err := r.stores.Jobs.Retain(ctx, job, rev, ttlFrom(keep.Records, finished, r.now())); err != nil {
		if errors.Is(err, kv.ErrConflict) {
			// It changed since it was read: look again.
			return time.Second, nil
		}
		return 0, err
	}
	return 0, nil
}

// backoff is base doubled for each earlier delivery of m, at most
// retainLaterMax.
func backoff(meta *jetstream.MsgMetadata, base time.Duration) time.Duration {
	n := uint64(1)
	if meta != nil {
		n = max(meta.NumDelivered, 1)
	}
	return min(base<<min(n-1, 20), retainLaterMax)
}

type retainStats struct {
	chunks        atomic.Int32
	removed, kept atomic.Int64
}

// chunks retires every chunk of job that will not run again, a page of
// checkpoints at a time, and returns how many it left.
func (r *retainer) chunks(ctx context.Context, m jetstream.Msg, job kv.Job, keep salvagetype.Retention, finished time.Time) (int, *retainStats, error) {
	stats := &retainStats{}
	part, err := r.stores.PartOf(ctx, job)
	if err != nil {
		return 0, stats, err
	}
	var left atomic.Int32
	for lo := 1; lo <= job.Chunks; lo += retainPage {
		hi := min(lo+retainPage-1, job.Chunks)
		cps, revs, err := part.Checkpoints.Revisions(ctx, job.ID, lo, hi)
		if err != nil {
			return 0, stats, err
		}
		_ = m.InProgress()
		var wg sync.WaitGroup
		var first error
		var once sync.Once
		next := make(chan int)
		for range retainParallel {
			wg.Go(func() {
				for i := range next {
					kept, err := r.chunk(ctx, part, cps[i], revs[i], keep, finished, stats)
					if err != nil {
						once.Do(func() { first = err })
					}
					if !kept {
						left.Add(1)
					}
				}
			})
		}
		for i := range cps {
			next <- i
		}
		close(next)
		wg.Wait()
		if first != nil {
			return 0, stats, first
		}
	}
	return int(left.Load()), stats, nil
}

// chunk retires one chunk, and reports false when it must be left as it
// is (not finished, or its envelope is open).
func (r *retainer) chunk(ctx context.Context, part *kv.Part, cp kv.Checkpoint, rev uint64, keep salvagetype.Retention, finished time.Time, stats *retainStats) (bool, error) {
	if rev == 0 || cp.KeptUntil != nil {
		// Never started (nothing stored), or retired already.
		return true, nil
	}
	now := r.now()
	records := ttlFrom(keep.Records, finished, now)
	var rows kv.RowRetention
	switch {
	case cp.Status == salvagetype.ChunkDone || cp.Status.IsCancelled():
		rows = kv.RowRetention{Effects: ttlFrom(keep.Effects, finished, now)}
	case cp.Status == salvagetype.ChunkDeadLettered && cp.Envelope != "":
		// Its envelope settled (checked below): the chunk's record is kept
		// whole, for the records' time.
		rows = kv.RowRetention{Effects: records, Calls: records}
	default:
		return false, nil
	}
	if cp.Envelope != "" {
		env, _, err := r.stores.Envelopes.Get(ctx, cp.Envelope)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return false, err
		}
		if err == nil && !env.Settled() {
			return false, nil
		}
		if err == nil {
			// Its body expires with the records (a crash between the
			// record's settling write and its body's left it kept).
			if err := r.stores.Envelopes.KeepBody(ctx, cp.Envelope, records); err != nil {
				return false, err
			}
		}
	}
	done, err := part.Journal.Retire(ctx, cp.Job, cp.Chunk, rows)
	if err != nil {
		return false, err
	}
	if err := part.Checkpoints.Retain(ctx, cp, rev, records); err != nil {
		if errors.Is(err, kv.ErrConflict) {
			// It moved since it was read: live again (a replay took it
			// while its journal was being retired). Its rows must not
			// expire under it.
			_, err := part.Journal.Unretire(ctx, cp.Job, cp.Chunk)
			return false, err
		}
		return false, err
	}
	stats.chunks.Add(1)
	stats.removed.Add(int64(done.Removed))
	stats.kept.Add(int64(done.Kept))
	return true, nil
}

// ttlFrom is what a TTL set at now must be for a message to go keep after
// since: in whole seconds, at least one (the server's floor).
func ttlFrom(keep time.Duration, since time.Time, now time.Time) time.Duration {
	left := keep - now.Sub(since)
	return max(left.Truncate(time.Second), time.Second)
}
