package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// Rate limits (issue 36). A limit declared on a key (salvagetype.Limit) is shared
// by every process that calls the key: each leases a share of it from the
// key's record in salvage_limits by CAS, renews the lease while it calls
// the key, and spends its share locally, so a request costs no round
// trip. A process takes only what the others' unexpired shares leave, so
// the shares never add up past the limit; a dead process's share is free
// once its lease lapses. A provider's 429 holds the key for the wait it
// names, in this process at once and in every other at its next renewal.
const (
	// limitLease is how long a share lasts unless renewed.
	limitLease = 3 * time.Second
	// limitRenewEvery is how often a process renews the shares it uses:
	// a third of the lease, so one lost renewal does not end it.
	limitRenewEvery = time.Second
	// limitIdle is how long a share is kept without a request before it
	// is handed back.
	limitIdle = 2 * limitLease
	// limitBurst is how much of its tokens a process may spend at once
	// after a pause in its requests: a second's worth. Of requests it may
	// send one.
	limitBurst = time.Second
	// limitPoll bounds one wait for budget before it looks again.
	limitPoll = 250 * time.Millisecond
)

// limiter is a process's side of the rate limits: the declared limits
// (followed from salvage_limits' spec keys) and, for each key its calls
// touch, its share and the local budget it spends.
type limiter struct {
	js     jetstream.JetStream
	stores *kv.Stores // its Limits is nil in a deployment provisioned before salvage_limits
	id     string
	log    zerolog.Logger
	now    func() time.Time

	// declared counts the specs, so that a process with none asks for no
	// lock per request.
	declared atomic.Int32

	mu    sync.Mutex
	specs map[string]salvagetype.Limit
	keys  map[string]*limitKey
	// changed is closed, and replaced, when a share, a pause or what is
	// in flight changes: waiters look again.
	changed chan struct{}
	// wake asks the renewal loop to renew now (a key without a share, a
	// pause to tell the others).
	wake chan struct{}
	// ready is closed once the watch has delivered every declared limit:
	// no request goes unpaced before the limits are known.
	ready     chan struct{}
	readyOnce sync.Once
}

// limitKey is one key's share in this process and the budget left of it.
type limitKey struct {
	spec  salvagetype.Limit
	share kv.LimitShare
	// requests and tokens are the local buckets, refilled at the share's
	// rates up to limitBurst of them; tokens may go below zero (a request
	// larger than what is left is let through once the bucket is not in
	// debt, and waits nothing more).
	requests, tokens float64
	refilled         time.Time
	inFlight         int
	// chunks counts the tenant's chunks running in this process.
	chunks int
	// refused counts the provider's refusals (429s) not yet added to
	// the key's record.
	refused int
	// startInFlight and startChunks are how many calls and chunks this
	// process may have open at once: its fair part, never more than the
	// share its record holds (which is at least what it has open).
	startInFlight, startChunks int
	pausedUntil                time.Time
	pauseReason                string
	// tell is set when this process learnt a pause the record does not
	// hold yet.
	tell bool
	// waiting counts requests waiting now; wanted is set when one waited
	// since the last renewal.
	waiting int
	wanted  bool
	used    time.Time
	// holders counts the processes holding a share at the last renewal.
	holders int
}

// requestRate is the requests a second this process may send of its
// share. Each holder may also send one request ahead of its rate, so the
// rates leave room for one request a holder: in any minute the fleet
// sends at most its shares' sum, the limit.
func (k *limitKey) requestRate() float64 {
	limit := float64(k.spec.RequestsPerMinute)
	if limit <= 0 {
		return 0
	}
	f := max(limit-float64(max(k.holders, 1)), limit/2) / limit
	return f * k.share.RequestsPerMinute / 60
}

// tokenRate is the tokens a second this process may spend of its share,
// less the second's burst it may spend at once.
func (k *limitKey) tokenRate() float64 {
	return (1 - limitBurst.Seconds()/60) * k.share.TokensPerMinute / 60
}

func newLimiter(js jetstream.JetStream, stores *kv.Stores, id string, log zerolog.Logger) *limiter {
	return &limiter{
		js: js, stores: stores, id: id, log: log.With().Str("part", "limits").Logger(), now: time.Now,
		specs: map[string]salvagetype.Limit{}, keys: map[string]*limitKey{},
		changed: make(chan struct{}), wake: make(chan struct{}, 1), ready: make(chan struct{}),
	}
}

