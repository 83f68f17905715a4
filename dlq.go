package salvage

import (
	"context"
	"encoding/json"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// EnvelopeRecord is the state of one failure envelope: what became of it.
// The envelope itself (Envelope) is immutable in SALVAGE_DLQ.
type EnvelopeRecord struct {
	ID       string         `json:"envelope_id"`
	Job      string         `json:"job_id"`
	Chunk    int            `json:"chunk"`
	Category Category       `json:"category"`
	Strategy Strategy       `json:"strategy"`
	Status   EnvelopeStatus `json:"status"`
	// Attempts counts failed attempts of the strategy.
	Attempts int      `json:"attempts"`
	Notes    []string `json:"notes,omitempty"`
	// StreamSeq and Subject are the original chunk message's.
	StreamSeq uint64 `json:"stream_seq"`
	Subject   string `json:"subject"`
	// DLQSeq is the envelope's sequence in SALVAGE_DLQ.
	DLQSeq  uint64 `json:"dlq_seq"`
	TraceID string `json:"trace_id,omitempty"`
	// Replays counts operator replays.
	Replays int `json:"replays,omitempty"`
	// Requeued is set while a requeued chunk runs.
	Requeued bool `json:"requeued,omitempty"`
	// Left names the effects nobody could undo, for the person who must.
	Left []LeftEffect `json:"left,omitempty"`
	// SupersededBy names the later envelope of the same chunk.
	SupersededBy string `json:"superseded_by,omitempty"`
	// Human is set once a person acted on the envelope or its chunk.
	Human bool `json:"human,omitempty"`
	// ResolvedBy is "chunk" when the chunk finished, "cancel" when its
	// job was cancelled, else the person who resolved it.
	ResolvedBy string `json:"resolved_by,omitempty"`
	// Stopped is "cancelled" on the envelope that settles the effects of
	// a chunk its job's cancel stopped: unknown outcomes verified,
	// reversible effects compensated newest first, the rest escalated by
	// name. It cannot be replayed; the chunk stays cancelled-at-stage-N.
	Stopped string `json:"stopped,omitempty"`
	// Rejected is set on the envelope of a chunk whose approval a person
	// rejected: a decision, not a failure (AutoRecoveryRate leaves the
	// chunk out).
	Rejected  bool      `json:"rejected,omitempty"`
	AckedBy   string    `json:"acked_by,omitempty"`
	AckedAt   time.Time `json:"acked_at,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// StatusAt is when the envelope entered its status (zero on a record
	// written before Salvage kept it: then CreatedAt stands in).
	StatusAt time.Time `json:"status_at,omitzero"`
}

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
type Call struct {
	// Key is the journal key, <job>.<chunk>.<epoch>.<stage>.<agent>.<seq>;
	// the fields after it are its parts.
	Key   string `json:"key"`
	Job   string `json:"job_id"`
	Chunk int    `json:"chunk"`
	Epoch int    `json:"epoch"`
	Stage int    `json:"stage"`
	Agent string `json:"agent"`
	Seq   int    `json:"seq"`
	// Tool and System name what was called.
	Tool   string `json:"tool"`
	System string `json:"system,omitempty"`
	// InputHash is the sha256 of the call's input: a replayed agent that
	// asks for something else at this place is caught.
	InputHash string `json:"input_hash"`
	// Output is what the call returned, replayed on a resume.
	Output json.RawMessage `json:"output,omitempty"`
	Status CallStatus      `json:"status"`
	// IdempotencyKey is what the tool passed to the external system.
	IdempotencyKey string `json:"idempotency_key"`
	// Attempts counts tier-1 attempts, across runs.
	Attempts int `json:"attempts"`
	// LatencyMS is the call's duration, retries included.
	LatencyMS float64 `json:"latency_ms"`
	// LimitWaitMS is how long its requests waited for a rate limit's
	// budget, part of LatencyMS.
	LimitWaitMS float64 `json:"limit_wait_ms,omitempty"`
	// Error, ErrorClass (transient, rate-limited, timeout, permanent,
	// cancelled, panic) and ErrorStatus describe a failed call.
	Error       string `json:"error,omitempty"`
	ErrorClass  string `json:"error_class,omitempty"`
	ErrorStatus int    `json:"error_status,omitempty"`
	// Fingerprint identifies a side effect in its external system.
	Fingerprint *Fingerprint `json:"fingerprint,omitempty"`
	// Verified is set when the outcome was learned by asking the external
	// system (a Verify after a timeout or crash), not from the call.
	Verified bool `json:"verified,omitempty"`
	// Usage is what a model call spent.
	Usage *Usage `json:"usage,omitempty"`
	// Orphan marks a call of an earlier epoch no run will reach again.
	Orphan bool `json:"orphan,omitempty"`
	// RetentionRewrite is set on a row retention wrote again (to give it
	// a TTL, or to take one back): the same call and outcome, not an event
	// of its own, which counters of calls skip.
	RetentionRewrite bool `json:"retention_rewrite,omitempty"`
	// History holds the earlier outcomes of this call a re-run replaced,
	// oldest first.
	History    []CallAttempt `json:"history,omitempty"`
	TraceID    string        `json:"trace_id,omitempty"`
	StartedAt  time.Time     `json:"started_at"`
	FinishedAt time.Time     `json:"finished_at,omitzero"`
}

// Fingerprint identifies a side effect: the system it touched, the id
// that system gave it, and whether and how it can be undone.
type Fingerprint struct {
	System string `json:"system"`
	// ResourceID is the id the external system gave the effect.
	ResourceID string `json:"resource_id,omitempty"`
	Reversible bool   `json:"reversible"`
	// Compensation names the tool that undoes the effect.
	Compensation string `json:"compensation,omitempty"`
}

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

// Since is when r entered its status: StatusAt, or CreatedAt on a record
// written before Salvage kept StatusAt.
func (r EnvelopeRecord) Since() time.Time {
	if r.StatusAt.IsZero() {
		return r.CreatedAt
	}
	return r.StatusAt
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
	return record(op.Replay(ctx, id, by))
}

// EnvelopeResolve marks envelope id resolved by hand, by by, with a note.
func (c *Client) EnvelopeResolve(ctx context.Context, id, by, note string) (*EnvelopeRecord, error) {
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	return record(op.Resolve(ctx, id, by, note))
}

// EnvelopeAck records that by has seen envelope id (it stops the
// unacknowledged-escalation alert); the first acknowledgement is kept.
func (c *Client) EnvelopeAck(ctx context.Context, id, by string) (*EnvelopeRecord, error) {
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	return record(op.Ack(ctx, id, by))
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
		machine[i] = kv.EnvelopeRecord{ID: r.ID, Job: r.Job, Chunk: r.Chunk, Status: r.Status, ResolvedBy: r.ResolvedBy,
			Human: r.Human, Replays: r.Replays, CreatedAt: r.CreatedAt, Left: make([]salvagetype.LeftEffect, len(r.Left)),
			Stopped: r.Stopped, Rejected: r.Rejected}
	}
	return recovery.AutoRecoveryRate(machine)
}
