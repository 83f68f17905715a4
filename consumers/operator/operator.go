package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Operator holds what an operator can do to the DLQ: list, show, replay,
// resolve and acknowledge envelopes. Every change is a CAS on the
// envelope's record, so concurrent operators and orchestrators agree.
type Operator struct {
	js     jetstream.JetStream
	stores *kv.Stores
}

// New returns the operator actions over a deployment.
func New(js jetstream.JetStream, stores *kv.Stores) *Operator {
	return &Operator{js: js, stores: stores}
}

// EnvelopeFilter narrows a listing; zero fields match everything.
type EnvelopeFilter struct {
	Category salvagetype.Category       `json:"category,omitempty"`
	Status   salvagetype.EnvelopeStatus `json:"status,omitempty"`
	Job      string                     `json:"job_id,omitempty"`
	// MinAge keeps envelopes in their status at least this long.
	MinAge time.Duration `json:"-"`
}

// Empty reports whether f matches every envelope: no category, status
// or job, and no minimum age above zero.
func (f EnvelopeFilter) Empty() bool {
	return f.Category == "" && f.Status == "" && f.Job == "" && f.MinAge <= 0
}

// index is f as a filter of the envelope index.
func (f EnvelopeFilter) index() kv.IndexFilter {
	return kv.IndexFilter{Status: f.Status, Category: f.Category, Job: f.Job}
}

// Page returns the records f matches at [offset, offset+limit), in the
// order they entered their status (newest first when newest is set), read
// from the envelope index: O(log n + limit) whatever the bucket holds.
// MinAge keeps those in their status at least that long.
func (o *Operator) Page(ctx context.Context, f EnvelopeFilter, offset, limit int, newest bool) (kv.EnvelopePage, error) {
	return o.stores.Envelopes.Page(ctx, f.index(), f.MinAge, offset, limit, newest)
}

// Detail is everything about one envelope: its record, the envelope as
// published, the chunk's checkpoint and the journal rows of its epoch. It
// is never encoded: users read salvage.EnvelopeDetail, built from it.
type Detail struct {
	Record     kv.EnvelopeRecord
	Envelope   salvagetype.Envelope
	Checkpoint *kv.Checkpoint
	Journal    []kv.JournalRow
}

// Show returns an envelope's detail, or ErrUnknownEnvelope.
func (o *Operator) Show(ctx context.Context, id string) (Detail, error) {
	var d Detail
	rec, err := o.record(ctx, id)
	if err != nil {
		return d, err
	}
	d.Record = rec
	if d.Envelope, err = flow.ReadEnvelope(ctx, o.js, o.stores, rec); err != nil {
		return d, err
	}
	part, err := flow.EnvelopePart(ctx, o.stores, d.Envelope)
	if err != nil {
		return d, err
	}
	if cp, _, err := part.Checkpoints.Get(ctx, rec.Job, rec.Chunk); err == nil {
		cp.Outputs, cp.Snapshots = nil, nil
		d.Checkpoint = &cp
	}
	rows, err := part.Journal.Load(ctx, rec.Job, rec.Chunk, d.Envelope.Checkpoint.Epoch)
	if err != nil {
		return d, err
	}
	d.Journal = []kv.JournalRow{}
	for _, r := range recovery.Rows(rows).Sorted() {
		d.Journal = append(d.Journal, r.JournalRow)
	}
	return d, nil
}

func (o *Operator) record(ctx context.Context, id string) (kv.EnvelopeRecord, error) {
	if err := salvagetype.ValidateToken("envelope_id", id); err != nil {
		return kv.EnvelopeRecord{}, err
	}
	rec, _, err := o.stores.Envelopes.Get(ctx, id)
	if errors.Is(err, kv.ErrNotFound) {
		return rec, fmt.Errorf("%w: %s", salvagetype.ErrUnknownEnvelope, id)
	}
	return rec, err
}

// Resolve marks an envelope resolved by hand: an operator settled it.
func (o *Operator) Resolve(ctx context.Context, id, by, note string) (kv.EnvelopeRecord, error) {
	if _, err := o.record(ctx, id); err != nil {
		return kv.EnvelopeRecord{}, err
	}
	return o.stores.Envelopes.Mutate(ctx, id, func(r *kv.EnvelopeRecord) error {
		if r.Status == salvagetype.EnvelopeResolved {
			return fmt.Errorf("%w: %s", salvagetype.ErrAlreadyResolved, id)
		}
		if r.Status == salvagetype.EnvelopeSuperseded {
			return fmt.Errorf("%w: %s by %s", salvagetype.ErrSuperseded, id, r.SupersededBy)
		}
		r.Status, r.Requeued, r.ResolvedBy, r.Human = salvagetype.EnvelopeResolved, false, by, true
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
