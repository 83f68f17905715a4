package flow

import (
	"context"
	"sync"
	"time"

	"github.com/salvagehq/salvage/kv"
)

// countsWriteTimeout bounds one coalesced count write.
const countsWriteTimeout = 10 * time.Second

// Counts coalesces the job-count changes of one process's chunks: while a
// job's count write is in flight, the chunks ending meanwhile queue their
// deltas, and the next write carries them all in one compare-and-swap.
// A job whose chunks all run here is counted with about one write per
// round trip, however many chunks end at once, and without reading the
// record first (the revision of the last write is kept, per job, until
// no write is queued).
type Counts struct {
	stores *kv.Stores

	mu   sync.Mutex
	jobs map[string]*jobQueue
}

// jobQueue is one job's queued deltas and the flusher draining them.
type jobQueue struct {
	pending []*countWrite
	last    kv.JobRev
}

// countWrite is one chunk's delta and, once written, the result.
type countWrite struct {
	d      kv.Delta
	done   chan struct{}
	job    kv.Job
	settle bool
	err    error
}

// NewCounts returns a process's job-count coalescer over stores.
func NewCounts(stores *kv.Stores) *Counts {
	return &Counts{stores: stores, jobs: map[string]*jobQueue{}}
}

// apply queues d for job id and waits for the write that carries it. The
// first caller for an idle job writes for everyone queued behind it.
// settle is true for exactly one of the deltas of a write after which the
// caller must settle the job.
func (c *Counts) apply(ctx context.Context, id string, d kv.Delta) (kv.Job, bool, error) {
	w := &countWrite{d: d, done: make(chan struct{})}
	c.mu.Lock()
	q, running := c.jobs[id]
	if !running {
		q = &jobQueue{}
		c.jobs[id] = q
	}
	q.pending = append(q.pending, w)
	c.mu.Unlock()
	if !running {
		go c.flush(id, q)
	}
	select {
	case <-w.done:
		return w.job, w.settle, w.err
	case <-ctx.Done():
		return kv.Job{}, false, ctx.Err()
	}
}

// flush writes q's deltas, a batch per round trip, until none is queued.
func (c *Counts) flush(id string, q *jobQueue) {
	for {
		c.mu.Lock()
		batch := q.pending
		q.pending = nil
		if len(batch) == 0 {
			delete(c.jobs, id)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		ds := make([]kv.Delta, len(batch))
		for i, w := range batch {
			ds[i] = w.d
		}
		ctx, cancel := context.WithTimeout(context.Background(), countsWriteTimeout)
		jr, settle, err := c.stores.Jobs.ApplyAll(ctx, id, ds, q.last)
		cancel()
		q.last = jr
		for i, w := range batch {
			w.job, w.err = jr.Job, err
			w.settle = settle && i == len(batch)-1
			close(w.done)
		}
	}
}
