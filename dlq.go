package salvage

import (
	"context"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// EnvelopeRecord is the state of one failure envelope: what became of it.
// The envelope itself (Envelope) is immutable in SALVAGE_DLQ.
type EnvelopeRecord = salvagetype.EnvelopeRecord

// LeftEffect is an effect that may stand and that Salvage did not undo,
// named for the person who must decide.
type LeftEffect = salvagetype.LeftEffect

// Envelope is a failure envelope as published on
// salvage.dlq.<category>.<pipeline>.<job>.<chunk>: what failed and what
// stands. Its fields are documented in salvagetype.
type Envelope = salvagetype.Envelope

// EnvelopeEntriesMax bounds each journal-key list of an Envelope.
const EnvelopeEntriesMax = salvagetype.EnvelopeEntriesMax

// Call is one journaled call.
type Call = salvagetype.Call

// Fingerprint identifies a side effect: the system it touched, the id
// that system gave it, and whether and how it can be undone.
type Fingerprint = salvagetype.Fingerprint

// CallAttempt is an earlier outcome of a call that a re-run replaced.
type CallAttempt = salvagetype.CallAttempt

// EnvelopeDetail is everything about one envelope: its record, the
// envelope as published, its chunk's checkpoint and the journal of the
// chunk's epoch.
type EnvelopeDetail struct {
	Record     EnvelopeRecord `json:"record"`
	Envelope   Envelope       `json:"envelope"`
	Checkpoint *Chunk         `json:"checkpoint,omitempty"`
	Journal    []Call         `json:"journal"`
	// Actions say which of replay, resolve and ack the server would take
	// now, why not, and what to weigh first.
	Actions EnvelopeActions `json:"actions"`
}

// EnvelopeFilter narrows a listing; zero fields match everything.
type EnvelopeFilter struct {
	Category Category       `json:"category,omitempty"`
	Status   EnvelopeStatus `json:"status,omitempty"`
	Job      string         `json:"job_id,omitempty"`
	// MinAge keeps envelopes in their status at least this long.
	MinAge time.Duration `json:"-"`
	// Newest lists the envelope that entered its status last first;
	// otherwise the one that entered it first comes first.
	Newest bool `json:"newest,omitempty"`
}

// Match reports whether f matches r at now.
func (f EnvelopeFilter) Match(r EnvelopeRecord, now time.Time) bool {
	return (f.Category == "" || r.Category == f.Category) && (f.Status == "" || r.Status == f.Status) &&
		(f.Job == "" || r.Job == f.Job) && (f.MinAge <= 0 || now.Sub(r.Since()) >= f.MinAge)
}

// EnvelopeList is a page of envelope records, in the order they entered
// their status.
type EnvelopeList struct {
	Envelopes []EnvelopeRecord `json:"envelopes"`
	// Total is how many match in all.
	Total  int `json:"total"`
	Offset int `json:"offset"`
	// NextOffset is where the next page starts; absent on the last.
	NextOffset int `json:"next_offset,omitempty"`
}

// EnvelopeList returns one page (nil: the first PageDefault) of the
// envelope records f matches, in the order they entered their status
// (f.Newest: the latest first); a filter naming a category or status that
// does not exist is refused (ErrBadFilter). It reads the envelope index,
// O(log n + page) whatever the DLQ holds. A page can be shorter than its
// limit by the records that changed status or expired while it was read;
// NextOffset still moves by the limit. Total is exact when one page holds
// every match; past that it counts index entries, which a record moving
// as it is read holds twice for a moment.
func (c *Client) EnvelopeList(ctx context.Context, f EnvelopeFilter, page *Page) (*EnvelopeList, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	offset, limit := page.window()
	pg, err := op.Page(ctx, f.machinery(), offset, limit, f.Newest)
	if err != nil {
		return nil, err
	}
	out := &EnvelopeList{Total: pg.Total, Offset: min(offset, pg.Total), Envelopes: make([]EnvelopeRecord, 0, len(pg.Records))}
	if offset+limit < pg.Total {
		out.NextOffset = offset + limit
	}
	for _, r := range pg.Records {
		out.Envelopes = append(out.Envelopes, envelopeRecordOf(r))
	}
	return out, nil
}

// EnvelopeGet returns everything about envelope id, or an error wrapping
// ErrUnknownEnvelope.
func (c *Client) EnvelopeGet(ctx context.Context, id string) (*EnvelopeDetail, error) {
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	d, err := op.Show(ctx, id)
	if err != nil {
		return nil, err
	}
	out := detailOf(d)
	out.Actions = envelopeActions(ctx, &out, op.PlanReplay)
	return &out, nil
}

// EnvelopeReplay puts envelope id's chunk back to work, as a person's doing
// recorded as by: it resumes from its journal, so no side effect repeats
// (after a compensation it runs fresh in a new epoch). The envelope is
// recovering until the chunk ends, then resolved or superseded. A replay
// in flight is not published again; a resolved or superseded envelope
// returns ErrAlreadyResolved or ErrSuperseded.
func (c *Client) EnvelopeReplay(ctx context.Context, id, by string) (*EnvelopeRecord, error) {
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	var r kv.EnvelopeRecord
	err = c.auditEnvelope(ctx, AuditReplay, id, by, "", func(by string) (err error) {
		r, err = op.Replay(ctx, id, by)
		return err
	})
	return record(r, err)
}

// EnvelopeResolve marks envelope id resolved by hand, by by, with a note.
func (c *Client) EnvelopeResolve(ctx context.Context, id, by, note string) (*EnvelopeRecord, error) {
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	var r kv.EnvelopeRecord
	err = c.auditEnvelope(ctx, AuditResolve, id, by, note, func(by string) (err error) {
		r, err = op.Resolve(ctx, id, by, note)
		return err
	})
	return record(r, err)
}

// EnvelopeAck records that by has seen envelope id (it stops the
// unacknowledged-escalation alert); the first acknowledgement is kept.
func (c *Client) EnvelopeAck(ctx context.Context, id, by string) (*EnvelopeRecord, error) {
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	var r kv.EnvelopeRecord
	err = c.auditEnvelope(ctx, AuditAck, id, by, "", func(by string) (err error) {
		r, err = op.Ack(ctx, id, by)
		return err
	})
	return record(r, err)
}

func record(r kv.EnvelopeRecord, err error) (*EnvelopeRecord, error) {
	if err != nil {
		return nil, err
	}
	out := envelopeRecordOf(r)
	return &out, nil
}

// RecoveryStats is the automatic recovery rate and what it is made of.
type RecoveryStats = salvagetype.RecoveryStats

// AutoRecoveryRate computes the automatic recovery rate per chunk over
// envelope records: of the chunks dead-lettered at least once, the share
// whose latest envelope is resolved because the chunk finished, or
// abandoned with nothing left standing, with no person acting on any
// envelope of the chunk. Dead ends, escalations and chunks still
// recovering count against it; a person's decision (a cancelled job's
// settlement, a rejected approval) is no failure; 1 when recs is empty.
func AutoRecoveryRate(recs []EnvelopeRecord) RecoveryStats {
	machine := make([]kv.EnvelopeRecord, len(recs))
	for i, r := range recs {
		// The fields the rate reads; no copy of notes or effects.
		machine[i] = kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: r.ID, Job: r.Job, Chunk: r.Chunk, Status: r.Status, ResolvedBy: r.ResolvedBy, Human: r.Human, Replays: r.Replays, CreatedAt: r.CreatedAt, Left: make([]salvagetype.LeftEffect, len(r.Left)), Stopped: r.Stopped, Rejected: r.Rejected}}
	}
	return recovery.AutoRecoveryRate(machine)
}
