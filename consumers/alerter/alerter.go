package alerter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Config configures an Alerter.
type Config struct {
	// Rules are the thresholds; zero fields take recovery's defaults.
	Rules salvagetype.AlertRules
	// Interval between evaluations. Default AlertIntervalDefault.
	Interval time.Duration
	// Now is the clock. Default time.Now; tests inject one.
	Now func() time.Time
	// Logger receives a line per alert. Default zerolog.Nop().
	Logger *zerolog.Logger
}

// Alerter raises the DLQ alerts: a burst of envelopes, an envelope left
// unresolved, an escalation involving money (or any COMPENSATION_NEEDED
// envelope) left unacknowledged. Each alert is an event on
// salvage.alerts.<kind> and a log line, raised once: the envelope's
// record remembers it (by CAS, so several alerters agree).
type Alerter struct {
	js     jetstream.JetStream
	stores *kv.Stores
	cfg    Config
	log    zerolog.Logger
	// uncovered are the pipelines this alerter raised no-recovery for,
	// until a recovery process covers them again.
	uncovered map[string]bool
}

// New returns an alerter; it does not start it.
func New(js jetstream.JetStream, stores *kv.Stores, cfg Config) *Alerter {
	if cfg.Interval <= 0 {
		cfg.Interval = salvagetype.AlertIntervalDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	return &Alerter{js: js, stores: stores, cfg: cfg, log: log.With().Str("role", "alerts").Logger(), uncovered: map[string]bool{}}
}

// Run evaluates the rules every Interval until ctx ends. It blocks.
func (a *Alerter) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := a.Check(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn().Err(err).Msg("evaluate alerts")
		}
		if _, err := a.CheckCoverage(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn().Err(err).Msg("look for pipelines nobody recovers")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// burstScanMax caps how many recent envelopes one evaluation reads for
// the burst rule: a burst that large fires anyway.
const burstScanMax = 10_000

// candidates reads, from the envelope index, the envelopes a rule can
// fire on: those that entered their status within two burst windows of
// now (at most burstScanMax, newest first: every envelope that arrived
// then is among them), the open, recovering and escalated ones, and the
// COMPENSATION_NEEDED ones. Not the settled history.
func (a *Alerter) candidates(ctx context.Context, now time.Time, rules salvagetype.AlertRules) (map[string]kv.EnvelopeRecord, error) {
	byID := map[string]kv.EnvelopeRecord{}
	since := now.Add(-2 * rules.BurstWindow)
	recent := 0
	err := eachEnvelope(ctx, a.stores, kv.IndexFilter{}, true, func(r kv.EnvelopeRecord) bool {
		if r.StatusAt.Before(since) || recent >= burstScanMax {
			return false
		}
		recent++
		byID[r.ID] = r
		return true
	})
	if err != nil {
		return nil, err
	}
	for _, f := range []kv.IndexFilter{{Status: salvagetype.EnvelopeOpen}, {Status: salvagetype.EnvelopeRecovering}, {Status: salvagetype.EnvelopeEscalated}, {Category: salvagetype.CategoryCompensationNeeded}} {
		if err := eachEnvelope(ctx, a.stores, f, false, func(r kv.EnvelopeRecord) bool { byID[r.ID] = r; return true }); err != nil {
			return nil, err
		}
	}
	return byID, nil
}

// eachEnvelope hands fn the records f matches from the envelope index, a
// page at a time, until fn returns false.
func eachEnvelope(ctx context.Context, stores *kv.Stores, f kv.IndexFilter, newest bool, fn func(kv.EnvelopeRecord) bool) error {
	const page = 1000
	for offset := 0; ; offset += page {
		pg, err := stores.Envelopes.Page(ctx, f, 0, offset, page, newest)
		if err != nil {
			return err
		}
		for _, r := range pg.Records {
			if !fn(r) {
				return nil
			}
		}
		if offset+page >= pg.Total {
			return nil
		}
	}
}

// Check evaluates the rules once and raises the alerts not raised before.
// It returns the alerts it raised.
func (a *Alerter) Check(ctx context.Context) ([]recovery.Alert, error) {
	byID, err := a.candidates(ctx, a.cfg.Now(), a.cfg.Rules.WithDefaults())
	if err != nil {
		return nil, err
	}
	subjects := make([]recovery.AlertSubject, 0, len(byID))
	for _, r := range byID {
		s := recovery.AlertSubject{ID: r.ID, Category: r.Category, Status: r.Status, CreatedAt: r.CreatedAt, Acked: r.AckedBy != ""}
		for _, l := range r.Left {
			s.LeftSystems = append(s.LeftSystems, l.System)
		}
		subjects = append(subjects, s)
	}
	var raised []recovery.Alert
	for _, al := range recovery.EvaluateAlerts(a.cfg.Now(), subjects, a.cfg.Rules) {
		// A burst is remembered on its first envelope.
		anchor := al.Envelope
		if anchor == "" {
			anchor = al.Key[len(al.Kind)+1:]
		}
		if byID[anchor].Alerted(al.Kind) {
			continue
		}
		h := nats.Header{}
		h.Set(salvagetype.HeaderMsgID, "alert."+al.Key)
		if al.Envelope != "" {
			h.Set(salvagetype.HeaderEnvelope, al.Envelope)
		}
		if err := flow.PublishJSON(ctx, a.js, streams.AlertSubject(al.Kind), al, h); err != nil {
			return raised, err
		}
		if _, err := a.stores.Envelopes.Mutate(ctx, anchor, func(r *kv.EnvelopeRecord) error {
			if r.Alerted(al.Kind) {
				return kv.ErrNoChange
			}
			r.Alerts = append(r.Alerts, al.Kind)
			return nil
		}); err != nil {
			return raised, fmt.Errorf("remember alert %s: %w", al.Key, err)
		}
		a.log.Warn().Str("alert", al.Kind).Str("envelope_id", al.Envelope).Msg(al.Message)
		raised = append(raised, al)
	}
	return raised, nil
}

// CheckCoverage raises no-recovery for each pipeline whose envelopes wait
// in its recovery pool while no live process recovers it (salvage_workers
// names none with the recovery role for it): its envelopes would stay open
// however long. It is raised once per pipeline until a recovery process
// covers it again, and returns the alerts it raised. Cost: one read of
// the live processes and the pipelines, and one consumer info per
// pipeline nobody recovers.
func (a *Alerter) CheckCoverage(ctx context.Context) ([]recovery.Alert, error) {
	workers, err := a.stores.Workers.List(ctx)
	if err != nil {
		return nil, err
	}
	pipes, err := a.stores.Pipelines.List(ctx)
	if err != nil {
		return nil, err
	}
	var raised []recovery.Alert
	for _, p := range pipes {
		covered := false
		for _, w := range workers {
			covered = covered || w.Recovering(p.Pipeline)
		}
		if covered {
			delete(a.uncovered, p.Pipeline)
			continue
		}
		if a.uncovered[p.Pipeline] {
			continue
		}
		waiting, err := a.waitingEnvelopes(ctx, p.Pipeline)
		if err != nil {
			return raised, err
		}
		if waiting == 0 {
			continue
		}
		now := a.cfg.Now().UTC()
		al := recovery.Alert{Kind: recovery.AlertNoRecovery, Key: recovery.AlertNoRecovery + "." + p.Pipeline, Count: waiting, At: now,
			Message: fmt.Sprintf("%d envelope(s) of pipeline %s wait and no live process recovers it: start one with the recovery role and the pipeline", waiting, p.Pipeline)}
		h := nats.Header{}
		// Alerters of several processes raising it in one minute raise
		// it once.
		h.Set(salvagetype.HeaderMsgID, "alert."+al.Key+"."+now.Truncate(time.Minute).Format("200601021504"))
		if err := flow.PublishJSON(ctx, a.js, streams.AlertSubject(al.Kind), al, h); err != nil {
			return raised, err
		}
		a.uncovered[p.Pipeline] = true
		a.log.Warn().Str("alert", al.Kind).Str("pipeline", p.Pipeline).Int("waiting", waiting).Msg(al.Message)
		raised = append(raised, al)
	}
	return raised, nil
}

// waitingEnvelopes counts the envelopes of pipeline its recovery pool has
// not settled: waiting to be delivered, or delivered and not acked.
func (a *Alerter) waitingEnvelopes(ctx context.Context, pipeline string) (int, error) {
	c, err := a.js.Consumer(ctx, streams.DLQ, streams.Pipeline(pipeline).Recovery())
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	info := c.CachedInfo()
	return int(info.NumPending) + info.NumAckPending, nil
}
