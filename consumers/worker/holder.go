package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Holder timing.
const (
	// holdTick is how often the holder looks at the breakers.
	holdTick = 250 * time.Millisecond
	// heldCheckInterval is how often a closed breaker's system is checked
	// for chunks held after its release (a hold that raced the close).
	heldCheckInterval = 5 * time.Second
	// releaseBatch and releaseBatches bound one pass's release of a
	// closed breaker's held chunks; the next pass goes on.
	releaseBatch   = 100
	releaseBatches = 10
	// holdAckWait is the hold consumers' AckWait: a holder that dies
	// while releasing a chunk leaves it to be released again.
	holdAckWait = 30 * time.Second

	// rampEnd is how long after the close the rate stops mattering: by
	// then it is past what one pass releases (ReleaseRampStart doubled ten
	// times is ~4,000 a second).
	rampEnd = 10 * salvagetype.ReleaseRampDouble
	// pauseSlack is how far past its breaker's cool-down a hold consumer
	// is paused; the holder resumes it explicitly when the breaker closes
	// and pauses it again should the breaker stay open longer.
	pauseSlack = 24 * time.Hour
	// probeScan bounds the held chunks looked at for a probe that can
	// run; probeLookAgain is how long a process that found none waits
	// before it looks again.
	probeScan      = 16
	probeLookAgain = 2 * time.Second
)

// holder moves chunks between SALVAGE_HOLD and SALVAGE_CHUNKS as the
// breakers change: while a system's breaker is open its hold consumer is
// paused; after the cool-down the holder moves the breaker to half-open
// and releases exactly one held chunk as the probe (or, with nothing
// held, lets the first chunk that calls be the probe); a probe with no
// answer within a cool-down opens the breaker again; once the breaker is
// closed the consumer resumes and every held chunk returns to
// SALVAGE_CHUNKS with a fresh message id and a fresh delivery budget, at
// a rate that ramps up from the close (ramp).
// Every worker process runs one; they agree through the breakers' CAS
// and share the hold consumers.
type holder struct {
	js     jetstream.JetStream
	gate   *gate
	pauses *pauses
	id     string
	log    zerolog.Logger
	// partitions is how many chunk streams hold the pools it pauses.
	partitions func() int
	// pausedFor is the cool-down end (or pause time) each system's
	// consumer was paused for by this process, pausedAt when; checked is
	// when a closed system was last looked at for held chunks.
	pausedFor map[string]time.Time
	pausedAt  map[string]time.Time
	checked   map[string]time.Time
	// pools are the pipelines whose chunk pools this process runs;
	// poolPaused the pause each was last paused for by this process (its
	// PausedAt), poolSeen whether it was looked at since start.
	pools      map[string]bool
	poolPaused map[string]time.Time
	poolSeen   map[string]bool
	// ramps are the releases of systems whose breaker closed less than
	// rampEnd ago.
	ramps map[string]*ramp
	// noProbe is, per system, until when this process looks for no probe
	// (it found held chunks, none of which it can run).
	noProbe map[string]time.Time
}

// ramp paces one system's release after its breaker closed at from:
// allowance accrues at ReleaseRampStart a second, doubling every ReleaseRampDouble.
type ramp struct {
	from      time.Time
	last      time.Time
	allowance float64
}

// rampRate is the release rate, in chunks a second, since after a close.
func rampRate(since time.Duration) float64 {
	return salvagetype.ReleaseRampStart * math.Exp2(float64(since)/float64(salvagetype.ReleaseRampDouble))
}

// budget returns how many chunks may be released now, at least one the
// first time, and whether the ramp still limits the release.
func (r *ramp) budget(now time.Time) (int, bool) {
	if now.Sub(r.from) >= rampEnd {
		return releaseBatch * releaseBatches, false
	}
	if r.last.IsZero() {
		r.allowance, r.last = 1, now
		return 1, true
	}
	rate := rampRate(now.Sub(r.from))
	r.allowance = min(r.allowance+rate*now.Sub(r.last).Seconds(), max(rate, 1))
	r.last = now
	return int(r.allowance), true
}

func newHolder(js jetstream.JetStream, g *gate, ps *pauses, id string, pipelines []string, partitions func() int, log zerolog.Logger) *holder {
	pools := map[string]bool{}
	for _, p := range pipelines {
		pools[p] = true
	}
	return &holder{js: js, gate: g, pauses: ps, id: id, partitions: partitions, log: log.With().Str("part", "holder").Logger(),
		pausedFor: map[string]time.Time{}, pausedAt: map[string]time.Time{}, checked: map[string]time.Time{},
		pools: pools, poolPaused: map[string]time.Time{}, poolSeen: map[string]bool{}, ramps: map[string]*ramp{}, noProbe: map[string]time.Time{}}
}

