package salvage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/salvagehq/salvage/consumers"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// Worker is one live Salvage process as its heartbeat describes it; its
// fields are documented in salvagetype. A process that stops heartbeating
// drops out of the list within 30 seconds.
type Worker = salvagetype.Worker

// WorkerList lists the live processes of the deployment (those that run a
// role), by id. It reads the salvage_workers bucket, which each started
// client refreshes three times a lease (a worker's lease is its pools'
// shortest claim lease, at most 20 s; another process's 30 s).
func (c *Client) WorkerList(ctx context.Context) ([]Worker, error) {
	st, err := c.storesFor(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := st.Workers.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Worker, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Worker)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// processState is this process's record as its heartbeat writes it.
func (c *Client) processState(stores *kv.Stores) kv.WorkerState {
	id := c.id
	if id == "" {
		id = consumers.ProcessID()
	}
	host, _ := os.Hostname()
	state := kv.WorkerState{Worker: salvagetype.Worker{ID: id, Host: host, PID: os.Getpid(), StartedAt: time.Now().UTC(), LeaseMS: c.processLease().Milliseconds()}}
	state.Roles = slices.Clone(c.cfg.Roles)
	if c.cfg.has(RoleWorker) {
		state.Pipelines, state.Concurrency, state.Partitions = c.registry.Names(), c.cfg.Concurrency, stores.Partitions()
		slices.Sort(state.Pipelines)
	}
	if c.cfg.has(RoleRecovery) {
		state.Recovers = c.registry.Names()
		slices.Sort(state.Recovers)
	}
	return state
}

// beatOnce writes state now.
func (c *Client) beatOnce(ctx context.Context, stores *kv.Stores, state kv.WorkerState) {
	if c.worker != nil {
		state.InFlight, state.Partitions = c.worker.InFlight(), stores.Partitions()
	}
	err := stores.Workers.Beat(ctx, state)
	if err != nil && ctx.Err() == nil {
		c.log.Warn().Err(err).Msg("heartbeat: this process cannot write its record (it drops out of salvage workers, and /healthz says so)")
	}
	c.beat.record(err)
}

// processLease is this process's lease: its worker's (kv.ProcessLeaseMax
// at most), or kv.ProcessLeaseDefault for a process that claims nothing.
func (c *Client) processLease() time.Duration {
	if c.worker != nil {
		return c.worker.Lease()
	}
	return kv.ProcessLeaseDefault
}

// heartbeat writes this process's record three times a lease until ctx
// ends, then removes it. Start writes the first before any role runs
// (a claim of this process's worker is believed only while its lease
// holds), and ends it only after every role stopped.
func (c *Client) heartbeat(ctx context.Context, stores *kv.Stores, state kv.WorkerState) {
	t := time.NewTicker(state.Lease() / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = stores.Workers.Gone(gctx, state.ID)
			cancel()
			return
		case <-t.C:
		}
		c.beatOnce(ctx, stores, state)
	}
}

// alive reports whether process id has a record in salvage_workers whose
// lease holds: a worker believes another's claim only while it does. A
// store it cannot read (a deployment provisioned before the bucket) says
// yes.
func alive(stores *kv.Stores) func(ctx context.Context, id string) bool {
	return func(ctx context.Context, id string) bool {
		w, err := stores.Workers.Get(ctx, id)
		if errors.Is(err, kv.ErrNotFound) {
			return false
		}
		return err != nil || !w.Lapsed(time.Now())
	}
}

// ErrStalled is returned by Health for a process that runs roles but
// cannot write to JetStream: its heartbeat fails (a full disk, a server
// that disabled JetStream, lost permissions), so it has dropped out of
// Workers and its work does not move.
var ErrStalled = errors.New("salvage: process stalled")

// beatState is the heartbeat's last outcome.
type beatState struct {
	mu     sync.Mutex
	failed time.Time // since when the heartbeat fails; zero when it works
	err    error
}

func (b *beatState) record(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case err == nil:
		b.failed, b.err = time.Time{}, nil
	case b.failed.IsZero():
		b.failed, b.err = time.Now(), err
	default:
		b.err = err
	}
}

// Health reports whether this process can do its work: nil, or an error
// saying why not — not connected to NATS; JetStream not answering (a
// server that disabled it, on a full disk say); or, for a client running
// roles, its heartbeat failing to write (ErrStalled: it has dropped out of
// Workers). It makes one request to the server. /healthz answers with it.
func (c *Client) Health(ctx context.Context) error {
	if !c.js.Conn().IsConnected() {
		return fmt.Errorf("%w: not connected to NATS", ErrStalled)
	}
	if _, err := c.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("%w: JetStream does not answer: %w", ErrStalled, err)
	}
	c.beat.mu.Lock()
	defer c.beat.mu.Unlock()
	if c.beat.err != nil {
		return fmt.Errorf("%w: its heartbeat has failed since %s: %w", ErrStalled, c.beat.failed.UTC().Format(time.RFC3339), c.beat.err)
	}
	return nil
}

// partitionsCheckEvery is how often a process looks for partitions made
// since it started (Config.Partitions raised by another process): one
// stream lookup each time. Its splitter spreads new jobs over them and
// its worker takes their chunks from then on.
var partitionsCheckEvery = 30 * time.Second

// growPartitions binds the partitions made while the process runs, every
// partitionsCheckEvery, until ctx ends.
func (c *Client) growPartitions(ctx context.Context, stores *kv.Stores) {
	t := time.NewTicker(partitionsCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := stores.Partitions()
		n, err := stores.Grow(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.log.Warn().Err(err).Msg("look for partitions made since the start")
		case n > before:
			c.log.Info().Int("partitions", n).Int("before", before).Msg("partitions added since the start: new jobs spread over them, and this process's worker takes their chunks")
		}
	}
}
