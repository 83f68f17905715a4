package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Orchestrator defaults.
const (
	// recoveryLeaseDefault is how long one orchestrator owns an envelope.
	recoveryLeaseDefault = time.Minute

	// retryStrategyDelay spaces the attempts of a failing strategy.
	retryStrategyDelay = 2 * time.Second
	// otherPipelineDelay is when an envelope of a pipeline this
	// orchestrator does not run (only from the DLQ consumer of before
	// worker pools) is offered again, to whichever orchestrator gets it.
	otherPipelineDelay = 5 * time.Second
)

// Config configures an Orchestrator.
type Config struct {
	// ID names this orchestrator in envelope records. Default host-pid-ULID.
	ID string
	// Registry knows the pipelines and their tools. Required.
	Registry *recovery.Registry
	// Lease is how long a taken envelope is this orchestrator's. Default
	// recoveryLeaseDefault.
	Lease time.Duration
	// CoolDown delays the resume of EXTERNAL_SYSTEM_DOWN envelopes.
	// Default CoolDownDefault.
	CoolDown time.Duration
	// Retry is the tier-1 policy for verify and compensation calls.
	Retry recovery.RetryPolicy
	// Limits bound recoveries per chunk and attempts per strategy;
	// zero fields take recovery's defaults (3 and 3).
	Limits recovery.Limits
	// MaxDeliver must match the recovery consumer's MaxDeliver: a step
	// still failing on the last delivery escalates the envelope. Default
	// streams.RecoveryMaxDeliverDefault.
	MaxDeliver uint64
	// RestoreInterval is how often the orchestrator looks for unsettled
	// envelopes of its pipelines whose SALVAGE_DLQ message is gone and
	// publishes them again from their records. Default
	// restoreIntervalDefault.
	RestoreInterval time.Duration
	// Logger receives recovery logs. Default zerolog.Nop().
	Logger *zerolog.Logger
	// TracerProvider receives a span per recovery an orchestrator runs,
	// and those of its verify and compensation calls. Default the global
	// provider.
	TracerProvider trace.TracerProvider
}

// Orchestrator runs recovery strategies on envelopes from SALVAGE_DLQ:
// verify unknown outcomes, resume from the checkpoint, compensate in
// reverse order, escalate, or mark a dead end. Any number may run: each
// envelope is taken by CAS on its salvage_envelopes record, and recoveries
// are counted per chunk across envelopes so nothing loops (invariant 7).
type Orchestrator struct {
	js      jetstream.JetStream
	stores  *kv.Stores
	cfg     Config
	log     zerolog.Logger
	exec    *recovery.Executor
	tracker flow.Tracker
	tracer  trace.Tracer
}

// New returns an orchestrator; it does not start it.
func New(js jetstream.JetStream, stores *kv.Stores, cfg Config) (*Orchestrator, error) {
	if cfg.Registry == nil {
		return nil, fmt.Errorf("%w: Config.Registry is nil", flow.ErrInvalidConfig)
	}
	if cfg.ID == "" {
		cfg.ID = flow.ProcessID()
	}
	if cfg.Lease <= 0 {
		cfg.Lease = recoveryLeaseDefault
	}
	if cfg.CoolDown <= 0 {
		cfg.CoolDown = salvagetype.CoolDownDefault
	}
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = streams.RecoveryMaxDeliverDefault
	}
	if cfg.RestoreInterval <= 0 {
		cfg.RestoreInterval = restoreIntervalDefault
	}
	cfg.Limits = cfg.Limits.WithDefaults()
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	log = log.With().Str("role", "recovery").Str("orchestrator", cfg.ID).Logger()
	exec, err := recovery.NewExecutor(cfg.Retry, log)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", flow.ErrInvalidConfig, err)
	}
	tracer := flow.TracerOf(cfg.TracerProvider)
	return &Orchestrator{js: js, stores: stores, cfg: cfg, log: log, exec: exec, tracer: tracer,
		tracker: flow.Tracker{JS: js, Stores: stores, Tracer: tracer}}, nil
}

