package salvage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers/alerter"
	"github.com/salvagehq/salvage/consumers/deadletter"
	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/consumers/orchestrator"
	"github.com/salvagehq/salvage/consumers/splitter"
	"github.com/salvagehq/salvage/consumers/worker"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Client is Salvage in a program: it runs the roles its Config names
// (Start, Stop), submits and waits for jobs, and operates the DLQ. Its
// methods are safe for concurrent use. Several clients, in any number of
// processes, may share one deployment.
type Client struct {
	js jetstream.JetStream
	// apiAccount is the NATS account the service answers in, once it
	// runs (requestActor).
	apiAccount string
	cfg        Config
	registry   *recovery.Registry
	log        zerolog.Logger

	storesMu sync.Mutex
	stores   *kv.Stores
	// jobs is the jobs bucket alone, for a client that only submits and
	// waits (jobsFor).
	jobs *kv.Jobs

	// submitted remembers this client's own submissions (Wait).
	submitted submissions
	// worker is the client's worker while it runs (RoleWorker), for the
	// heartbeat's count of chunks in flight; id names the process.
	worker *worker.Worker
	id     string
	// beat is the heartbeat's last outcome (Health).
	beat beatState

	runMu   sync.Mutex
	stop    context.CancelFunc
	done    chan struct{}
	runErrs []error
}

// NewClient returns a client on js with cfg (nil: every default). It
// checks the config and every pipeline — names, stages, tools and their
// compensations — and returns an error wrapping ErrInvalidConfig that
// names what it refuses. It does not touch the server: Start does.
func NewClient(js jetstream.JetStream, cfg *Config) (*Client, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: a nil JetStream", ErrInvalidConfig)
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	pipes := make([]*recovery.Plan, 0, len(c.Pipelines))
	rem := remote{nc: js.Conn()}
	for _, p := range c.Pipelines {
		mp, err := p.machinery(rem)
		if err != nil {
			return nil, err
		}
		pipes = append(pipes, mp)
	}
	reg, err := recovery.NewRegistry(pipes...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Client{js: js, cfg: c, registry: reg, log: c.Logger}, nil
}

// Start provisions every stream, consumer and bucket (idempotently: any
// number of processes may do it at once) and starts the roles the config
// names. It returns once they run; it fails if provisioning fails or the
// client was started already.
func (c *Client) Start(ctx context.Context) error {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.stop != nil {
		return errors.New("salvage: client already started")
	}
	stores, err := c.provision(ctx)
	if err != nil {
		return err
	}
	if err := c.declareLimits(ctx, stores); err != nil {
		return err
	}
	if c.cfg.has(RoleWorker) || c.cfg.has(RoleRecovery) {
		if err := c.define(ctx, stores); err != nil {
			return err
		}
	}
	runs, err := c.roles(stores)
	if err != nil {
		return err
	}
	if !c.cfg.has(RoleNone) {
		runs = append(runs, func(ctx context.Context) error { c.growPartitions(ctx, stores); return nil })
	}
	if c.cfg.has(RoleDeadLetter) {
		// Once, beside the roles: the deployment's control role, not every
		// worker, moves leaders, and a refusal does not hold up Start.
		runs = append(runs, func(ctx context.Context) error { c.spreadLeaders(ctx, stores); return nil })
	}
	// The roles outlive the ctx of Start; Stop ends them.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	beatDone := make(chan struct{})
	if c.cfg.has(RoleNone) {
		close(beatDone)
	} else {
		// The process's record exists before its worker claims anything,
		// and outlives its roles' draining.
		state := c.processState(stores)
		c.beatOnce(ctx, stores, state)
		go func() { defer close(beatDone); c.heartbeat(beatCtx, stores, state) }()
	}
	c.stop, c.done, c.runErrs = stop, make(chan struct{}), make([]error, len(runs))
	var wg sync.WaitGroup
	for i, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(runCtx); err != nil {
				c.runErrs[i] = err
				c.log.Error().Err(err).Msg("a role stopped")
			}
		}()
	}
	go func() { wg.Wait(); stopBeat(); <-beatDone; close(c.done) }()
	return nil
}

// Stop stops the roles and waits for them: the worker stops fetching,
// lets in-flight chunks finish for up to DrainTimeout and releases the
// rest for another worker. It returns when every role has stopped, or
// ctx's error if ctx ends first, and ErrNotStarted for a client that was
// not started.
func (c *Client) Stop(ctx context.Context) error {
	c.runMu.Lock()
	stop, done := c.stop, c.done
	c.runMu.Unlock()
	if stop == nil {
		return ErrNotStarted
	}
	stop()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.runMu.Lock()
	defer c.runMu.Unlock()
	c.stop = nil
	return errors.Join(c.runErrs...)
}

