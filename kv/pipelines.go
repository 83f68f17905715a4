package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/salvagetype"
)

// PipelineState is the value of a salvage_pipelines key, written when a
// worker that runs the pipeline starts and when it is paused or resumed.
type PipelineState struct {
	Pipeline string `json:"pipeline"`
	Paused   bool   `json:"paused"`
	// PausedAt, PausedBy and Reason describe the latest pause; ResumedAt
	// and ResumedBy the latest resume.
	PausedAt  time.Time `json:"paused_at,omitzero"`
	PausedBy  string    `json:"paused_by,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	ResumedAt time.Time `json:"resumed_at,omitzero"`
	ResumedBy string    `json:"resumed_by,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	// Fingerprint names the definition every process running the
	// pipeline's workers or recovery runs (recovery.Fingerprint), and
	// Definition is that definition, at most DefinitionLinesMax lines.
	// DefinedBy and DefinedAt say which process registered it and when;
	// PreviousFingerprint is the one an upgrade replaced.
	Fingerprint         string    `json:"fingerprint,omitempty"`
	Definition          []string  `json:"definition,omitempty"`
	DefinedBy           string    `json:"defined_by,omitempty"`
	DefinedAt           time.Time `json:"defined_at,omitzero"`
	PreviousFingerprint string    `json:"previous_fingerprint,omitempty"`
}

// pipelineStore is the salvage_pipelines store.
type pipelineStore struct {
	b   jetstream.KeyValue
	js  jetstream.JetStream
	now func() time.Time
}

// List returns every pipeline recorded, in one multi-last direct get.
func (s *pipelineStore) List(ctx context.Context) ([]PipelineState, error) {
	var out []PipelineState
	err := lastValues(ctx, s.js, BucketPipelines, ">", func(_ string, value []byte, _ uint64) error {
		var p PipelineState
		if err := json.Unmarshal(value, &p); err != nil {
			return fmt.Errorf("kv: decode pipeline state: %w", err)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// Get returns the state of pipeline (ErrNotFound when no worker that
// runs it ever started and nobody paused it).
func (s *pipelineStore) Get(ctx context.Context, pipeline string) (PipelineState, error) {
	p, _, err := getJSON[PipelineState](ctx, s.b, pipeline)
	return p, err
}

// Register records that pipeline exists (a worker runs it), running,
// unless it is recorded already.
func (s *pipelineStore) Register(ctx context.Context, pipeline string) error {
	_, err := createJSON(ctx, s.b, pipeline, PipelineState{Pipeline: pipeline, UpdatedAt: s.now().UTC()})
	if err != nil && !isConflict(err) {
		return fmt.Errorf("kv: register pipeline %s: %w", pipeline, err)
	}
	return nil
}

// Define registers fingerprint and definition as pipeline's definition, by
// process by, when none is registered (or the same is). When another one
// is, it returns a *DefinitionError (errors.Is ErrDefinitionDiffers)
// unless upgrade is set: an operator asked for this definition to
// replace the registered one. definition is kept to its first maxLines
// lines (the fingerprint covers them all).
func (s *pipelineStore) Define(ctx context.Context, pipeline, fingerprint string, definition []string, maxLines int, by string, upgrade bool) (PipelineState, error) {
	shown := definition[:min(len(definition), maxLines)]
	p, _, err := mutateJSON(ctx, s.b, pipeline, func(p *PipelineState, exists bool) error {
		if !exists {
			*p = PipelineState{Pipeline: pipeline}
		}
		switch {
		case p.Fingerprint == fingerprint:
			return ErrNoChange
		case p.Fingerprint != "" && !upgrade:
			return &salvagetype.DefinitionError{Pipeline: pipeline, Registered: p.Fingerprint, Ours: fingerprint, By: p.DefinedBy, At: p.DefinedAt,
				Diff: definitionDiff(p.Definition, shown, 20)}
		}
		now := s.now().UTC()
		if p.Fingerprint != "" {
			p.PreviousFingerprint = p.Fingerprint
		}
		p.Fingerprint, p.Definition, p.DefinedBy, p.DefinedAt, p.UpdatedAt = fingerprint, shown, by, now, now
		return nil
	})
	return p, err
}

// definitionDiff lists the lines only was has ("- …") and those only now
// has ("+ …"), at most max.
func definitionDiff(was, now []string, max int) []string {
	in := func(lines []string) map[string]bool {
		m := make(map[string]bool, len(lines))
		for _, l := range lines {
			m[l] = true
		}
		return m
	}
	inWas, inNow := in(was), in(now)
	var out []string
	for _, l := range was {
		if !inNow[l] && len(out) < max {
			out = append(out, "- "+l)
		}
	}
	for _, l := range now {
		if !inWas[l] && len(out) < max {
			out = append(out, "+ "+l)
		}
	}
	return out
}

// SetPaused pauses or resumes pipeline by CAS; by and reason say who and
// why. It returns the state as stored and whether it changed: pausing a
// paused pipeline changes nothing.
func (s *pipelineStore) SetPaused(ctx context.Context, pipeline string, paused bool, by, reason string) (PipelineState, bool, error) {
	changed := false
	p, _, err := mutateJSON(ctx, s.b, pipeline, func(p *PipelineState, exists bool) error {
		changed = false // a lost race runs fn again
		if !exists {
			*p = PipelineState{Pipeline: pipeline}
		}
		if p.Paused == paused {
			return ErrNoChange
		}
		now := s.now().UTC()
		p.Paused, p.UpdatedAt, changed = paused, now, true
		if paused {
			p.PausedAt, p.PausedBy, p.Reason = now, by, reason
		} else {
			p.ResumedAt, p.ResumedBy = now, by
		}
		return nil
	})
	return p, changed, err
}

// DecodePipelineState reads a pipeline's state from a watch entry; ok is
// false for a deleted key or a value that does not decode.
func DecodePipelineState(e jetstream.KeyValueEntry) (PipelineState, bool) {
	var p PipelineState
	if e == nil || e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &p) != nil {
		return p, false
	}
	return p, true
}