// run follows the declared limits and renews the shares in use until ctx
// ends, then hands every share back. It blocks.
func (l *limiter) run(ctx context.Context) {
	if l.stores.Limits == nil {
		// A deployment provisioned before salvage_limits: no limit can
		// be declared, none is waited for.
		l.readyOnce.Do(func() { close(l.ready) })
		l.log.Warn().Err(salvagetype.ErrLimitsNotProvisioned).Msg("rate limits are off")
		<-ctx.Done()
		return
	}
	go kv.Follow(ctx, l.js, kv.BucketLimits, kv.LimitSpecs, l.update, func(err error) error {
		// Until it has read the declared limits once, the worker starts
		// no chunk: say why (a user without the permission, a bucket
		// not provisioned).
		select {
		case <-l.ready:
			l.log.Debug().Err(err).Msg("limit watch ended; restarting")
		default:
			l.log.Warn().Err(err).Msg("cannot read the declared rate limits from " + kv.BucketLimits + "; no chunk starts until they are read")
		}
		return nil
	})
	t := time.NewTicker(limitRenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.handBack(context.WithoutCancel(ctx))
			return
		case <-t.C:
		case <-l.wake:
		}
		l.renew(ctx)
	}
}

// update applies one entry of the spec watch.
func (l *limiter) update(e jetstream.KeyValueEntry) {
	if e == nil {
		l.readyOnce.Do(func() { close(l.ready) })
		return
	}
	key, spec, ok := kv.DecodeLimit(e)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok {
		delete(l.specs, key)
		delete(l.keys, key)
		l.declared.Store(int32(len(l.specs)))
		l.broadcast()
		return
	}
	l.specs[key] = spec
	l.declared.Store(int32(len(l.specs)))
	if k := l.keys[key]; k != nil {
		k.spec = spec
	}
}

// broadcast wakes every waiter. Lock held.
func (l *limiter) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// nudge asks the renewal loop to renew now.
func (l *limiter) nudge() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// keysOf returns the declared limits a request of tool for tenant counts
// against: its system's, its own and its tenant's calls. Lock held.
func (l *limiter) keysOf(tool *salvagetype.Tool, tenant string) []*limitKey {
	var out []*limitKey
	for _, key := range []string{salvagetype.LimitKey(salvagetype.LimitSystem, tool.System), salvagetype.LimitKey(salvagetype.LimitTool, tool.Name), salvagetype.LimitKey(salvagetype.LimitTenant, tenant)} {
		// A tool without a System, or a job without a tenant, makes a key
		// ending in ".", which no declared limit can be (its name must
		// be a token).
		spec, ok := l.specs[key]
		if !ok || (spec.RequestsPerMinute == 0 && spec.TokensPerMinute == 0 && spec.InFlight == 0) {
			continue
		}
		out = append(out, l.key(key, spec))
	}
	return out
}

// key returns the local state of a declared key, made on first use. Lock
// held.
func (l *limiter) key(key string, spec salvagetype.Limit) *limitKey {
	k := l.keys[key]
	if k == nil {
		k = &limitKey{spec: spec}
		l.keys[key] = k
	}
	return k
}

// Acquire implements the limiter a salvagetype.Turn asks.
func (l *limiter) Acquire(ctx context.Context, tool *salvagetype.Tool, tokens int64, maxWait time.Duration) (func(recovery.Spent, error), time.Duration, error) {
	if l.declared.Load() == 0 {
		return func(recovery.Spent, error) {}, 0, nil
	}
	l.mu.Lock()
	keys := l.keysOf(tool, ctxTenant(ctx))
	if len(keys) == 0 {
		l.mu.Unlock()
		return func(recovery.Spent, error) {}, 0, nil
	}
	// waitedSince is when the request first found no budget; the time
	// before (the lock, the key lookup) is not a wait for the limit.
	var waitedSince time.Time
	waited := func() time.Duration {
		if waitedSince.IsZero() {
			return 0
		}
		return time.Since(waitedSince)
	}
	for {
		now := l.now()
		var wait time.Duration
		renew := false
		for _, k := range keys {
			w, noShare := k.waitFor(now, tokens)
			wait, renew = max(wait, w), renew || noShare
		}
		if wait == 0 {
			for _, k := range keys {
				k.take(now, tokens)
			}
			l.mu.Unlock()
			var once sync.Once
			return func(spent recovery.Spent, err error) { once.Do(func() { l.done(keys, tokens, spent, err) }) }, waited(), nil
		}
		for _, k := range keys {
			k.waiting++
			k.wanted = true
		}
		if maxWait > 0 && wait > maxWait && !renew {
			for _, k := range keys {
				k.waiting--
			}
			l.mu.Unlock()
			return nil, waited(), salvagetype.RateLimited(wait, fmt.Errorf("%s: its rate limit has no budget for %s, past the fallback bound %s", tool.Name, wait.Round(time.Millisecond), maxWait))
		}
		changed := l.changed
		l.mu.Unlock()
		if waitedSince.IsZero() {
			waitedSince = time.Now()
		}
		if renew {
			l.nudge()
		}
		t := time.NewTimer(min(wait, limitPoll))
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-changed:
		}
		t.Stop()
		l.mu.Lock()
		for _, k := range keys {
			k.waiting--
		}
		if err := ctx.Err(); err != nil {
			l.mu.Unlock()
			return nil, waited(), context.Cause(ctx)
		}
	}
}