// provisionAttempt bounds one attempt at provisioning.
const provisionAttempt = 10 * time.Second

// Provision creates or updates on the server what this client's
// configuration needs — the streams, the buckets, and the pools of each
// of its pipelines (with their own AckWait and MaxDeliver), each
// pipeline registered so that its jobs wait for workers — and returns
// without starting anything. Start does the same, but where everything
// already carries the configuration it asks for (a fingerprint in its metadata),
// Start only reads: an administrator runs Provision (`salvage
// provision`) with a user that may change streams and consumers, and
// workers start with users that may not. A change the server refuses
// this user wraps ErrNeedsProvisioning.
func (c *Client) Provision(ctx context.Context) error {
	stores, err := c.ensure(ctx, true, true)
	if err == nil {
		c.spreadLeaders(ctx, stores)
	}
	return err
}

// spreadLeaders leads each partition from its own server
// (kv.SpreadLeaders) when the deployment is replicated and partitioned.
// A user not allowed to ask a leader to step down leaves them where they
// are, with a warning: its first request goes unanswered (stepdownWait),
// and no other is asked.
func (c *Client) spreadLeaders(ctx context.Context, stores *kv.Stores) {
	n := stores.Partitions()
	if n <= 1 || c.cfg.Replicas <= 1 {
		return
	}
	if moved, err := kv.SpreadLeaders(ctx, c.js, n); err != nil && ctx.Err() == nil {
		c.cfg.Logger.Warn().Err(err).Int("moved", moved).Msg("spread the partitions' stream leaders over the servers")
	} else if moved > 0 {
		c.cfg.Logger.Info().Int("moved", moved).Msg("asked stream leaders to move so that each partition is led from its own server")
	}
}

// ErrNeedsProvisioning is returned by Start and Provision when a stream,
// bucket or consumer is missing or configured otherwise and the server
// refused this user the change: run Provision (`salvage provision`) with
// an administrator's user.
var ErrNeedsProvisioning = salvagetype.ErrNeedsProvisioning

// provision is Start's provisioning: the pools of the pipelines this
// client runs, and their registration when it runs workers.
func (c *Client) provision(ctx context.Context) (*kv.Stores, error) {
	return c.ensure(ctx, c.cfg.has(RoleWorker) || c.cfg.has(RoleRecovery), c.cfg.has(RoleWorker))
}

