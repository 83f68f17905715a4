// Package app wires Salvage's roles together: provisioning, the pipeline
// registry, and the splitter, workers and dead-letterer a process runs.
package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/cmd/salvage/internal/api"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/consumers"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/streams"
)

// Roles a process can run.
const (
	// RoleWorker runs the splitter and the chunk workers.
	RoleWorker = "worker"
	// RoleDeadLetter runs the dead-letterer, the sweeper and the alerts.
	RoleDeadLetter = "dead-letter"
	// RoleRecovery runs the recovery orchestrator.
	RoleRecovery = "recovery"
	// RoleAPI runs the `salvage` NATS micro service.
	RoleAPI = "api"
	// RoleDashboard serves the dashboard, /api, /metrics and /healthz.
	RoleDashboard = "dashboard"
	// RoleAll runs every role.
	RoleAll = "all"
)

// Journal write modes.
const (
	// JournalAtomic group-commits concurrent rows as atomic batches: the
	// right choice when the server fsyncs every write.
	JournalAtomic = "atomic"
	// JournalPipelined writes each row as its own asynchronous publish:
	// faster when the server acks before fsync.
	JournalPipelined = "pipelined"
)

// JournalMode picks the journal write mode for a server's sync_interval:
// atomic under "always", pipelined otherwise.
func JournalMode(syncAlways bool) string {
	if syncAlways {
		return JournalAtomic
	}
	return JournalPipelined
}

var allRoles = []string{RoleWorker, RoleDeadLetter, RoleRecovery, RoleAPI, RoleDashboard}

// ErrUnknownRole is returned for a role name Salvage does not have.
var ErrUnknownRole = errors.New("unknown role")

// Config is what a Salvage process runs with.
type Config struct {
	// Roles to run; RoleAll means every one. Default RoleAll.
	Roles []string
	// Replicas of streams and buckets: 1 embedded, 3 on a cluster.
	Replicas int
	// AckWait and MaxDeliver of the workers consumer (tier 2).
	AckWait    time.Duration
	MaxDeliver int
	// Concurrency is chunks in flight per worker process.
	Concurrency int
	// MaxChunks bounds the chunks of one job (pipelines may set their
	// own); ChunkWindow is how many of a job's chunks are queued at once.
	// Zero takes consumers.MaxChunksDefault and ChunkWindowDefault.
	MaxChunks, ChunkWindow int
	// WorkerID names this process's worker; empty derives one.
	WorkerID string
	// Retry is the tier-1 policy.
	Retry recovery.RetryPolicy
	// Model configures the simulated model contract-review calls.
	Model simmodel.Config
	// SweepInterval is the sweeper's period.
	SweepInterval time.Duration
	// DrainTimeout bounds the drain on shutdown.
	DrainTimeout time.Duration
	// Alerts are the DLQ alert thresholds; AlertInterval how often they
	// are evaluated (the dead-letter role raises them).
	Alerts        recovery.AlertRules
	AlertInterval time.Duration
	// HTTPAddr, HTTPToken and HTTPAllowedHosts configure the dashboard
	// role (see dashboard.Config).
	HTTPAddr         string
	HTTPToken        string
	HTTPAllowedHosts []string
	// CoolDown delays resuming chunks whose external system was down.
	CoolDown time.Duration
	// SimTimeout bounds one call to the sim.
	SimTimeout time.Duration
	// SimURL is a running `salvage sim`; empty uses the in-process model
	// and leaves order-fulfillment out.
	SimURL string
	// JournalWrites is JournalAtomic or JournalPipelined (see
	// kv.JournalConfig.Atomic). Default JournalAtomic.
	JournalWrites string
	// Logger receives every role's logs.
	Logger zerolog.Logger
}