// run makes a pass every holdTick until ctx ends. It blocks.
func (h *holder) run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-h.gate.ready:
	}
	select {
	case <-ctx.Done():
		return
	case <-h.pauses.ready:
	}
	t := time.NewTicker(holdTick)
	defer t.Stop()
	for {
		h.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pass acts once on every breaker.
func (h *holder) pass(ctx context.Context) {
	for _, b := range h.gate.all() {
		var err error
		switch b.State {
		case salvagetype.BreakerOpen:
			err = h.whileOpen(ctx, b)
		case salvagetype.BreakerHalfOpen:
			err = h.whileHalfOpen(ctx, b)
		default:
			err = h.whileClosed(ctx, b)
		}
		if err != nil && ctx.Err() == nil {
			h.log.Warn().Err(err).Str("system", b.System).Str("state", string(b.State)).Msg("holder pass")
		}
	}
	for _, p := range h.pauses.all() {
		system := streams.Pipeline(p.Pipeline).PausedSystem()
		var err error
		if p.Paused {
			err = errors.Join(h.pauseFor(ctx, system, p.PausedAt), h.pausePool(ctx, p))
		} else {
			err = errors.Join(h.resumePool(ctx, p.Pipeline), h.release(ctx, system, func() bool { return !h.pauses.paused(p.Pipeline) }, nil))
		}
		if err != nil && ctx.Err() == nil {
			h.log.Warn().Err(err).Str("pipeline", p.Pipeline).Bool("paused", p.Paused).Msg("holder pass")
		}
	}
}

// pausePool pauses the chunk pool of a paused pipeline this process runs,
// with JetStream's own consumer pause: none of its queued chunks is
// delivered until it resumes (those already running park at their next
// stage, see run.pause). It is paused pauseSlack ahead, again by the
// next pass after half of that.
func (h *holder) pausePool(ctx context.Context, p kv.PipelineState) error {
	if !h.pools[p.Pipeline] {
		return nil
	}
	if at, ok := h.poolPaused[p.Pipeline]; ok && at.Equal(p.PausedAt) && time.Since(h.pausedAt["pool:"+p.Pipeline]) < pauseSlack/2 {
		return nil
	}
	for k := range h.partitions() {
		if _, err := h.js.PauseConsumer(ctx, streams.ChunksStream(k), streams.Pipeline(p.Pipeline).Workers(), time.Now().Add(pauseSlack)); err != nil {
			return fmt.Errorf("pause the pool of %s in %s: %w", p.Pipeline, streams.ChunksStream(k), err)
		}
	}
	h.poolPaused[p.Pipeline], h.pausedAt["pool:"+p.Pipeline], h.poolSeen[p.Pipeline] = p.PausedAt, time.Now(), true
	return nil
}

// resumePool resumes the chunk pool of a running pipeline this process
// runs: once it paused it, and once on first sight after start (another
// process may have paused it and died).
func (h *holder) resumePool(ctx context.Context, pipeline string) error {
	if !h.pools[pipeline] {
		return nil
	}
	if _, paused := h.poolPaused[pipeline]; !paused && h.poolSeen[pipeline] {
		return nil
	}
	for k := range h.partitions() {
		_, err := h.js.ResumeConsumer(ctx, streams.ChunksStream(k), streams.Pipeline(pipeline).Workers())
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("resume the pool of %s in %s: %w", pipeline, streams.ChunksStream(k), err)
		}
	}
	delete(h.poolPaused, pipeline)
	h.poolSeen[pipeline] = true
	return nil
}

func (h *holder) whileOpen(ctx context.Context, b kv.Breaker) error {
	if err := h.pauseFor(ctx, b.System, b.RetryAt); err != nil {
		return err
	}
	if time.Now().Before(b.RetryAt) {
		return nil
	}
	return h.releaseProbe(ctx, b.System)
}