// ensure creates or updates the streams and buckets (and, with pools,
// the client's pipelines' pools; with register, records its pipelines),
// waiting out a deployment that is still electing leaders, and keeps the
// stores.
func (c *Client) ensure(ctx context.Context, pools, register bool) (*kv.Stores, error) {
	var stores *kv.Stores
	err := streams.Retry(ctx, func(ctx context.Context) error {
		// A request a forming cluster drops is never answered: each
		// attempt gets its own deadline, so it is asked again.
		ctx, cancel := context.WithTimeout(ctx, provisionAttempt)
		defer cancel()
		// Every partition the deployment has, and more when configured
		// so: a deployment never loses one (Config.Partitions).
		o := c.cfg.streamOptions()
		made, err := streams.Partitions(ctx, c.js)
		if err != nil {
			return err
		}
		o.Partitions = max(o.Partitions, made)
		if err := streams.Provision(ctx, c.js, o); err != nil {
			return err
		}
		// A partition's storage before its chunk stream: the stream is
		// what makes it count.
		if stores, err = kv.Provision(ctx, c.js, kv.Options{Replicas: c.cfg.Replicas, Partitions: o.Partitions}); err != nil {
			return err
		}
		if err := streams.ProvisionPartitions(ctx, c.js, o); err != nil {
			return err
		}
		if pools {
			// The pools of the pipelines this client runs, each with its
			// own AckWait and MaxDeliver where it sets them.
			for _, name := range c.registry.Names() {
				p, _ := c.registry.Get(name)
				o := o
				o.AckWait, o.MaxDeliver = cmp.Or(p.AckWait, o.AckWait), cmp.Or(p.MaxDeliver, o.MaxDeliver)
				if err := streams.Pipeline(name).Provision(ctx, c.js, o); err != nil {
					return err
				}
			}
		}
		if register {
			// Registered before Start returns: a job submitted next is
			// never taken for one of a pipeline nobody runs.
			for _, name := range c.registry.Names() {
				if err := stores.Pipelines.Register(ctx, name); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("salvage: provision: %w", err)
	}
	c.configureJournal(stores)
	c.storesMu.Lock()
	c.stores = stores
	c.storesMu.Unlock()
	return stores, nil
}

// storesFor returns the stores, opening them (without provisioning) for a
// client that was not started: one that only submits, waits or operates.
func (c *Client) storesFor(ctx context.Context) (*kv.Stores, error) {
	c.storesMu.Lock()
	defer c.storesMu.Unlock()
	if c.stores != nil {
		return c.stores, nil
	}
	st, err := kv.Open(ctx, c.js)
	if err != nil {
		return nil, fmt.Errorf("salvage: open the buckets (is Salvage provisioned on this server?): %w", err)
	}
	c.configureJournal(st)
	c.stores = st
	return st, nil
}

// jobsFor returns the jobs store, binding to that bucket alone when no
// other store is open: a submitter's user may read nothing else.
func (c *Client) jobsFor(ctx context.Context) (*kv.Jobs, error) {
	c.storesMu.Lock()
	defer c.storesMu.Unlock()
	if c.stores != nil {
		return c.stores.Jobs, nil
	}
	if c.jobs != nil {
		return c.jobs, nil
	}
	j, err := kv.OpenJobs(ctx, c.js)
	if err != nil {
		return nil, fmt.Errorf("salvage: open the jobs bucket (is Salvage provisioned on this server?): %w", err)
	}
	c.jobs = j
	return j, nil
}

// configureJournal configures the stores' writes: how journal rows are
// written, and how long settled envelope records are kept.
func (c *Client) configureJournal(st *kv.Stores) {
	atomic := c.cfg.JournalWrites == JournalAtomic
	st.ConfigureJournal(kv.JournalConfig{Atomic: &atomic})
	st.Envelopes.Keep(c.cfg.Retention.WithDefaults().Records)
}

// operator is the one implementation of the operator's actions.
func (c *Client) operator(ctx context.Context) (*operator.Operator, error) {
	st, err := c.storesFor(ctx)
	if err != nil {
		return nil, err
	}
	return operator.New(c.js, st), nil
}

// roles builds the runs of the configured roles.
func (c *Client) roles(stores *kv.Stores) ([]func(context.Context) error, error) {
	log := c.cfg.Logger
	var runs []func(context.Context) error
	if c.cfg.has(RoleWorker) {
		sp, err := splitter.New(c.js, stores, splitter.Config{
			Registry: c.registry, MaxPayload: c.cfg.MaxPayload, MaxChunks: c.cfg.MaxChunks,
			ChunkWindow: c.cfg.ChunkWindow, Retention: c.cfg.Retention, Logger: &log,
		})
		if err != nil {
			return nil, err
		}
		w, err := worker.New(c.js, stores, worker.Config{
			ID: c.cfg.WorkerID, Registry: c.registry, Concurrency: c.cfg.Concurrency, AckWait: c.cfg.AckWait,
			Heartbeat: c.cfg.Heartbeat, MaxDeliver: c.cfg.MaxDeliver, Retry: c.cfg.retryPolicy(),
			DrainTimeout: c.cfg.DrainTimeout, JobWait: c.cfg.JobWait, Breakers: c.cfg.breakerPolicies(), Prices: c.cfg.Prices, Logger: &log,
			TracerProvider: c.cfg.TracerProvider, Alive: alive(stores),
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		c.worker, c.id = w, w.ID()
		runs = append(runs, sp.Run, w.Run)
	}
	if c.cfg.has(RoleDeadLetter) {
		dl, err := deadletter.New(c.js, stores, deadletter.Config{
			SweepInterval: c.cfg.SweepInterval, Limits: c.cfg.limits(), UnknownPipelineWait: c.cfg.UnknownPipelineWait, Prices: c.cfg.Prices,
			Retention: c.cfg.Retention, Logger: &log, TracerProvider: c.cfg.TracerProvider,
		})
		if err != nil {
			return nil, err
		}
		al := alerter.New(c.js, stores, alerter.Config{Rules: c.cfg.Alerts, Interval: c.cfg.AlertInterval, Logger: &log})
		runs = append(runs, dl.Run, al.Run)
	}
	if c.cfg.has(RoleRecovery) {
		or, err := orchestrator.New(c.js, stores, orchestrator.Config{
			Registry: c.registry, Retry: c.cfg.retryPolicy(), CoolDown: c.cfg.CoolDown, Limits: c.cfg.limits(), Logger: &log,
			TracerProvider: c.cfg.TracerProvider,
		})
		if err != nil {
			return nil, err
		}
		runs = append(runs, or.Run)
	}
	if c.cfg.has(RoleAPI) {
		runs = append(runs, c.serveAPI)
	}
	return runs, nil
}

// JournalStats reports how many flushes this client's workers made to the
// journal and how many rows they carried: rows over flushes is the group
// commit at work. It counts this process only; a program that embeds
// workers can export it as a metric (the dashboard, which runs no worker,
// cannot show it), and salvage bench reports it.
func (c *Client) JournalStats() (flushes, rows int64) {
	c.storesMu.Lock()
	st := c.stores
	c.storesMu.Unlock()
	if st == nil {
		return 0, 0
	}
	return st.JournalStats()
}
