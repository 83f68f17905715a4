package kv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// EnvelopeRecord is the mutable state of one failure envelope; the envelope
// itself is immutable in SALVAGE_DLQ.
type EnvelopeRecord struct {
	// EnvelopeRecord is the record as users see it (salvage.EnvelopeRecord);
	// its JSON fields are the record's own, flattened.
	salvagetype.EnvelopeRecord
	// RecoveringBy and LeaseUntil say which orchestrator runs the
	// strategy; another may take the envelope over once the lease passed.
	RecoveringBy string    `json:"recovering_by,omitempty"`
	LeaseUntil   time.Time `json:"lease_until,omitzero"`
	// Alerts lists the per-envelope alert kinds already raised.
	Alerts []string `json:"alerts,omitempty"`
	// IndexSeq and JobIndexSeq are the sequences of the record's entries
	// in SALVAGE_INDEX, by status and by job (see Envelopes.Page).
	IndexSeq    uint64 `json:"index_seq,omitempty"`
	JobIndexSeq uint64 `json:"job_index_seq,omitempty"`
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
	case salvagetype.EnvelopeResolved, salvagetype.EnvelopeSuperseded, salvagetype.EnvelopeEscalated, salvagetype.EnvelopeDeadEnd, salvagetype.EnvelopeAbandoned:
		return true
	}
	return false
}

// Open reports whether the envelope still needs Salvage or a person: open,
// recovering, or escalated and not yet resolved. The DLQ depth counts
// these.
func (r EnvelopeRecord) Open() bool {
	return r.Status == salvagetype.EnvelopeOpen || r.Status == salvagetype.EnvelopeRecovering || r.Status == salvagetype.EnvelopeEscalated
}

// guard is the value of a chunkmsg.<stream_seq> key
// (chunkmsg.p<k>.<stream_seq> in partition k): the one envelope a chunk
// message may have.
type guard struct {
	Envelope  string    `json:"envelope_id"`
	CreatedAt time.Time `json:"created_at"`
}

// envelopeStore is the salvage_envelopes store.
type envelopeStore struct {
	b   jetstream.KeyValue
	js  jetstream.JetStream
	now func() time.Time
	// keep is how long a settled record and a guard key are kept.
	keep time.Duration
	// idx writes the envelope index.
	idx *indexWriter
}

// Keep sets how long a settled envelope record (resolved, superseded,
// dead-end, abandoned) and a guard key are kept: Retention.Records.
// Default RecordsRetentionDefault.
func (s *envelopeStore) Keep(d time.Duration) {
	if d > 0 {
		s.keep = d
	}
}

// Settled reports whether the envelope reached an outcome nobody acts on
// any more: resolved, superseded, dead-end or abandoned (not escalated,
// which waits for a person).
func (r EnvelopeRecord) Settled() bool { return r.Final() && !r.Open() }

// GuardKey is the guard key of the chunk message at streamSeq of
// partition k's chunk stream: chunkmsg.<stream_seq> in partition 0,
// chunkmsg.p<k>.<stream_seq> in the others (each stream numbers its
// messages from 1, so a sequence alone names a message of one stream).
func GuardKey(k int, streamSeq uint64) string {
	if k == 0 {
		return "chunkmsg." + strconv.FormatUint(streamSeq, 10)
	}
	return "chunkmsg.p" + strconv.Itoa(k) + "." + strconv.FormatUint(streamSeq, 10)
}

// StopGuardKey is the guard key of the one envelope that settles the
// effects of epoch of a chunk a person stopped (its job cancelled).
func StopGuardKey(job string, chunk, epoch int) string {
	return "stopped." + ChunkKey(job, chunk) + "." + strconv.Itoa(epoch)
}

// isGuardKey tells the keys beside the records — guard keys and bodies,
// which hold a dot — from envelope ids (ULIDs).
func isGuardKey(key string) bool { return strings.Contains(key, ".") }