// Run consumes the envelopes of its pipelines (one recovery pool each,
// streams.Pipeline.Recovery) until ctx ends: verification and compensation
// run only where their tools are. A deployment upgraded from before worker
// pools keeps its single DLQ consumer for the envelopes of that time; an
// orchestrator works it too, leaving to others the envelopes of pipelines
// it does not run. It blocks and returns nil on cancellation.
func (o *Orchestrator) Run(ctx context.Context) error {
	pools, err := flow.BindPools(ctx, o.js, streams.DLQ, o.cfg.Registry.Names(), streams.Pipeline.Recovery)
	if err != nil || pools == nil {
		return err
	}
	if legacy, err := o.js.Consumer(ctx, streams.DLQ, streams.LegacyRecoveryConsumer); err == nil {
		pools = append(pools, legacy)
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		o.log.Warn().Err(err).Msg("look for the DLQ consumer of before worker pools")
	}
	var wg sync.WaitGroup
	for _, cons := range pools {
		// An envelope is kept in progress three times an AckWait while a
		// step runs on it.
		beat := streams.RecoveryAckWait / 3
		if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
			beat = info.Config.AckWait / 3
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One at a time: an envelope waiting in a fetched batch
			// behind a long step would pass its AckWait unbeaten.
			flow.FetchLoop(ctx, cons, 1, o.log, func(m jetstream.Msg) {
				stop := inProgress(m, beat)
				defer stop()
				o.handle(ctx, m)
			})
		}()
	}
	wg.Go(func() { o.restoreLoop(ctx) })
	wg.Wait()
	return nil
}

// outcome is what to do with the DLQ message after a strategy step.
type outcome struct {
	ack   bool
	delay time.Duration
}

func (o *Orchestrator) handle(ctx context.Context, m jetstream.Msg) {
	env, err := recovery.DecodeEnvelope(m.Data())
	if err != nil {
		o.log.Error().Err(err).Str("subject", m.Subject()).Msg("unreadable envelope; left for an operator")
		_ = m.Term()
		return
	}
	log := o.log.With().Str("envelope_id", env.ID).Str("job_id", env.Job).Int("chunk", env.Chunk).
		Str("trace_id", env.TraceID).Str("category", string(env.Category)).Logger()
	out, err := o.recover(ctx, env, log)
	switch {
	case errors.Is(err, flow.ErrNoRecord):
		// The dead-letterer publishes an envelope, then records it.
		log.Debug().Err(err).Msg("envelope not recorded yet; looking again later")
		meta, _ := m.Metadata()
		out.delay = flow.RetryDelay(meta)
	case err != nil:
		log.Warn().Err(err).Msg("recovery step failed; will retry")
	}
	if !out.ack {
		if meta, merr := m.Metadata(); merr == nil && meta.NumDelivered >= o.cfg.MaxDeliver {
			// No envelope is retried forever: the last delivery hands it
			// to a person.
			out = o.giveUp(ctx, env, meta.NumDelivered, err, log)
		}
	}
	if out.ack {
		if err := m.Ack(); err != nil {
			log.Debug().Err(err).Msg("ack envelope")
		}
		return
	}
	_ = m.NakWithDelay(max(out.delay, 100*time.Millisecond))
}

// giveUp escalates an envelope whose recovery used up its deliveries. An
// envelope with no record yet is left to the dead-letterer, which writes
// the record and publishes the envelope again.
func (o *Orchestrator) giveUp(ctx context.Context, env salvagetype.Envelope, deliveries uint64, cause error, log zerolog.Logger) outcome {
	rec, _, err := o.stores.Envelopes.Get(ctx, env.ID)
	if errors.Is(err, kv.ErrNotFound) {
		log.Error().Uint64("deliveries", deliveries).Msg("envelope has no record after every delivery; left to the dead-letterer")
		return outcome{ack: true}
	}
	if err != nil || rec.Final() {
		return outcome{ack: err == nil, delay: retryStrategyDelay}
	}
	note := fmt.Sprintf("recovery gave up after %d deliveries", deliveries)
	if cause != nil {
		note += ": " + streams.Clip(cause.Error(), salvagetype.ErrorTextMax)
	}
	out, err := o.finish(ctx, env, rec, salvagetype.EnvelopeEscalated, note, o.standing(ctx, env), log)
	if err != nil {
		log.Error().Err(err).Msg("escalate an envelope whose recovery gave up")
	}
	return out
}

