package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// breakerSystem is the system whose breaker refused err's call.
func breakerSystem(err error) string {
	var be *salvagetype.BreakerOpenError
	if errors.As(err, &be) {
		return be.System
	}
	return ""
}

// BreakerPolicies maps external systems to their breaker policies; a
// system not named takes the Default.
type BreakerPolicies struct {
	// Default applies to every system not in Systems. Zero fields take
	// recovery's defaults.
	Default salvagetype.BreakerPolicy
	// Systems overrides the policy of named systems.
	Systems map[string]salvagetype.BreakerPolicy
}

// For returns system's policy, defaults applied.
func (p BreakerPolicies) For(system string) salvagetype.BreakerPolicy {
	if sp, ok := p.Systems[system]; ok {
		return sp.WithDefaults()
	}
	return p.Default.WithDefaults()
}

// Validate reports a policy out of range or a system name that is not a
// token.
func (p BreakerPolicies) Validate() error {
	if err := p.Default.Validate(); err != nil {
		return err
	}
	for system, sp := range p.Systems {
		if err := salvagetype.ValidateToken("breaker system", system); err != nil {
			return err
		}
		if err := sp.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// seenBreaker is a breaker and the revision it was read at.
type seenBreaker struct {
	kv.Breaker
	rev uint64
}

// errProbeTaken leaves a half-open breaker's probe to whoever took it.
var errProbeTaken = errors.New("consumers: probe taken")

// gate is a process's view of the breakers every worker shares
// (recovery.Gate). It reads the states from a watch of salvage_breakers,
// so asking costs no request; it counts failures in memory and writes
// only state changes, by CAS: open after the policy's failures in a row,
// closed or open again after the probe's answer.
type gate struct {
	js       jetstream.JetStream
	stores   *kv.Stores
	policies BreakerPolicies
	id       string
	log      zerolog.Logger

	mu   sync.Mutex
	seen map[string]seenBreaker
	runs map[string]*recovery.FailureRun
	// parked is, for each system this process parked a chunk on the hold
	// of, the breaker's Opens then: a system no chunk parks on since it
	// opened (one only optional stages call) is not paced.
	parked map[string]int
	// ready is closed once the watch has delivered every stored breaker.
	ready     chan struct{}
	readyOnce sync.Once
}

func newGate(js jetstream.JetStream, stores *kv.Stores, policies BreakerPolicies, id string, log zerolog.Logger) *gate {
	return &gate{js: js, stores: stores, policies: policies, id: id, log: log,
		seen: map[string]seenBreaker{}, runs: map[string]*recovery.FailureRun{}, parked: map[string]int{}, ready: make(chan struct{})}
}

// follow keeps the view current until ctx ends. It blocks.
func (g *gate) follow(ctx context.Context) {
	_ = kv.Follow(ctx, g.js, kv.BucketBreakers, jetstream.AllKeys, g.update, func(err error) error {
		g.log.Debug().Err(err).Msg("breaker watch ended; restarting")
		return nil
	})
}

func (g *gate) update(e jetstream.KeyValueEntry) {
	if e == nil {
		g.readyOnce.Do(func() { close(g.ready) })
		return
	}
	b, ok := kv.DecodeBreaker(e)
	if !ok {
		g.mu.Lock()
		delete(g.seen, e.Key())
		g.mu.Unlock()
		return
	}
	g.set(b, e.Revision())
}

// state returns the breaker of system as last seen (closed when none).
func (g *gate) state(system string) kv.Breaker {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b, ok := g.seen[system]; ok {
		return b.Breaker
	}
	return kv.Breaker{System: system, State: salvagetype.BreakerClosed}
}

// paced returns the first of systems whose calls the hold paces now, as
// last seen: its breaker is open or half-open, or closed less than rampEnd
// ago, while its held chunks come back at the ramp's rate
// (holder.whileClosed) — and this process has parked a chunk on its hold
// since it last opened (counted by its Opens, not by clocks). A system
// only optional stages call parks nothing (they are skipped while it is
// down), so it paces nothing: the work goes on without it.
func (g *gate) paced(systems []string, now time.Time) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range systems {
		b, ok := g.seen[s]
		if !ok {
			continue
		}
		if opens, ok := g.parked[s]; !ok || opens != b.Opens {
			continue
		}
		if b.State != salvagetype.BreakerClosed || !b.OpenedAt.IsZero() && now.Sub(b.UpdatedAt) < rampEnd {
			return s, true
		}
	}
	return "", false
}

// noteParked records that this process parks a chunk on system's hold
// while its breaker is as last seen (see paced).
func (g *gate) noteParked(system string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b, ok := g.seen[system]; ok {
		g.parked[system] = b.Opens
	}
}

// all returns every breaker seen.
func (g *gate) all() []kv.Breaker {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]kv.Breaker, 0, len(g.seen))
	for _, b := range g.seen {
		out = append(out, b.Breaker)
	}
	return out
}

