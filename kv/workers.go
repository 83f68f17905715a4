package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// workersTTL is how long a process's record outlives its last heartbeat.
// ProcessLeaseDefault is the lease of a process that holds no claims (it
// runs no worker); ProcessLeaseMax caps a worker's, well under workersTTL,
// so a dead worker's lease lapses while its record still says so.
const (
	workersTTL          = 30 * time.Second
	ProcessLeaseDefault = 30 * time.Second
	ProcessLeaseMax     = 20 * time.Second
	// AckWaitMax caps AckWait, the lease of a chunk's claim, well under
	// claimsTTL (a live lease is renewed within it).
	AckWaitMax = time.Hour
)

// WorkerState is the value of a salvage_workers key: what one live process
// runs.
type WorkerState struct {
	salvagetype.Worker
	// Written is when the server stored the record (not stored in it).
	Written time.Time `json:"-"`
}

// Lease is the process's lease as a duration.
func (w WorkerState) Lease() time.Duration { return time.Duration(w.LeaseMS) * time.Millisecond }

// Lapsed reports whether the process's lease had passed at now: its last
// write, as the server stamped it, is more than a lease old.
func (w WorkerState) Lapsed(now time.Time) bool {
	return w.LeaseMS > 0 && !w.Written.IsZero() && now.After(w.Written.Add(w.Lease()))
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

// workerStore is the salvage_workers store. It binds its bucket on first use,
// so a deployment provisioned before it existed still opens.
type workerStore struct {
	js  jetstream.JetStream
	now func() time.Time

	mu sync.Mutex
	b  jetstream.KeyValue
}

func (s *workerStore) bucket(ctx context.Context) (jetstream.KeyValue, error) {
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
func (s *workerStore) Beat(ctx context.Context, w WorkerState) error {
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

// Get returns process id's record, Written set, or ErrNotFound when it
// has none (it stopped, or has not written one for workersTTL).
func (s *workerStore) Get(ctx context.Context, id string) (WorkerState, error) {
	b, err := s.bucket(ctx)
	if err != nil {
		return WorkerState{}, err
	}
	var e jetstream.KeyValueEntry
	err = streams.Retry(ctx, func(ctx context.Context) error {
		var err error
		e, err = b.Get(ctx, id)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return WorkerState{}, fmt.Errorf("%w: %s/%s", ErrNotFound, BucketWorkers, id)
	}
	if err != nil {
		return WorkerState{}, fmt.Errorf("kv: get %s/%s: %w", BucketWorkers, id, err)
	}
	return WorkerOf(e)
}

// WorkerOf reads a salvage_workers entry (a watched one too), Written
// set from the server's stamp.
func WorkerOf(e jetstream.KeyValueEntry) (WorkerState, error) {
	var w WorkerState
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		return w, fmt.Errorf("kv: decode %s/%s: %w", BucketWorkers, e.Key(), err)
	}
	w.Written = e.Created()
	return w, nil
}

// Gone removes w's record at once (a process that stops).
func (s *workerStore) Gone(ctx context.Context, id string) error {
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
func (s *workerStore) List(ctx context.Context) ([]WorkerState, error) {
	if _, err := s.bucket(ctx); errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []WorkerState
	err := lastMsgsOf(ctx, s.js, BucketWorkers, []string{">"}, func(_ string, m *jetstream.RawStreamMsg) error {
		var w WorkerState
		if err := json.Unmarshal(m.Data, &w); err != nil {
			return fmt.Errorf("kv: decode worker state: %w", err)
		}
		w.Written = m.Time
		out = append(out, w)
		return nil
	})
	return out, err
}
