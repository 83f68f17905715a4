package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketWorkers holds one key per live Salvage process, refreshed by its
// heartbeat; a key not refreshed within workersTTL ages out.
const BucketWorkers = "salvage_workers"

// workersTTL is how long a process's record outlives its last heartbeat;
// WorkerHeartbeat is how often a live process writes it.
const (
	workersTTL      = 30 * time.Second
	WorkerHeartbeat = 10 * time.Second
)

// WorkerState is the value of a salvage_workers key: what one live process
// runs.
type WorkerState struct {
	ID        string   `json:"id"`
	Host      string   `json:"host,omitempty"`
	PID       int      `json:"pid,omitempty"`
	Roles     []string `json:"roles"`
	Pipelines []string `json:"pipelines"`
	// Recovers are the pipelines whose envelopes it recovers (the
	// recovery role: it has their verify and compensation tools).
	Recovers []string `json:"recovers,omitempty"`
	// Concurrency is how many chunks of each pipeline it runs at once;
	// InFlight how many it runs now.
	Concurrency int       `json:"concurrency,omitempty"`
	InFlight    int       `json:"in_flight"`
	StartedAt   time.Time `json:"started_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Runs reports whether w runs pipeline's chunks.
func (w WorkerState) Runs(pipeline string) bool {
	for _, p := range w.Pipelines {
		if p == pipeline {
			return true
		}
	}
	return false
}

// Recovering reports whether w recovers pipeline's envelopes.
func (w WorkerState) Recovering(pipeline string) bool {
	for _, p := range w.Recovers {
		if p == pipeline {
			return true
		}
	}
	return false
}

// Workers is the salvage_workers store. It binds its bucket on first use,
// so a deployment provisioned before it existed still opens.
type Workers struct {
	js  jetstream.JetStream
	now func() time.Time

	mu sync.Mutex
	b  jetstream.KeyValue
}

func (s *Workers) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b != nil {
		return s.b, nil
	}
	b, err := s.js.KeyValue(ctx, BucketWorkers)
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", BucketWorkers, err)
	}
	s.b = b
	return b, nil
}

// Beat writes w's record (its UpdatedAt set now): one put, refreshing its
// time to live.
func (s *Workers) Beat(ctx context.Context, w WorkerState) error {
	b, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	w.UpdatedAt = s.now().UTC()
	data, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if _, err := b.Put(ctx, w.ID, data); err != nil {
		return fmt.Errorf("kv: heartbeat of %s: %w", w.ID, err)
	}
	return nil
}

// Get returns process id's record, or ErrNotFound when it has none (it
// stopped, or has not written one for workersTTL).
func (s *Workers) Get(ctx context.Context, id string) (WorkerState, error) {
	b, err := s.bucket(ctx)
	if err != nil {
		return WorkerState{}, err
	}
	w, _, err := getJSON[WorkerState](ctx, b, id)
	return w, err
}

// Gone removes w's record at once (a process that stops).
func (s *Workers) Gone(ctx context.Context, id string) error {
	b, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	if err := b.Delete(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("kv: remove %s: %w", id, err)
	}
	return nil
}

// List returns the live processes, in one multi-last direct get; none
// when the bucket does not exist yet.
func (s *Workers) List(ctx context.Context) ([]WorkerState, error) {
	if _, err := s.bucket(ctx); errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []WorkerState
	err := lastValues(ctx, s.js, BucketWorkers, ">", func(_ string, value []byte, _ uint64) error {
		var w WorkerState
		if err := json.Unmarshal(value, &w); err != nil {
			return fmt.Errorf("kv: decode worker state: %w", err)
		}
		out = append(out, w)
		return nil
	})
	return out, err
}
