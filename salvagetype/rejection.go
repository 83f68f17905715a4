package salvagetype

import "time"

// RejectReason is why Salvage refused a job message or a chunk message:
// the last token of salvage.events.rejected.<reason> and a Rejection's
// reason.
type RejectReason string

// Rejection reasons.
const (
	RejectMalformedJSON   RejectReason = "malformed-json"
	RejectUnknownPipeline RejectReason = "unknown-pipeline"
	RejectOversized       RejectReason = "oversized"
	RejectBadToken        RejectReason = "bad-token"
	RejectBadSubject      RejectReason = "bad-subject"
	RejectBadInput        RejectReason = "bad-input"
	RejectDuplicateJob    RejectReason = "duplicate-job"
	// RejectOversizedChunk: a chunk message built from the job would
	// exceed the payload limit (JSON escaping can multiply its size).
	RejectOversizedChunk RejectReason = "oversized-chunk"
	// RejectTooManyChunks: the job splits into more chunks than its
	// pipeline allows.
	RejectTooManyChunks RejectReason = "too-many-chunks"
	// RejectPanic: the pipeline's split function panicked on the input;
	// the event's error carries the panic and its stack.
	RejectPanic RejectReason = "panic"
	// RejectSplitFailed: the job message could not be split after every
	// delivery the splitter consumer allows; it stays in SALVAGE_JOBS at
	// stream_seq.
	RejectSplitFailed RejectReason = "split-failed"
	// RejectBadChunk: a chunk message on SALVAGE_CHUNKS that its records
	// deny: its subject and body name different chunks, or its chunk
	// number or pipeline is not its job's. It is removed without running.
	RejectBadChunk RejectReason = "bad-chunk"
	// RejectBadReplay: a chunk message whose Salvage-Replay-Of or
	// Salvage-Recovery-Of names an envelope that is not its chunk's (or
	// none at all). It is removed without running, the envelope untouched.
	RejectBadReplay RejectReason = "bad-replay"
	// RejectReplayRefused: a replay published by hand that Salvage will
	// not run (its job was cancelled, a recovery is running on the
	// envelope, or compensated effects sit beside standing ones). The
	// envelope notes it.
	RejectReplayRefused RejectReason = "replay-refused"
)

// RejectionDataMax is the most of a refused payload a rejection event
// copies.
const RejectionDataMax = 4 << 10

// Rejection is published on salvage.events.rejected.<reason> for input that
// was refused or could not be split. It is bounded: Data holds the refused
// payload when it is at most RejectionDataMax bytes, else its first bytes
// with DataTruncated set; Size and SHA256 identify the whole of it, and
// StreamSeq finds it in SALVAGE_JOBS while it is still there.
type Rejection struct {
	Reason RejectReason `json:"reason"`
	// JobID is the job's id when the message named one (no job of that
	// id exists); the event then also goes to salvage.events.<job>.rejected.
	JobID         string    `json:"job_id,omitempty"`
	Error         string    `json:"error"`
	Subject       string    `json:"subject"`
	StreamSeq     uint64    `json:"stream_seq,omitempty"`
	Size          int       `json:"size"`
	SHA256        string    `json:"sha256"`
	Data          string    `json:"data,omitempty"`
	DataTruncated bool      `json:"data_truncated,omitempty"`
	At            time.Time `json:"at"`
}
