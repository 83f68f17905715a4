package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/salvagetype"
)

// Breaker is the value of a salvage_breakers key: the state every worker
// of a deployment agrees on for one external system. Only state changes
// are written, by CAS; failures are counted in each process.
type Breaker struct {
	System string                   `json:"system"`
	State  salvagetype.BreakerState `json:"state"`
	// OpenedAt is when the breaker last opened; RetryAt ends its
	// cool-down, after which one probe may call the system.
	OpenedAt time.Time `json:"opened_at,omitzero"`
	RetryAt  time.Time `json:"retry_at,omitzero"`
	// Probe is the chunk (<job>.<chunk>) whose calls may reach the system
	// while the breaker is half-open; empty lets the first chunk that
	// calls take the probe. ProbeAt is when the probe was chosen.
	Probe   string    `json:"probe,omitempty"`
	ProbeAt time.Time `json:"probe_at,omitzero"`
	// ProbePipeline is the probe's pipeline: while it is paused the probe
	// cannot run, and its silence is not the system's.
	ProbePipeline string `json:"probe_pipeline,omitempty"`
	// Opens counts how often the breaker opened.
	Opens int `json:"opens"`
	// Reason is the failure that last opened it.
	Reason    string    `json:"reason,omitempty"`
	UpdatedBy string    `json:"updated_by,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// breakerStore is the salvage_breakers store.
type breakerStore struct {
	b   jetstream.KeyValue
	js  jetstream.JetStream
	now func() time.Time
}

// List returns every breaker, in one multi-last direct get.
func (s *breakerStore) List(ctx context.Context) ([]Breaker, error) {
	var out []Breaker
	err := lastValues(ctx, s.js, BucketBreakers, ">", func(_ string, value []byte, _ uint64) error {
		var b Breaker
		if err := json.Unmarshal(value, &b); err != nil {
			return fmt.Errorf("kv: decode breaker: %w", err)
		}
		out = append(out, b)
		return nil
	})
	return out, err
}

// Get returns the breaker of system (ErrNotFound when it never opened: a
// missing breaker is closed) and its revision.
func (s *breakerStore) Get(ctx context.Context, system string) (Breaker, uint64, error) {
	return getJSON[Breaker](ctx, s.b, system)
}

// Mutate applies fn to the breaker of system (a closed one when absent)
// and writes it by CAS, retrying lost races; fn returning ErrNoChange
// writes nothing. It returns the breaker as stored and its revision.
func (s *breakerStore) Mutate(ctx context.Context, system, by string, fn func(b *Breaker) error) (Breaker, uint64, error) {
	return mutateJSON(ctx, s.b, system, func(b *Breaker, exists bool) error {
		if !exists {
			*b = Breaker{System: system, State: salvagetype.BreakerClosed}
		}
		if err := fn(b); err != nil {
			return err
		}
		b.System, b.UpdatedBy, b.UpdatedAt = system, by, s.now().UTC()
		return nil
	})
}

// DecodeBreaker reads a breaker from a watch entry; ok is false for a
// deleted key or a value that does not decode.
func DecodeBreaker(e jetstream.KeyValueEntry) (Breaker, bool) {
	var b Breaker
	if e == nil || e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &b) != nil {
		return b, false
	}
	return b, true
}