// take claims the envelope's record by CAS. It reports false when the
// envelope is final, waiting on a requeued chunk, or leased to another
// orchestrator (with how long that lease still runs).
func (o *Orchestrator) take(ctx context.Context, id string) (kv.EnvelopeRecord, bool, time.Duration, error) {
	var wait time.Duration
	var taken bool
	rec, err := o.stores.Envelopes.Mutate(ctx, id, func(r *kv.EnvelopeRecord) error {
		taken, wait = false, 0
		now := time.Now()
		switch {
		case r.Final() || r.Requeued:
			return kv.ErrNoChange
		case r.Status == salvagetype.EnvelopeRecovering && r.RecoveringBy != o.cfg.ID && now.Before(r.LeaseUntil):
			wait = r.LeaseUntil.Sub(now)
			return kv.ErrNoChange
		}
		taken = true
		r.Status, r.RecoveringBy, r.LeaseUntil = salvagetype.EnvelopeRecovering, o.cfg.ID, now.Add(o.cfg.Lease)
		return nil
	})
	return rec, taken, wait, err
}

// recover runs one step of the envelope's strategy.
func (o *Orchestrator) recover(ctx context.Context, env salvagetype.Envelope, log zerolog.Logger) (out outcome, err error) {
	rec, taken, wait, err := o.take(ctx, env.ID)
	if errors.Is(err, kv.ErrNotFound) {
		// Published, record not written yet (or its writer died): the
		// dead-letterer finishes it; look again, less and less often.
		return outcome{}, fmt.Errorf("%w: %s", flow.ErrNoRecord, env.ID)
	}
	if err != nil {
		return outcome{delay: retryStrategyDelay}, err
	}
	if !taken {
		if wait > 0 {
			return outcome{delay: wait}, nil
		}
		return outcome{ack: true}, nil
	}
	ctx, span := o.tracer.Start(flow.UnderJob(ctx, env.TraceID, env.Job), "recovery "+string(rec.Strategy), trace.WithAttributes(
		recovery.AttrJob.String(env.Job), recovery.AttrChunk.Int(env.Chunk), recovery.AttrPipeline.String(env.Pipeline), recovery.AttrEnvelope.String(env.ID),
		recovery.AttrCategory.String(string(rec.Category)), recovery.AttrStrategy.String(string(rec.Strategy)), recovery.AttrAttempts.Int(rec.Attempts+1)))
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	p, err := o.cfg.Registry.Get(env.Pipeline)
	if err != nil {
		// An envelope of before worker pools, of a pipeline this process
		// does not run: the orchestrators that run it take it.
		if _, rerr := o.release(ctx, env, rec, 0); rerr != nil {
			return outcome{delay: retryStrategyDelay}, rerr
		}
		return outcome{delay: otherPipelineDelay}, nil
	}
	part, err := flow.EnvelopePart(ctx, o.stores, env)
	if err != nil {
		return o.failed(ctx, env, rec, err, log)
	}
	cp, _, err := part.Checkpoints.Get(ctx, env.Job, env.Chunk)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return o.failed(ctx, env, rec, err, log)
	}
	if cp.Status == salvagetype.ChunkDone {
		return o.finish(ctx, env, rec, salvagetype.EnvelopeResolved, "chunk already done", nil, log)
	}
	rec, strategy, stopped, err := o.decide(ctx, env, rec, p, cp, log)
	if err != nil {
		return o.failed(ctx, env, rec, err, log)
	}
	if stopped {
		// The next delivery verifies or settles by the new strategy.
		return o.release(ctx, env, rec, 0)
	}
	return o.apply(ctx, env, rec, p, strategy, log)
}