// bodyKey is the key of an envelope's body: the envelope as published on
// SALVAGE_DLQ, kept beside its record so that the record is enough to
// show, replay and recover the envelope when its DLQ message is gone
// (purged, aged out, lost).
func bodyKey(id string) string { return "body." + id }

// PutBody stores the body of envelope id (its JSON as published). It is
// written before the record and repeat-safe; the body lives as long as
// its record: kept while the record is unsettled, expiring with it once
// settled (Mutate keeps the two in step).
func (s *envelopeStore) PutBody(ctx context.Context, id string, body []byte) error {
	err := streams.Retry(ctx, func(ctx context.Context) error {
		_, err := s.b.Put(ctx, bodyKey(id), body)
		return err
	})
	if err != nil {
		return fmt.Errorf("kv: put envelope body %s: %w", id, err)
	}
	return nil
}

// Body returns the body of envelope id, or ErrNotFound (an envelope
// recorded before bodies were kept).
func (s *envelopeStore) Body(ctx context.Context, id string) ([]byte, error) {
	e, err := s.bodyEntry(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// bodyEntry reads the body of envelope id, or ErrNotFound.
func (s *envelopeStore) bodyEntry(ctx context.Context, id string) (jetstream.KeyValueEntry, error) {
	var e jetstream.KeyValueEntry
	err := streams.Retry(ctx, func(ctx context.Context) error {
		var err error
		e, err = s.b.Get(ctx, bodyKey(id))
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, fmt.Errorf("%w: envelope body %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("kv: get envelope body %s: %w", id, err)
	}
	return e, nil
}

// KeepBody sets the body of envelope id to expire after ttl, or to be
// kept (ttl 0), rewriting it as its key's only revision. A missing body
// is no error. Mutate calls it when a record settles or opens again; the
// retainer calls it for the settled envelopes of a job it retires, which
// repairs a crash between a record's settling write and its body's.
func (s *envelopeStore) KeepBody(ctx context.Context, id string, ttl time.Duration) error {
	for range casAttempts {
		e, err := s.bodyEntry(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		m := retainMsg(BucketEnvelopes, bodyKey(id), e.Value(), e.Revision(), ttl)
		err = streams.Retry(ctx, func(ctx context.Context) error {
			_, err := s.js.PublishMsg(ctx, m)
			return err
		})
		if isWrongLast(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("kv: keep envelope body %s: %w", id, err)
		}
		return nil
	}
	return fmt.Errorf("%w: envelope body %s kept changing", ErrConflict, id)
}

// Guard reserves the single envelope of the chunk message at streamSeq of
// partition k's chunk stream for envelopeID. When a guard already exists
// it returns that guard and ErrGuardExists: the caller must finish the
// existing envelope instead of making a second one.
func (s *envelopeStore) Guard(ctx context.Context, k int, streamSeq uint64, envelopeID string) (guard, error) {
	return s.GuardKeyed(ctx, GuardKey(k, streamSeq), envelopeID)
}

// GuardKeyed is Guard for any guard key (GuardKey, StopGuardKey).
func (s *envelopeStore) GuardKeyed(ctx context.Context, key, envelopeID string) (guard, error) {
	g := guard{Envelope: envelopeID, CreatedAt: s.now()}
	_, err := createJSON(ctx, s.b, key, g, jetstream.KeyTTL(s.keep))
	if err == nil {
		return g, nil
	}
	if !isConflict(err) {
		return g, fmt.Errorf("kv: guard %s: %w", key, err)
	}
	cur, _, err := getJSON[guard](ctx, s.b, key)
	if err != nil {
		return cur, err
	}
	return cur, fmt.Errorf("%w: %s has envelope %s", ErrGuardExists, key, cur.Envelope)
}

// Put creates an envelope record if absent; an existing one is kept.
func (s *envelopeStore) Put(ctx context.Context, r EnvelopeRecord) error {
	now := s.now()
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.UpdatedAt, r.StatusAt = now, now
	var opts []jetstream.KVCreateOpt
	if r.Settled() {
		opts = append(opts, jetstream.KeyTTL(s.keep))
	}
	// The index entries first: a record is never without them.
	if err := s.index(ctx, &r); err != nil {
		return err
	}
	_, err := createJSON(ctx, s.b, r.ID, r, opts...)
	if isConflict(err) {
		// The record stands, with its own entries.
		return s.idx.remove(ctx, r.IndexSeq, r.JobIndexSeq)
	}
	if err != nil {
		return fmt.Errorf("kv: put envelope %s: %w", r.ID, err)
	}
	return nil
}

// Get returns an envelope record and its revision, or ErrNotFound.
func (s *envelopeStore) Get(ctx context.Context, id string) (EnvelopeRecord, uint64, error) {
	return getJSON[EnvelopeRecord](ctx, s.b, id)
}

// Mutate applies fn to an envelope record by CAS; ErrNotFound when absent.
// A record that fn settles is written as its key's only revision, set to
// expire once kept for Keep's duration; one that opens again is written
// as usual and kept until it settles. A change of status writes the new
// index entry before the record and deletes the old one after; a record
// written before the index existed gets its entry on any change.
func (s *envelopeStore) Mutate(ctx context.Context, id string, fn func(r *EnvelopeRecord) error) (EnvelopeRecord, error) {
	// left are the entries the record leaves; tried those earlier
	// attempts wrote and lost.
	var left, tried []uint64
	// wasSettled is the record's state before fn: a record that settles
	// has its body expire with it (after the record's write: a crash
	// between the two keeps the body, which the retainer repairs); one
	// that opens again has its body kept first.
	var wasSettled bool
	w := func(ctx context.Context, key string, r EnvelopeRecord, rev uint64) (uint64, error) {
		if !r.Settled() {
			if wasSettled {
				if err := s.KeepBody(ctx, id, 0); err != nil {
					return 0, err
				}
			}
			return updateJSON(ctx, s.b, key, r, rev)
		}
		seq, err := retainJSON(ctx, s.js, BucketEnvelopes, key, r, rev, s.keep)
		if errors.Is(err, ErrConflict) {
			return 0, jetstream.ErrKeyRevisionMismatch
		}
		return seq, err
	}
	r, _, err := mutateJSONWith(ctx, s.b, id, w, func(r *EnvelopeRecord, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: envelope %s", ErrNotFound, id)
		}
		was := *r
		wasSettled = was.Settled()
		if left != nil {
			tried = append(tried, left[2:]...)
			left = nil
		}
		if err := fn(r); err != nil {
			return err
		}
		r.UpdatedAt, r.IndexSeq, r.JobIndexSeq = s.now(), was.IndexSeq, was.JobIndexSeq
		if r.Status == was.Status && was.IndexSeq != 0 {
			return nil
		}
		if err := s.index(ctx, r); err != nil {
			return err
		}
		left = []uint64{was.IndexSeq, was.JobIndexSeq, r.IndexSeq, r.JobIndexSeq}
		switch {
		case r.Status != was.Status:
			r.StatusAt = r.UpdatedAt
		case r.StatusAt.IsZero():
			r.StatusAt = was.UpdatedAt // the best guess a record of before has
		}
		return nil
	})
	if err != nil && left != nil {
		tried = append(tried, left[2:]...)
	}
	if err == nil && left != nil {
		tried = append(tried, left[:2]...)
	}
	if err == nil && r.Settled() && !wasSettled {
		// Best effort: a body left without its TTL is kept too long, never
		// lost, and the retainer gives it one.
		_ = s.KeepBody(ctx, id, s.keep)
	}
	return r, errors.Join(err, s.idx.remove(ctx, tried...))
}

// List returns every envelope record (guard keys excluded).
func (s *envelopeStore) List(ctx context.Context) ([]EnvelopeRecord, error) {
	keys, err := s.b.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv: list envelopes: %w", err)
	}
	var out []EnvelopeRecord
	for _, k := range keys {
		if isGuardKey(k) {
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