func (h *holder) whileHalfOpen(ctx context.Context, b kv.Breaker) error {
	if err := h.pauseFor(ctx, b.System, b.RetryAt); err != nil {
		return err
	}
	p := h.gate.policies.For(b.System)
	if !b.ProbeOverdue(p, time.Now()) {
		return nil
	}
	if b.ProbePipeline != "" && h.pauses.paused(b.ProbePipeline) {
		// Released before its pipeline was paused: it waits on the paused
		// pool, and its silence says nothing of the system. It gets a
		// whole cool-down from now on, once more each cool-down until the
		// pipeline resumes.
		h.gate.transition(ctx, b.System, func(cur *kv.Breaker) bool {
			if cur.State != salvagetype.BreakerHalfOpen || cur.Probe != b.Probe || !cur.ProbeAt.Equal(b.ProbeAt) {
				return false
			}
			cur.ProbeAt = time.Now().UTC()
			return true
		}, "the probe's pipeline is paused: the probe waits for it")
		return nil
	}
	h.gate.transition(ctx, b.System, func(cur *kv.Breaker) bool {
		if cur.State != salvagetype.BreakerHalfOpen || cur.Probe != b.Probe || !cur.ProbeAt.Equal(b.ProbeAt) {
			return false
		}
		cur.Open(p, time.Now(), "probe "+b.Probe+" gave no answer within the cool-down")
		return true
	}, "circuit breaker open again: the probe gave no answer")
	return nil
}

// releaseProbe moves an open breaker whose cool-down is over to half-open
// and releases the system's oldest held chunk that can run now as its
// probe: one of a pipeline this process's pools run and that is not
// paused (a probe released onto a paused pool never calls, and its
// silence would open the breaker again). While chunks are held but none
// can run here, the breaker is left as it is: a process that can run one
// releases it, or a resume lets this one. Only the process whose CAS wins
// releases it.
func (h *holder) releaseProbe(ctx context.Context, system string) error {
	if time.Now().Before(h.noProbe[system]) {
		return nil
	}
	m, held, err := h.probeCandidate(ctx, system)
	if err != nil {
		return err
	}
	if held && m == nil {
		h.noProbe[system] = time.Now().Add(probeLookAgain)
		return nil
	}
	probe, pipeline := "", ""
	if m != nil {
		ref, perr := streams.ParseHoldSubject(m.Subject)
		if perr != nil {
			return perr
		}
		probe = kv.ChunkKey(ref.Job, ref.Chunk)
		var c salvagetype.ChunkMsg
		if json.Unmarshal(m.Data, &c) == nil {
			pipeline = c.Pipeline
		}
	}
	now := time.Now()
	won := false
	h.gate.transition(ctx, system, func(b *kv.Breaker) bool {
		if won = b.State == salvagetype.BreakerOpen && !now.Before(b.RetryAt); won {
			b.HalfOpen(probe, now)
			b.ProbePipeline = pipeline
		}
		return won
	}, "circuit breaker half-open after its cool-down")
	if !won || m == nil {
		return nil
	}
	if err := flow.Unpark(ctx, h.js, m.Subject, m.Data, m.Header, nil, m.Sequence); err != nil {
		// The probe never runs: it is overdue after a cool-down and the
		// breaker opens again, to try another.
		return err
	}
	h.log.Info().Str("system", system).Str("probe", probe).Msg("released one held chunk as the breaker's probe")
	// A crash before the delete leaves the copy to be released again on
	// close; the chunk's checkpoint keeps it from running twice.
	return flow.DeleteMsg(ctx, h.js, streams.Hold, m.Sequence)
}

// probeCandidate returns the oldest chunk held for system that can run in
// this process now, looking at the first probeScan held; held says
// whether any chunk is held for it at all. A chunk parked at its call to
// the system (its message says why: Salvage-Reason) is preferred to one a
// job's window admitted onto the hold, which has not run yet and may have
// stages to go through before it calls: the probe is the system's test.
func (h *holder) probeCandidate(ctx context.Context, system string) (*jetstream.RawStreamMsg, bool, error) {
	s, err := flow.StreamHandle(ctx, h.js, streams.Hold)
	if err != nil {
		return nil, false, err
	}
	var first *jetstream.RawStreamMsg
	held := false
	seq := uint64(1)
	for range probeScan {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(streams.System(system).Held()))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, held, err
		}
		held = true
		var c salvagetype.ChunkMsg
		if json.Unmarshal(m.Data, &c) == nil && h.pools[c.Pipeline] && !h.pauses.paused(c.Pipeline) {
			if m.Header.Get(salvagetype.HeaderReason) != "" {
				return m, true, nil
			}
			if first == nil {
				first = m
			}
		}
		seq = m.Sequence + 1
	}
	return first, held, nil
}