// decide returns the strategy to run now for the envelope of a chunk at
// checkpoint cp: escalate past the strategy's attempts or the chunk's
// recoveries; verify first when a call went in flight before a
// compensation; and, for a chunk of a cancelled job that would resume,
// stopped: its record now says to settle its effects instead.
func (o *Orchestrator) decide(ctx context.Context, env salvagetype.Envelope, rec kv.EnvelopeRecord, p *recovery.Plan, cp kv.Checkpoint, log zerolog.Logger) (_ kv.EnvelopeRecord, _ salvagetype.Strategy, stopped bool, _ error) {
	strategy := o.cfg.Limits.Next(rec.Strategy, rec.Attempts)
	if strategy.Compensates() {
		// A call may have gone in flight since the envelope was written
		// (a cancel that landed while its worker still ran): what it did
		// is known before anything is undone.
		inFlight, err := o.inFlight(ctx, env, p)
		if err != nil {
			return rec, strategy, false, err
		}
		if inFlight {
			strategy = salvagetype.StrategyVerify
		}
	}
	if strategy == salvagetype.StrategyVerify {
		var err error
		if rec, strategy, err = o.reclassify(ctx, env, rec, p, cp, log); err != nil {
			return rec, strategy, false, err
		}
	}
	if strategy.Resumes() && rec.Stopped == "" {
		// A chunk of a cancelled job never runs again: its effects are
		// settled instead (invariant 4).
		job, err := o.stores.Jobs.Get(ctx, env.Job)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return rec, strategy, false, err
		}
		if job.CancelledAt != nil {
			rec, err = o.stopByCancel(ctx, env, rec, cp)
			return rec, strategy, err == nil, err
		}
	}
	if next := o.cfg.Limits.Resume(strategy, cp.Recoveries); next != strategy {
		strategy = next
		log.Warn().Int("recoveries", cp.Recoveries).Msg("chunk past its recoveries; escalating")
	}
	return rec, strategy, false, nil
}

// reclassify verifies the calls the envelope's chunk had in flight and
// records the category and strategy what they did calls for.
func (o *Orchestrator) reclassify(ctx context.Context, env salvagetype.Envelope, rec kv.EnvelopeRecord, p *recovery.Plan, cp kv.Checkpoint, log zerolog.Logger) (kv.EnvelopeRecord, salvagetype.Strategy, error) {
	category, strategy, err := o.verify(ctx, env, rec, p, cp, log)
	if err != nil {
		return rec, "", err
	}
	next, err := o.stores.Envelopes.Mutate(ctx, env.ID, func(r *kv.EnvelopeRecord) error {
		r.Category, r.Strategy = category, strategy
		r.Notes = append(r.Notes, fmt.Sprintf("verified calls in flight; reclassified %s/%s", category, strategy))
		return nil
	})
	if err != nil {
		return rec, "", err
	}
	return next, strategy, nil
}

// apply runs strategy on the envelope (its chunk's pipeline p): resume
// (after a system's cool-down), compensate and retry or abandon, escalate
// (compensating first what a compensation-needed category asks), or a
// dead end — never while an effect may stand (invariant 9).
func (o *Orchestrator) apply(ctx context.Context, env salvagetype.Envelope, rec kv.EnvelopeRecord, p *recovery.Plan, strategy salvagetype.Strategy, log zerolog.Logger) (outcome, error) {
	if strategy == salvagetype.StrategyResume {
		if rec.Category == salvagetype.CategoryExternalSystemDown {
			if left := time.Until(env.CreatedAt.Add(o.cfg.CoolDown)); left > 0 {
				return o.release(ctx, env, rec, left)
			}
		}
		return o.requeue(ctx, env, rec, false, log)
	}
	// The rest ends the envelope (recovery.End), after undoing what the
	// strategy undoes; a compensated COMPENSATE_AND_RETRY runs again.
	var compErr error
	if recovery.CompensatesFirst(strategy, rec.Category) {
		permanent, err := o.compensate(ctx, env, p, log)
		if err != nil && !permanent {
			return o.failed(ctx, env, rec, err, log)
		}
		if err == nil && strategy == salvagetype.StrategyCompensateAndRetry {
			return o.requeue(ctx, env, rec, true, log)
		}
		compErr = err
	}
	status, note, left := recovery.End(strategy, rec.Stopped, o.standing(ctx, env), compErr)
	return o.finish(ctx, env, rec, status, note, left, log)
}

