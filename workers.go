package salvage

import (
	"context"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/salvagehq/salvage/consumers"
	"github.com/salvagehq/salvage/kv"
)

// Worker is one live Salvage process as its heartbeat describes it: its
// roles, the pipelines whose chunks it runs, how many of each at once and
// how many now. A process that stops heartbeating drops out of the list
// within 30 seconds.
type Worker struct {
	ID        string   `json:"id"`
	Host      string   `json:"host,omitempty"`
	PID       int      `json:"pid,omitempty"`
	Roles     []Role   `json:"roles"`
	Pipelines []string `json:"pipelines"`
	// Concurrency is how many chunks of each pipeline it runs at once;
	// InFlight how many it runs now.
	Concurrency int       `json:"concurrency,omitempty"`
	InFlight    int       `json:"in_flight"`
	StartedAt   time.Time `json:"started_at"`
	// UpdatedAt is its last heartbeat (every 10 seconds).
	UpdatedAt time.Time `json:"updated_at"`
}

// Workers lists the live processes of the deployment (those that run a
// role), by id. It reads the salvage_workers bucket, which each started
// client refreshes every 10 seconds.
func (c *Client) Workers(ctx context.Context) ([]Worker, error) {
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
		out = append(out, workerOf(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// heartbeat writes this process's record every kv.WorkerHeartbeat until
// ctx ends, then removes it.
func (c *Client) heartbeat(ctx context.Context, stores *kv.Stores) {
	id := c.id
	if id == "" {
		id = consumers.ProcessID()
	}
	host, _ := os.Hostname()
	state := kv.WorkerState{ID: id, Host: host, PID: os.Getpid(), StartedAt: time.Now().UTC()}
	for _, r := range c.cfg.Roles {
		state.Roles = append(state.Roles, string(r))
	}
	if c.cfg.has(RoleWorker) {
		state.Pipelines, state.Concurrency = c.registry.Names(), c.cfg.Concurrency
		slices.Sort(state.Pipelines)
	}
	t := time.NewTicker(kv.WorkerHeartbeat)
	defer t.Stop()
	for {
		if c.worker != nil {
			state.InFlight = c.worker.InFlight()
		}
		if err := stores.Workers.Beat(ctx, state); err != nil && ctx.Err() == nil {
			c.log.Debug().Err(err).Msg("heartbeat")
		}
		select {
		case <-ctx.Done():
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = stores.Workers.Gone(gctx, id)
			cancel()
			return
		case <-t.C:
		}
	}
}
