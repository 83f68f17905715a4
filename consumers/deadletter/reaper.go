package deadletter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
)

// reapEvery is how often the reaper looks for a process whose lease
// lapsed; reapForget how long it remembers one it handled whose record
// has not been removed (a record ages out of salvage_workers silently).
const (
	reapEvery  = 250 * time.Millisecond
	reapForget = 10 * time.Minute
)

// reaper hands back the chunks of a dead process. It follows
// salvage_workers — one record per process, rewritten three times a
// process lease, so what it receives grows with the processes, not with
// the chunks they run — and when a process's lease lapses it lists that
// process's claims (Claims.HeldBy: O(the chunks it held), once per
// death), hands each back by CAS (Claims.Orphan) and naks its delivery:
// the server redelivers the chunk to the pool at once, and the next free
// worker resumes it from its checkpoint instead of waiting out AckWait.
// Every dead-letter process runs one; the CAS lets one of them hand a
// claim back. Without any, JetStream's AckWait redelivery still resumes
// the chunk, later.
type reaper struct {
	js     jetstream.JetStream
	stores *kv.Stores
	log    zerolog.Logger

	mu sync.Mutex
	// procs are the records as last watched, by process id; reaped the
	// write (Written) of each whose lapse was handled.
	procs  map[string]kv.WorkerState
	reaped map[string]time.Time
}

func newReaper(js jetstream.JetStream, stores *kv.Stores, log zerolog.Logger) *reaper {
	return &reaper{js: js, stores: stores, log: log, procs: map[string]kv.WorkerState{}, reaped: map[string]time.Time{}}
}

// run follows the records and reaps lapsed processes until ctx ends.
func (r *reaper) run(ctx context.Context) {
	go kv.Follow(ctx, r.js, kv.BucketWorkers, jetstream.AllKeys, r.update, nil)
	tick := time.NewTicker(reapEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, w := range r.lapsed(time.Now()) {
			r.reap(ctx, w)
		}
	}
}

// update applies one watched record change.
func (r *reaper) update(e jetstream.KeyValueEntry) {
	if e == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w, err := kv.WorkerOf(e)
	if e.Operation() != jetstream.KeyValuePut || err != nil {
		// Removed by a process that stopped: it released its claims.
		delete(r.procs, e.Key())
		delete(r.reaped, e.Key())
		return
	}
	r.procs[e.Key()] = w
}

// lapsed are the processes whose lease lapsed since their last write and
// whose lapse is not handled yet.
func (r *reaper) lapsed(now time.Time) []kv.WorkerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []kv.WorkerState
	for id, w := range r.procs {
		done, ok := r.reaped[id]
		switch {
		case ok && done.Equal(w.Written) && now.Sub(w.Written) > reapForget:
			delete(r.procs, id)
			delete(r.reaped, id)
		case w.Lapsed(now) && !(ok && done.Equal(w.Written)):
			out = append(out, w)
		}
	}
	return out
}

// reap hands back what w's process held, once its record, read again,
// still says its lease lapsed (the watch may be a beat behind).
func (r *reaper) reap(ctx context.Context, w kv.WorkerState) {
	cur, err := r.stores.Workers.Get(ctx, w.ID)
	if err == nil && !cur.Lapsed(time.Now()) {
		r.mu.Lock()
		r.procs[w.ID] = cur
		r.mu.Unlock()
		return
	}
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		r.log.Debug().Err(err).Str("process", w.ID).Msg("read a lapsed process's record")
		return
	}
	n, err := flow.HandBack(ctx, r.js, r.stores, r.log, w.ID)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Str("process", w.ID).Msg("hand back a dead process's chunks; trying again")
		}
		return
	}
	r.mu.Lock()
	r.reaped[w.ID] = w.Written
	r.mu.Unlock()
	if n > 0 {
		r.log.Warn().Str("process", w.ID).Int("chunks", n).Time("last_beat", w.Written).
			Msg("process's lease lapsed; its chunks handed back to their pools")
	}
}