// set records the breaker of b.System as of revision rev, unless a later
// one was seen: this process's own writes land here ahead of the watch.
func (g *gate) set(b kv.Breaker, rev uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev, ok := g.seen[b.System]
	if ok && prev.rev >= rev {
		return
	}
	if prev.State != b.State && b.State == salvagetype.BreakerClosed {
		// Failures counted before the breaker closed are old news.
		delete(g.runs, b.System)
	}
	g.seen[b.System] = seenBreaker{Breaker: b, rev: rev}
}

// Allow implements recovery.Gate.
func (g *gate) Allow(ctx context.Context, system, chunk string) error {
	b := g.state(system)
	switch b.Allows(chunk) {
	case kv.VerdictAllow:
		return nil
	case kv.VerdictTakeProbe:
		nb, rev, err := g.stores.Breakers.Mutate(ctx, system, g.id, func(b *kv.Breaker) error {
			if b.State != salvagetype.BreakerHalfOpen || (b.Probe != "" && b.Probe != chunk) {
				return errProbeTaken
			}
			if b.Probe == chunk {
				return kv.ErrNoChange
			}
			b.HalfOpen(chunk, time.Now())
			return nil
		})
		if err == nil {
			g.set(nb, rev)
			g.log.Info().Str("system", system).Str("probe", chunk).Msg("circuit breaker half-open: this chunk is the probe")
			return nil
		}
		if !errors.Is(err, errProbeTaken) {
			g.log.Warn().Err(err).Str("system", system).Msg("take the breaker's probe")
		}
		b = g.state(system)
	}
	return &salvagetype.BreakerOpenError{System: system, State: b.State, RetryAt: b.RetryAt}
}

// Done implements recovery.Gate.
func (g *gate) Done(ctx context.Context, system, chunk string, err error) {
	b := g.state(system)
	probe := b.State == salvagetype.BreakerHalfOpen && b.Probe == chunk
	switch {
	case err == nil:
		g.mu.Lock()
		if r := g.runs[system]; r != nil {
			r.Reset()
		}
		g.mu.Unlock()
		if probe {
			g.transition(ctx, system, func(b *kv.Breaker) bool {
				if b.State != salvagetype.BreakerHalfOpen || b.Probe != chunk {
					return false
				}
				b.Close()
				return true
			}, "circuit breaker closed: the probe succeeded")
		}
	case !recovery.CountsAgainstBreaker(err):
	case probe:
		g.transition(ctx, system, func(b *kv.Breaker) bool {
			if b.State != salvagetype.BreakerHalfOpen || b.Probe != chunk {
				return false
			}
			b.Open(g.policies.For(system), time.Now(), streams.Clip(err.Error(), salvagetype.ErrorTextMax))
			return true
		}, "circuit breaker open again: the probe failed")
	case b.State == salvagetype.BreakerClosed:
		p := g.policies.For(system)
		g.mu.Lock()
		r := g.runs[system]
		if r == nil {
			r = &recovery.FailureRun{}
			g.runs[system] = r
		}
		trip := r.Fail(p, time.Now())
		if trip {
			r.Reset()
		}
		g.mu.Unlock()
		if trip {
			g.transition(ctx, system, func(b *kv.Breaker) bool {
				if b.State != salvagetype.BreakerClosed {
					return false
				}
				b.Open(p, time.Now(), streams.Clip(err.Error(), salvagetype.ErrorTextMax))
				return true
			}, "circuit breaker open")
		}
	}
}

// transition writes a state change by CAS; change returning false leaves
// the breaker as another process set it.
func (g *gate) transition(ctx context.Context, system string, change func(b *kv.Breaker) bool, msg string) {
	changed := false
	b, rev, err := g.stores.Breakers.Mutate(ctx, system, g.id, func(b *kv.Breaker) error {
		if changed = change(b); !changed {
			return kv.ErrNoChange
		}
		return nil
	})
	if err != nil {
		g.log.Warn().Err(err).Str("system", system).Msg("write the circuit breaker")
		return
	}
	g.set(b, rev)
	if changed {
		g.log.Warn().Str("system", system).Str("state", string(b.State)).Time("retry_at", b.RetryAt).Str("reason", b.Reason).Msg(msg)
	}
}