// whileClosed releases the chunks held for a closed breaker's system,
// ramping up from the close (the breaker's last state change).
func (h *holder) whileClosed(ctx context.Context, b kv.Breaker) error {
	r := h.ramps[b.System]
	switch {
	case b.OpenedAt.IsZero() || time.Since(b.UpdatedAt) >= rampEnd:
		// Never opened, or closed long ago.
		delete(h.ramps, b.System)
		r = nil
	case r == nil || !r.from.Equal(b.UpdatedAt):
		r = &ramp{from: b.UpdatedAt}
		h.ramps[b.System] = r
	}
	return h.release(ctx, b.System, func() bool { return h.gate.state(b.System).State == salvagetype.BreakerClosed }, r)
}

// release returns the chunks held for system to SALVAGE_CHUNKS while
// still() holds (a closed breaker, a resumed pipeline), paced by r when
// set: at once after this process saw it paused, on every pass while a
// ramp holds some back, then every heldCheckInterval for a park that
// raced the release.
func (h *holder) release(ctx context.Context, system string, still func() bool, r *ramp) error {
	_, wasPaused := h.pausedFor[system]
	if !wasPaused && r == nil && time.Since(h.checked[system]) < heldCheckInterval {
		return nil
	}
	limit, ramping := releaseBatch*releaseBatches, false
	if r != nil {
		if limit, ramping = r.budget(time.Now()); ramping && limit == 0 && !wasPaused {
			return nil
		}
	}
	h.checked[system] = time.Now()
	s, err := h.js.Stream(ctx, streams.Hold)
	if err != nil {
		return err
	}
	if _, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(streams.System(system).Held())); errors.Is(err, jetstream.ErrMsgNotFound) {
		if !wasPaused {
			return nil
		}
		delete(h.pausedFor, system)
		return h.resume(ctx, system)
	} else if err != nil {
		return err
	}
	cons, err := h.consumer(ctx, system)
	if err != nil {
		return err
	}
	if err := h.resume(ctx, system); err != nil {
		return err
	}
	delete(h.pausedFor, system)
	released := 0
	defer func() {
		if r != nil {
			r.allowance -= float64(released)
		}
	}()
	for range releaseBatches {
		if !still() || released >= limit {
			break
		}
		batch, err := cons.FetchNoWait(min(releaseBatch, limit-released))
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			if err := flow.Unpark(ctx, h.js, m.Subject(), m.Data(), m.Headers(), nil, meta.Sequence.Stream); err != nil {
				// Left unacked: the consumer delivers it again.
				return err
			}
			if err := m.DoubleAck(ctx); err != nil {
				h.log.Debug().Err(err).Msg("ack released chunk")
			}
			released++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if n == 0 {
			break
		}
	}
	if released > 0 {
		ev := h.log.Info().Str("system", system).Int("released", released)
		if ramping {
			ev = ev.Float64("rate_per_second", rampRate(time.Since(r.from)))
		}
		ev.Msg("held chunks returned to the work queue")
	}
	return nil
}

// consumer returns system's hold consumer, creating it when missing.
func (h *holder) consumer(ctx context.Context, system string) (jetstream.Consumer, error) {
	name := streams.System(system).HoldConsumer()
	c, err := h.js.Consumer(ctx, streams.Hold, name)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return c, err
	}
	desc := "Releases the chunks held while the circuit breaker of " + system + " was open."
	if p, ok := streams.System(system).PausedPipeline(); ok {
		desc = "Releases the chunks of pipeline " + p + " parked while it was paused."
	}
	return streams.EnsureConsumer(ctx, h.js, streams.Hold, jetstream.ConsumerConfig{
		Durable: name, Description: desc,
		FilterSubject: streams.System(system).Held(), AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: holdAckWait, MaxDeliver: -1,
	})
}

// pauseFor pauses system's hold consumer once for each until (a
// breaker's cool-down end, a pipeline's pause time): up to pauseSlack
// past it, and the holder resumes it explicitly. A paused pipeline's
// consumer is paused again by the next pass after pauseSlack.
func (h *holder) pauseFor(ctx context.Context, system string, until time.Time) error {
	if h.pausedFor[system].Equal(until) && time.Since(h.pausedAt[system]) < pauseSlack/2 {
		return nil
	}
	if _, err := h.consumer(ctx, system); err != nil {
		return err
	}
	if _, err := h.js.PauseConsumer(ctx, streams.Hold, streams.System(system).HoldConsumer(), time.Now().Add(pauseSlack)); err != nil {
		return err
	}
	h.pausedFor[system], h.pausedAt[system] = until, time.Now()
	return nil
}

// resume resumes system's hold consumer, if it exists.
func (h *holder) resume(ctx context.Context, system string) error {
	_, err := h.js.ResumeConsumer(ctx, streams.Hold, streams.System(system).HoldConsumer())
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	return err
}