// done settles a request: its slot in flight, its tokens as spent, and
// the pause a rate limit, or headers saying the budget is spent, ask for.
func (l *limiter) done(keys []*limitKey, estimate int64, spent recovery.Spent, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	wait, reason := spent.Wait, "the provider's rate-limit headers: nothing left"
	var ce *salvagetype.CallError
	if errors.Is(err, salvagetype.ErrRateLimited) && errors.As(err, &ce) && ce.RetryAfter > wait {
		wait, reason = ce.RetryAfter, err.Error()
	}
	waiting := false
	for _, k := range keys {
		k.inFlight--
		if spent.Tokens > 0 {
			k.tokens += float64(estimate - spent.Tokens)
		}
		if wait > 0 && now.Add(wait).After(k.pausedUntil) {
			k.pausedUntil, k.pauseReason, k.tell = now.Add(wait), reason, true
		}
		if errors.Is(err, salvagetype.ErrRateLimited) {
			k.refused++
		}
		waiting = waiting || k.waiting > 0
	}
	if wait > 0 {
		l.nudge()
	}
	// Only a waiter can use a freed slot or a refund; without one, no
	// channel is made again for every request.
	if waiting {
		l.broadcast()
	}
}

// waitFor is how long a request of tokens must wait at now, and whether
// the key has no share to spend (a renewal is due). Lock held.
func (k *limitKey) waitFor(now time.Time, tokens int64) (time.Duration, bool) {
	if now.Before(k.pausedUntil) {
		return k.pausedUntil.Sub(now), false
	}
	if !now.Before(k.share.Expires) {
		return limitPoll, true
	}
	k.refill(now)
	var wait time.Duration
	if k.spec.RequestsPerMinute > 0 {
		rate := k.requestRate()
		if rate <= 0 {
			return limitPoll, true
		}
		if k.requests < 1 {
			wait = max(wait, seconds((1-k.requests)/rate))
		}
	}
	if k.spec.TokensPerMinute > 0 {
		rate := k.tokenRate()
		if rate <= 0 {
			return limitPoll, true
		}
		if k.tokens < 0 {
			wait = max(wait, seconds(-k.tokens/rate))
		}
	}
	if k.spec.InFlight > 0 && k.inFlight >= k.startInFlight {
		wait = max(wait, limitPoll)
		if k.startInFlight == 0 {
			return wait, true
		}
	}
	return wait, false
}

// take spends a request of tokens. Lock held.
func (k *limitKey) take(now time.Time, tokens int64) {
	k.requests--
	k.tokens -= float64(tokens)
	k.inFlight++
	k.used = now
}

// refill adds what the share's rates earned since the last refill, up to
// one request and limitBurst of tokens. Lock held.
func (k *limitKey) refill(now time.Time) {
	if !k.refilled.IsZero() {
		dt := now.Sub(k.refilled).Seconds()
		k.requests += dt * k.requestRate()
		k.tokens += dt * k.tokenRate()
	}
	k.requests = min(k.requests, 1)
	k.tokens = min(k.tokens, limitBurst.Seconds()*k.share.TokensPerMinute/60)
	k.refilled = now
}

// seconds converts a wait in seconds, at least a millisecond.
func seconds(s float64) time.Duration {
	return max(time.Duration(s*float64(time.Second)), time.Millisecond)
}

