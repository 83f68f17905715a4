package kv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Envelope record statuses. Each means one thing.
const (
	// EnvelopeOpen: waiting for the recovery orchestrator.
	EnvelopeOpen = "open"
	// EnvelopeRecovering: a strategy runs, or the chunk was requeued
	// (recovery or replay) and has not ended yet.
	EnvelopeRecovering = "recovering"
	// EnvelopeResolved: the chunk finished (done, or cancelled with its
	// job), or a human resolved the envelope by hand.
	EnvelopeResolved = "resolved"
	// EnvelopeSuperseded: the requeued chunk failed again; the later
	// envelope named in SupersededBy carries its fate.
	EnvelopeSuperseded = "superseded"
	// EnvelopeEscalated: a human must act (effects left standing, or
	// recovery gave up); it stays open until someone resolves it.
	EnvelopeEscalated = "escalated"
	// EnvelopeDeadEnd: a permanent failure with no effects to undo.
	EnvelopeDeadEnd = "dead-end"
	// EnvelopeAbandoned: every effect was compensated; the chunk was
	// given up with nothing left standing.
	EnvelopeAbandoned = "abandoned"
)

// EnvelopeRecord is the mutable state of one failure envelope; the envelope
// itself is immutable in SALVAGE_DLQ.
type EnvelopeRecord struct {
	ID        string   `json:"envelope_id"`
	Job       string   `json:"job_id"`
	Chunk     int      `json:"chunk"`
	Category  string   `json:"category"`
	Strategy  string   `json:"strategy"`
	Status    string   `json:"status"`
	Attempts  int      `json:"attempts"`
	Notes     []string `json:"notes,omitempty"`
	StreamSeq uint64   `json:"stream_seq"`
	Subject   string   `json:"subject"`
	// DLQSeq is the envelope's sequence in SALVAGE_DLQ
	// (`nats stream get SALVAGE_DLQ <seq>`).
	DLQSeq  uint64 `json:"dlq_seq"`
	TraceID string `json:"trace_id,omitempty"`
	// Replays counts operator replays.
	Replays int `json:"replays,omitempty"`
	// RecoveringBy and LeaseUntil say which orchestrator runs the
	// strategy; another may take the envelope over once the lease passed.
	RecoveringBy string    `json:"recovering_by,omitempty"`
	LeaseUntil   time.Time `json:"lease_until,omitzero"`
	// Requeued is set while a requeued chunk runs; the worker resolves
	// the envelope when the chunk finishes.
	Requeued bool `json:"requeued,omitempty"`
	// Left names the effects nobody could undo, for the human who must.
	Left []LeftEffect `json:"left,omitempty"`
	// SupersededBy names the later envelope of the same chunk.
	SupersededBy string `json:"superseded_by,omitempty"`
	// Human is set once a person acted on the envelope or its chunk
	// (replay, resolve by hand, cancelling the job): its outcome then
	// does not count as an automatic recovery.
	Human bool `json:"human,omitempty"`
	// ResolvedBy says who resolved it: "chunk" when its chunk finished,
	// else the person (or "cancel" when its job was cancelled).
	ResolvedBy string `json:"resolved_by,omitempty"`
	// Alerts lists the per-envelope alert kinds already raised.
	Alerts    []string  `json:"alerts,omitempty"`
	AckedBy   string    `json:"acked_by,omitempty"`
	AckedAt   time.Time `json:"acked_at,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// LeftEffect is an effect nobody could undo, named for the human who must.
type LeftEffect struct {
	Tool       string `json:"tool"`
	System     string `json:"system,omitempty"`
	ResourceID string `json:"resource_id,omitempty"`
	JournalKey string `json:"journal_key"`
}

// String names the effect as "tool resource (journal key)".
func (l LeftEffect) String() string {
	return l.Tool + " " + l.ResourceID + " (journal " + l.JournalKey + ")"
}

// Alerted reports whether alert kind already fired for this envelope.
func (r EnvelopeRecord) Alerted(kind string) bool {
	for _, k := range r.Alerts {
		if k == kind {
			return true
		}
	}
	return false
}

// Final reports whether the envelope reached an outcome no strategy
// changes: resolved, superseded, escalated, dead-end or abandoned.
func (r EnvelopeRecord) Final() bool {
	switch r.Status {
	case EnvelopeResolved, EnvelopeSuperseded, EnvelopeEscalated, EnvelopeDeadEnd, EnvelopeAbandoned:
		return true
	}
	return false
}

// Open reports whether the envelope still needs Salvage or a person: open,
// recovering, or escalated and not yet resolved. The DLQ depth counts
// these.
func (r EnvelopeRecord) Open() bool {
	return r.Status == EnvelopeOpen || r.Status == EnvelopeRecovering || r.Status == EnvelopeEscalated
}

// Guard is the value of a chunkmsg.<stream_seq> key: the one envelope a
// chunk message may have.
type Guard struct {
	Envelope  string    `json:"envelope_id"`
	CreatedAt time.Time `json:"created_at"`
}

// Envelopes is the salvage_envelopes store.
type Envelopes struct {
	b   jetstream.KeyValue
	now func() time.Time
}

// GuardKey is the guard key of a chunk message.
func GuardKey(streamSeq uint64) string { return "chunkmsg." + strconv.FormatUint(streamSeq, 10) }

// Guard reserves the single envelope of the chunk message at streamSeq for
// envelopeID. When a guard already exists it returns that guard and
// ErrGuardExists: the caller must finish the existing envelope instead of
// making a second one.
func (s *Envelopes) Guard(ctx context.Context, streamSeq uint64, envelopeID string) (Guard, error) {
	g := Guard{Envelope: envelopeID, CreatedAt: s.now()}
	_, err := createJSON(ctx, s.b, GuardKey(streamSeq), g)
	if err == nil {
		return g, nil
	}
	if !isConflict(err) {
		return g, fmt.Errorf("kv: guard %d: %w", streamSeq, err)
	}
	cur, _, err := getJSON[Guard](ctx, s.b, GuardKey(streamSeq))
	if err != nil {
		return cur, err
	}
	return cur, fmt.Errorf("%w: chunk message %d has envelope %s", ErrGuardExists, streamSeq, cur.Envelope)
}

// Put creates an envelope record if absent; an existing one is kept.
func (s *Envelopes) Put(ctx context.Context, r EnvelopeRecord) error {
	now := s.now()
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.UpdatedAt = now
	_, err := createJSON(ctx, s.b, r.ID, r)
	if err != nil && !isConflict(err) {
		return fmt.Errorf("kv: put envelope %s: %w", r.ID, err)
	}
	return nil
}

// Get returns an envelope record and its revision, or ErrNotFound.
func (s *Envelopes) Get(ctx context.Context, id string) (EnvelopeRecord, uint64, error) {
	return getJSON[EnvelopeRecord](ctx, s.b, id)
}

// Mutate applies fn to an envelope record by CAS; ErrNotFound when absent.
func (s *Envelopes) Mutate(ctx context.Context, id string, fn func(r *EnvelopeRecord) error) (EnvelopeRecord, error) {
	r, _, err := mutateJSON(ctx, s.b, id, func(r *EnvelopeRecord, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: envelope %s", ErrNotFound, id)
		}
		if err := fn(r); err != nil {
			return err
		}
		r.UpdatedAt = s.now()
		return nil
	})
	return r, err
}

// List returns every envelope record (guard keys excluded).
func (s *Envelopes) List(ctx context.Context) ([]EnvelopeRecord, error) {
	keys, err := s.b.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv: list envelopes: %w", err)
	}
	var out []EnvelopeRecord
	for _, k := range keys {
		if len(k) > 9 && k[:9] == "chunkmsg." {
			continue
		}
		r, _, err := s.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