// ResolveRoles expands and validates role names.
func ResolveRoles(roles []string) ([]string, error) {
	if len(roles) == 0 {
		roles = []string{RoleAll}
	}
	var out []string
	for _, r := range roles {
		for _, r := range strings.Split(r, ",") {
			r = strings.TrimSpace(r)
			switch {
			case r == RoleAll:
				out = append(out, allRoles...)
			case slices.Contains(allRoles, r):
				out = append(out, r)
			default:
				return nil, fmt.Errorf("%w: %q (want %s or %s)", ErrUnknownRole, r, strings.Join(allRoles, ", "), RoleAll)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Provision creates or updates every stream, consumer and bucket.
func Provision(ctx context.Context, js jetstream.JetStream, cfg Config) (*kv.Stores, error) {
	opts := streams.Options{Replicas: cfg.Replicas, AckWait: cfg.AckWait, MaxDeliver: cfg.MaxDeliver}
	if err := streams.Provision(ctx, js, opts); err != nil {
		return nil, err
	}
	st, err := kv.Provision(ctx, js, kv.Options{Replicas: cfg.Replicas})
	if err != nil {
		return nil, err
	}
	switch cfg.JournalWrites {
	case "", JournalAtomic:
	case JournalPipelined:
		atomic := false
		st.Journal.Configure(kv.JournalConfig{Atomic: &atomic})
	default:
		return nil, fmt.Errorf("journal writes %q: want %s or %s", cfg.JournalWrites, JournalAtomic, JournalPipelined)
	}
	return st, nil
}

// Registry returns the built-in pipelines. Without a sim URL,
// contract-review calls an in-process simulated model and
// order-fulfillment is not available; with one, both call the `salvage
// sim` process there.
func Registry(model simmodel.Config, simURL string, simTimeout time.Duration) (*recovery.Registry, error) {
	if simURL == "" {
		m, err := simmodel.New(model)
		if err != nil {
			return nil, err
		}
		return recovery.NewRegistry(contractreview.New(m))
	}
	c := &sim.Client{BaseURL: simURL, Timeout: simTimeout}
	of, err := orders.New(c)
	if err != nil {
		return nil, err
	}
	return recovery.NewRegistry(contractreview.New(c), of)
}

// Run runs cfg's roles until ctx ends, then drains them. ready, if set, is
// called once every role is built and the dashboard's address is bound. It
// blocks and returns the first role's error, if any.
func Run(ctx context.Context, js jetstream.JetStream, stores *kv.Stores, cfg Config, ready func()) error {
	roles, err := ResolveRoles(cfg.Roles)
	if err != nil {
		return err
	}
	reg, err := Registry(cfg.Model, cfg.SimURL, cfg.SimTimeout)
	if err != nil {
		return err
	}
	log := cfg.Logger
	var runs []func(context.Context) error
	if slices.Contains(roles, RoleWorker) {
		sp, err := consumers.NewSplitter(js, stores, consumers.SplitterConfig{Registry: reg, MaxChunks: cfg.MaxChunks, ChunkWindow: cfg.ChunkWindow, Logger: &log})
		if err != nil {
			return err
		}
		w, err := consumers.NewWorker(js, stores, consumers.WorkerConfig{
			ID: cfg.WorkerID, Registry: reg, Concurrency: cfg.Concurrency, AckWait: cfg.AckWait,
			MaxDeliver: cfg.MaxDeliver, Retry: cfg.Retry, DrainTimeout: cfg.DrainTimeout, Logger: &log,
		})
		if err != nil {
			return err
		}
		runs = append(runs, sp.Run, w.Run)
	}
	if slices.Contains(roles, RoleDeadLetter) {
		dl, err := consumers.NewDeadLetterer(js, stores, consumers.DeadLetterConfig{SweepInterval: cfg.SweepInterval, Logger: &log})
		if err != nil {
			return err
		}
		al := consumers.NewAlerter(js, stores, consumers.AlerterConfig{Rules: cfg.Alerts, Interval: cfg.AlertInterval, Logger: &log})
		runs = append(runs, dl.Run, al.Run)
	}
	if slices.Contains(roles, RoleRecovery) {
		or, err := consumers.NewOrchestrator(js, stores, consumers.OrchestratorConfig{
			Registry: reg, Retry: cfg.Retry, CoolDown: cfg.CoolDown, Logger: &log,
		})
		if err != nil {
			return err
		}
		runs = append(runs, or.Run)
	}
	if slices.Contains(roles, RoleAPI) {
		runs = append(runs, func(ctx context.Context) error {
			svc, err := api.Start(js.Conn(), js, stores, log)
			if err != nil {
				return err
			}
			<-ctx.Done()
			return svc.Stop()
		})
	}
	if slices.Contains(roles, RoleDashboard) {
		srv, err := dashboard.Listen(js, stores, dashboard.Config{Addr: cfg.HTTPAddr, Token: cfg.HTTPToken, AllowedHosts: cfg.HTTPAllowedHosts, Logger: &log})
		if err != nil {
			return err
		}
		log.Info().Str("url", srv.URL()).Bool("token_configured", cfg.HTTPToken != "").Msg("dashboard ready")
		runs = append(runs, srv.Run)
	}
	if ready != nil {
		ready()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = run(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
