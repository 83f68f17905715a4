package consumers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/streams"
)

var (
	// ErrUnknownEnvelope is returned for an envelope id no record has.
	ErrUnknownEnvelope = errors.New("unknown envelope")
	// ErrAlreadyResolved is returned when replaying or resolving an
	// envelope that is already resolved.
	ErrAlreadyResolved = errors.New("envelope already resolved")
	// ErrSuperseded is returned when replaying or resolving an envelope a
	// later envelope of the same chunk replaced; act on that one.
	ErrSuperseded = errors.New("envelope superseded")
)

// Operator holds what an operator can do to the DLQ: list, show, replay,
// resolve and acknowledge envelopes. Every change is a CAS on the
// envelope's record, so concurrent operators and orchestrators agree.
type Operator struct {
	js     jetstream.JetStream
	stores *kv.Stores
}

// NewOperator returns the operator actions over a deployment.
func NewOperator(js jetstream.JetStream, stores *kv.Stores) *Operator {
	return &Operator{js: js, stores: stores}
}

// EnvelopeFilter narrows a listing; zero fields match everything.
type EnvelopeFilter struct {
	Category string `json:"category,omitempty"`
	Status   string `json:"status,omitempty"`
	Job      string `json:"job_id,omitempty"`
	// MinAge keeps envelopes at least this old.
	MinAge time.Duration `json:"-"`
}

// Empty reports whether f matches every envelope: no category, status
// or job, and no minimum age above zero.
func (f EnvelopeFilter) Empty() bool {
	return f.Category == "" && f.Status == "" && f.Job == "" && f.MinAge <= 0
}

// Select returns the records of recs that f matches at now, oldest first.
func (f EnvelopeFilter) Select(recs []kv.EnvelopeRecord, now time.Time) []kv.EnvelopeRecord {
	out := make([]kv.EnvelopeRecord, 0, len(recs))
	for _, r := range recs {
		if (f.Category != "" && r.Category != f.Category) || (f.Status != "" && r.Status != f.Status) ||
			(f.Job != "" && r.Job != f.Job) || (f.MinAge > 0 && now.Sub(r.CreatedAt) < f.MinAge) {
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// List returns the matching envelope records, oldest first.
func (o *Operator) List(ctx context.Context, f EnvelopeFilter) ([]kv.EnvelopeRecord, error) {
	recs, err := o.stores.Envelopes.List(ctx)
	if err != nil {
		return nil, err
	}
	return f.Select(recs, time.Now()), nil
}

// Detail is everything about one envelope: its record, the envelope as
// published, the chunk's checkpoint and the journal rows of its epoch.
type Detail struct {
	Record     kv.EnvelopeRecord `json:"record"`
	Envelope   recovery.Envelope `json:"envelope"`
	Checkpoint *kv.Checkpoint    `json:"checkpoint,omitempty"`
	Journal    []kv.JournalRow   `json:"journal"`
}

// Show returns an envelope's detail, or ErrUnknownEnvelope.
func (o *Operator) Show(ctx context.Context, id string) (Detail, error) {
	var d Detail
	rec, err := o.record(ctx, id)
	if err != nil {
		return d, err
	}
	d.Record = rec
	if d.Envelope, err = readEnvelope(ctx, o.js, rec); err != nil {
		return d, err
	}
	if cp, _, err := o.stores.Checkpoints.Get(ctx, rec.Job, rec.Chunk); err == nil {
		cp.Outputs, cp.Snapshots = nil, nil
		d.Checkpoint = &cp
	}
	rows, err := o.stores.Journal.Load(ctx, rec.Job, rec.Chunk, d.Envelope.Checkpoint.Epoch)
	if err != nil {
		return d, err
	}
	d.Journal = []kv.JournalRow{}
	for _, r := range recovery.SortedRows(rows) {
		d.Journal = append(d.Journal, r.JournalRow)
	}
	return d, nil
}

func (o *Operator) record(ctx context.Context, id string) (kv.EnvelopeRecord, error) {
	if err := streams.ValidateToken("envelope_id", id); err != nil {
		return kv.EnvelopeRecord{}, err
	}
	rec, _, err := o.stores.Envelopes.Get(ctx, id)
	if errors.Is(err, kv.ErrNotFound) {
		return rec, fmt.Errorf("%w: %s", ErrUnknownEnvelope, id)
	}
	return rec, err
}

// readEnvelope reads the envelope as published in SALVAGE_DLQ.
func readEnvelope(ctx context.Context, js jetstream.JetStream, rec kv.EnvelopeRecord) (recovery.Envelope, error) {
	var env recovery.Envelope
	s, err := js.Stream(ctx, streams.DLQ)
	if err != nil {
		return env, err
	}
	m, err := s.GetMsg(ctx, rec.DLQSeq)
	if err != nil {
		return env, fmt.Errorf("envelope %s at SALVAGE_DLQ %d: %w", rec.ID, rec.DLQSeq, err)
	}
	if env, err = recovery.DecodeEnvelope(m.Data); err != nil {
		return env, fmt.Errorf("envelope %s: %w", rec.ID, err)
	}
	return env, nil
}

// Resolve marks an envelope resolved by hand: an operator settled it.
func (o *Operator) Resolve(ctx context.Context, id, by, note string) (kv.EnvelopeRecord, error) {
	if _, err := o.record(ctx, id); err != nil {
		return kv.EnvelopeRecord{}, err
	}
	return o.stores.Envelopes.Mutate(ctx, id, func(r *kv.EnvelopeRecord) error {
		if r.Status == kv.EnvelopeResolved {
			return fmt.Errorf("%w: %s", ErrAlreadyResolved, id)
		}
		if r.Status == kv.EnvelopeSuperseded {
			return fmt.Errorf("%w: %s by %s", ErrSuperseded, id, r.SupersededBy)
		}
		r.Status, r.Requeued, r.ResolvedBy, r.Human = kv.EnvelopeResolved, false, by, true
		r.Notes = append(r.Notes, fmt.Sprintf("resolved by %s: %s", by, streams.Clip(note, 1024)))
		return nil
	})
}

// Ack records that a human has seen an envelope (it stops the
// unacknowledged-escalation alert). Acknowledging twice keeps the first.
func (o *Operator) Ack(ctx context.Context, id, by string) (kv.EnvelopeRecord, error) {
	if _, err := o.record(ctx, id); err != nil {
		return kv.EnvelopeRecord{}, err
	}
	return o.stores.Envelopes.Mutate(ctx, id, func(r *kv.EnvelopeRecord) error {
		if r.AckedBy != "" {
			return kv.ErrNoChange
		}
		r.AckedBy, r.AckedAt = by, time.Now().UTC()
		return nil
	})
}