// release gives the envelope back for a later step.
func (o *Orchestrator) release(ctx context.Context, env salvagetype.Envelope, rec kv.EnvelopeRecord, after time.Duration) (outcome, error) {
	_, err := o.stores.Envelopes.Mutate(ctx, env.ID, func(r *kv.EnvelopeRecord) error {
		r.Status, r.RecoveringBy, r.LeaseUntil = salvagetype.EnvelopeOpen, "", time.Time{}
		return nil
	})
	return outcome{delay: after}, err
}

// failed counts a failed strategy attempt; past the maximum the next step
// escalates.
func (o *Orchestrator) failed(ctx context.Context, env salvagetype.Envelope, rec kv.EnvelopeRecord, cause error, log zerolog.Logger) (outcome, error) {
	_, err := o.stores.Envelopes.Mutate(ctx, env.ID, func(r *kv.EnvelopeRecord) error {
		r.Attempts++
		r.Status, r.RecoveringBy, r.LeaseUntil = salvagetype.EnvelopeOpen, "", time.Time{}
		r.Notes = append(r.Notes, fmt.Sprintf("attempt %d of %s failed: %v", r.Attempts, r.Strategy, cause))
		return nil
	})
	log.Warn().Err(cause).Int("attempt", rec.Attempts+1).Msg("recovery strategy failed")
	return outcome{delay: retryStrategyDelay}, errors.Join(cause, err)
}

// finish records a final status, and announces an escalation.
func (o *Orchestrator) finish(ctx context.Context, env salvagetype.Envelope, rec kv.EnvelopeRecord, status salvagetype.EnvelopeStatus, note string, left []salvagetype.LeftEffect, log zerolog.Logger) (outcome, error) {
	trace.SpanFromContext(ctx).SetAttributes(recovery.AttrStatus.String(string(status)))
	rec, err := o.stores.Envelopes.Mutate(ctx, env.ID, func(r *kv.EnvelopeRecord) error {
		r.Status, r.RecoveringBy, r.LeaseUntil = status, "", time.Time{}
		r.Left = left
		r.Notes = append(r.Notes, note)
		return nil
	})
	if err != nil {
		return outcome{delay: retryStrategyDelay}, err
	}
	if status == salvagetype.EnvelopeEscalated {
		h := nats.Header{}
		h.Set(salvagetype.HeaderMsgID, env.ID+".escalated")
		h.Set(salvagetype.HeaderEnvelope, env.ID)
		h.Set(salvagetype.HeaderJob, env.Job)
		ev := map[string]any{"envelope_id": env.ID, "job_id": env.Job, "chunk": env.Chunk, "category": rec.Category,
			"reason": note, "left": left, "trace_id": env.TraceID, "at": time.Now().UTC()}
		if err := flow.PublishJSON(ctx, o.js, streams.EscalationSubject(rec.Category), ev, h); err != nil {
			return outcome{delay: retryStrategyDelay}, err
		}
	}
	log.Info().Str("status", string(status)).Int("left", len(left)).Msg(note)
	return outcome{ack: true}, nil
}

// inProgress keeps m in progress every beat until the returned stop is
// called; stop waits for the heartbeat to end.
func inProgress(m jetstream.Msg, beat time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(beat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return func() { close(done); <-stopped }
}
