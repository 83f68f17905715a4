package consumers

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

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
	n, err := handBack(ctx, r.js, r.stores, r.log, w.ID)
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

// handBack hands back every chunk holder's claims are listed under
// (Claims.HeldBy), in every partition, whose claim still names it, and
// removes the listings; it returns how many it handed back. The reaper
// calls it for a dead process, a worker for its own id when it starts
// (what a previous life under that id held).
func handBack(ctx context.Context, js jetstream.JetStream, stores *kv.Stores, log zerolog.Logger, holder string) (int, error) {
	n := 0
	for _, part := range stores.Parts() {
		back, err := handBackIn(ctx, js, part, log, holder)
		n += back
		if err != nil {
			return n, err
		}
	}
	if n > 0 {
		if err := js.Conn().FlushTimeout(5 * time.Second); err != nil {
			return n, err
		}
	}
	return n, nil
}

// handBackIn is handBack in one partition.
func handBackIn(ctx context.Context, js jetstream.JetStream, part *kv.Part, log zerolog.Logger, holder string) (int, error) {
	keys, err := part.Claims.HeldBy(ctx, holder)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, key := range keys {
		if job, chunk, ok := kv.ParseChunkKey(key); ok {
			back, err := handBackOne(ctx, js, part, holder, job, chunk)
			if err != nil {
				return n, err
			}
			if back {
				n++
				log.Info().Str("job_id", job).Int("chunk", chunk).Str("holder", holder).Msg("dead holder's chunk handed back to its pool")
			}
		}
		if err := part.Claims.Unhold(ctx, holder, key, 0); err != nil {
			return n, err
		}
	}
	return n, nil
}

// handBackOne hands back the claim on one chunk if it still names holder
// — or names nobody since holder's earlier hand-back, whose nak may not
// have been sent — and naks the delivery it records: the server
// redelivers the message to the pool at once (a nak of a delivery
// acknowledged since is ignored). At MaxDeliver the server dead-letters
// it instead, as for any delivery.
func handBackOne(ctx context.Context, js jetstream.JetStream, part *kv.Part, holder, job string, chunk int) (bool, error) {
	cur, err := part.Claims.Get(ctx, job, chunk)
	if errors.Is(err, kv.ErrNotFound) {
		return false, nil // released
	}
	if err != nil {
		return false, err
	}
	switch {
	case cur.Reply == "":
		return false, nil
	case cur.ClaimedBy == holder:
		cur, err = part.Claims.Orphan(ctx, cur)
		if errors.Is(err, kv.ErrClaimHeld) {
			return false, nil // taken or released meanwhile
		}
		if err != nil {
			return false, err
		}
	case cur.ClaimedBy == "" && cur.From == holder:
	default:
		return false, nil // another holder's now
	}
	return true, js.Conn().Publish(cur.Reply, []byte("-NAK"))
}
