package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// Fair shares between tenants (issue 36). A job's chunks queue behind at
// most a window of another job's (ChunkWindow), so jobs take turns in
// SALVAGE_CHUNKS; a tenant's limit with Chunks caps how many of its chunks
// run at once across the fleet. The cap is shared like any limit: each
// process leases a part of it from share.tenant.<name> and counts its
// running chunks locally, so a chunk costs no round trip. A chunk past
// its tenant's part waits in its worker with its message kept in
// progress — but without its slot, which goes to the next chunk, another
// tenant's: a tenant at its cap never holds the fleet's slots. The
// waiting is bounded (a worker's slots, at least waitRoomMin); past that a
// waiting chunk keeps its slot.

// waitRoomMin is the fewest chunks a worker lets wait for their tenant's
// turn without a slot: four jobs' windows, so that the chunks a capped
// tenant's jobs have queued do not fill the worker's slots while another
// tenant's wait behind them.
const waitRoomMin = 4 * salvagetype.ChunkWindowDefault

// acquireChunk waits until a chunk of tenant may run in this process, or
// ctx or stop ends (an error: context.Cause, or errDraining). waiting is
// called once, outside the lock, when the chunk must wait. It returns
// release, to be called once when the chunk's run ends. A tenant without
// a declared cap on chunks runs at once.
func (l *limiter) acquireChunk(ctx context.Context, tenant string, stop <-chan struct{}, waiting func()) (func(), error) {
	none := func() {}
	if tenant == "" || l.declared.Load() == 0 {
		return none, nil
	}
	key := salvagetype.LimitKey(salvagetype.LimitTenant, tenant)
	told := false
	l.mu.Lock()
	for {
		// Looked up each time: the cap may be lifted while a chunk waits.
		spec, ok := l.specs[key]
		if !ok || spec.Chunks == 0 {
			l.mu.Unlock()
			return none, nil
		}
		k := l.key(key, spec)
		now := l.now()
		if now.Before(k.share.Expires) && k.chunks < k.startChunks {
			k.chunks++
			k.used = now
			l.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { l.chunkDone(k) }) }, nil
		}
		k.waiting++
		k.wanted = true
		noShare := !now.Before(k.share.Expires) || k.startChunks == 0
		changed := l.changed
		l.mu.Unlock()
		if noShare {
			l.nudge()
		}
		if !told {
			told = true
			waiting()
		}
		t := time.NewTimer(limitPoll)
		select {
		case <-ctx.Done():
		case <-stop:
		case <-t.C:
		case <-changed:
		}
		t.Stop()
		l.mu.Lock()
		k.waiting--
		if err := ctx.Err(); err != nil {
			l.mu.Unlock()
			return nil, context.Cause(ctx)
		}
		select {
		case <-stop:
			l.mu.Unlock()
			return nil, flow.ErrDraining
		default:
		}
	}
}

// chunkDone ends a chunk's run against its tenant's cap.
func (l *limiter) chunkDone(k *limitKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k.chunks--
	k.used = l.now()
	if k.waiting > 0 {
		l.broadcast()
	}
}

// tenantTurn waits, when the job's tenant is at its cap on chunks in
// flight, for the chunk's turn. While it waits the message is kept in
// progress and, room permitting among the worker's waiting chunks, the
// run's slot goes to the next chunk; it takes a slot again before it
// returns. A cancel of the job ends the wait. After a wait it reads the
// job again, so a chunk of a job cancelled meanwhile is cancelled, not
// run. release ends the chunk's turn; it is nil when the worker stopped
// taking chunks meanwhile and the message was handed back. waited says
// the chunk waited: what was read before may have moved.
func (r *run) tenantTurn(ctx context.Context, job kv.Job) (_ kv.Job, release func(), waited bool, err error) {
	w := r.w
	if job.Tenant == "" {
		// Nobody's job: no turn to take, nothing made per chunk.
		return job, func() {}, false, nil
	}
	var (
		// roomed: the chunk waits in the worker's waiting room; freed:
		// its slot is given away and not yet taken again.
		roomed, freed bool
		hbStop        chan struct{}
		hbDone        chan struct{}
	)
	waitCtx, cancelWait := context.WithCancelCause(ctx)
	defer cancelWait(nil)
	release, err = w.limiter.acquireChunk(waitCtx, job.Tenant, r.slot.stop, func() {
		r.log.Debug().Str("tenant", job.Tenant).Msg("the tenant is at its cap on chunks in flight; the chunk waits for its turn")
		w.cancels.add(r.chunk.Job, r.chunk.Chunk, cancelWait)
		select {
		case w.waitRoom <- struct{}{}:
			roomed, freed = true, true
			r.slot.free()
		default:
		}
		hbStop, hbDone = make(chan struct{}), make(chan struct{})
		go r.keepInProgress(hbStop, hbDone)
	})
	if hbStop == nil {
		// No wait: the hot path.
		return job, release, false, err
	}
	w.cancels.remove(r.chunk.Job, r.chunk.Chunk)
	cancelled := err != nil && ctx.Err() == nil && errors.Is(context.Cause(waitCtx), recovery.ErrJobCancelled)
	if freed && (err == nil || cancelled) {
		if terr := r.slot.take(ctx); terr != nil {
			err, cancelled = terr, false
		} else {
			freed = false
		}
	}
	close(hbStop)
	<-hbDone
	if roomed {
		<-w.waitRoom
	}
	if freed {
		// The slot was given away and not taken again: nothing to give
		// back when handle returns.
		r.freeOnce.Do(func() {})
	}
	if release == nil {
		release = func() {}
	}
	if err == nil || cancelled {
		if job, err = r.job(ctx); err == nil && (cancelled && job.CancelledAt == nil) {
			err = errors.New("consumers: the wait for the tenant's turn was cancelled, and the job's record says it is not")
		}
		if err != nil {
			release()
			return job, nil, true, err
		}
		return job, release, true, nil
	}
	if err := r.m.Nak(); err != nil {
		r.log.Debug().Err(err).Msg("hand a waiting chunk back")
	}
	r.outcome = "released"
	return job, nil, true, nil
}

// keepInProgress keeps the message in progress every heartbeat until
// stop is closed, then closes done.
func (r *run) keepInProgress(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(r.pool.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := r.m.InProgress(); err != nil {
				r.log.Debug().Err(err).Msg("in-progress while waiting for the tenant's turn")
			}
		}
	}
}

// tenantKey carries a job's tenant in a chunk's context.
type tenantKey struct{}

// withTenant returns ctx carrying tenant, whose limit (tenant.<tenant>)
// the calls made under it count against too (the limiter reads it).
func withTenant(ctx context.Context, tenant string) context.Context {
	if tenant == "" {
		return ctx
	}
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// ctxTenant returns the tenant ctx carries (withTenant), or "".
func ctxTenant(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}
