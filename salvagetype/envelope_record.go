package salvagetype

import "time"

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

// Since is when r entered its status: StatusAt, or CreatedAt on a record
// written before Salvage kept StatusAt.
func (r EnvelopeRecord) Since() time.Time {
	if r.StatusAt.IsZero() {
		return r.CreatedAt
	}
	return r.StatusAt
}

// StoppedCancelled is EnvelopeRecord.Stopped of the envelope that settles
// the effects of a chunk its job's cancel stopped.
const StoppedCancelled = "cancelled"