// renewal is what renew does for one key, as the key stood when the
// renewal began.
type renewal struct {
	key         string
	wants, idle bool
	pause       time.Time
	reason      string
	tell        bool
	refused     int
}

// renew renews the share of every key in use, takes one for a key that
// has none, tells the others of a pause, and hands back the shares of
// keys idle for limitIdle.
func (l *limiter) renew(ctx context.Context) {
	l.mu.Lock()
	var rs []renewal
	now := l.now()
	for key, k := range l.keys {
		idle := k.waiting == 0 && k.inFlight == 0 && k.chunks == 0 && now.Sub(k.used) > limitIdle
		rs = append(rs, renewal{key: key, wants: k.wanted || k.waiting > 0, idle: idle && k.refused == 0, pause: k.pausedUntil, reason: k.pauseReason, tell: k.tell, refused: k.refused})
		k.wanted = false
	}
	l.mu.Unlock()
	for _, r := range rs {
		l.renewKey(ctx, r)
	}
}

// renewKey writes this process's share of r's key into the key's record
// and takes what the record says back into the key.
func (l *limiter) renewKey(ctx context.Context, r renewal) {
	var mine, fair kv.LimitShare
	var spec salvagetype.Limit
	l.mu.Lock()
	if k := l.keys[r.key]; k != nil {
		spec = k.spec
	}
	l.mu.Unlock()
	sh, err := l.stores.Limits.MutateShares(ctx, r.key, func(sh *kv.LimitShares) error {
		now := l.now()
		for id, s := range sh.Shares {
			if !now.Before(s.Expires) {
				delete(sh.Shares, id)
			}
		}
		// What is open now, read as the record is written: the share
		// written holds at least that, and no start passes the fair
		// part from here on, so the shares never add up past the
		// limit while a process's part shrinks.
		l.mu.Lock()
		k := l.keys[r.key]
		var used kv.LimitShare
		if k != nil {
			used = kv.LimitShare{InFlight: k.inFlight, Chunks: k.chunks}
		}
		if r.idle && used.InFlight == 0 && used.Chunks == 0 {
			if k != nil {
				k.startInFlight, k.startChunks = 0, 0
			}
			l.mu.Unlock()
			delete(sh.Shares, l.id)
			return nil
		}
		mine, fair = allot(spec, sh, l.id, r.wants, now, used)
		if k != nil {
			k.startInFlight, k.startChunks = min(k.startInFlight, fair.InFlight), min(k.startChunks, fair.Chunks)
		}
		l.mu.Unlock()
		sh.Shares[l.id] = mine
		sh.AddRefused(now, r.refused)
		if r.tell && r.pause.After(sh.PausedUntil) {
			sh.PausedUntil, sh.PauseReason = r.pause, r.reason
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn().Err(err).Str("limit", r.key).Msg("renew the share of a limit; the one held lasts until its lease ends")
		}
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[r.key]
	switch {
	case k == nil:
	case r.idle && k.waiting == 0 && k.inFlight == 0 && k.chunks == 0:
		delete(l.keys, r.key)
	default:
		k.refill(l.now())
		k.share = mine
		k.startInFlight, k.startChunks = fair.InFlight, fair.Chunks
		k.holders = 0
		for _, h := range sh.Shares {
			if l.now().Before(h.Expires) {
				k.holders++
			}
		}
		if r.tell {
			k.tell = false
		}
		k.refused -= r.refused
		if sh.PausedUntil.After(k.pausedUntil) {
			k.pausedUntil, k.pauseReason = sh.PausedUntil, sh.PauseReason
		}
	}
	l.broadcast()
}

// handBack gives back every share this process holds, so that the others
// need not wait for the leases to lapse.
func (l *limiter) handBack(ctx context.Context) {
	l.mu.Lock()
	keys := make([]string, 0, len(l.keys))
	for key := range l.keys {
		keys = append(keys, key)
	}
	l.keys = map[string]*limitKey{}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, key := range keys {
		if _, err := l.stores.Limits.MutateShares(ctx, key, func(sh *kv.LimitShares) error {
			if _, ok := sh.Shares[l.id]; !ok {
				return kv.ErrNoChange
			}
			delete(sh.Shares, l.id)
			return nil
		}); err != nil {
			l.log.Debug().Err(err).Str("limit", key).Msg("hand back the share of a limit; it lapses with its lease")
		}
	}
}
