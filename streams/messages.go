package streams

import (
	"encoding/json"
	"time"
)

// JobMsg is the body of a job submitted on salvage.jobs.<pipeline>.
type JobMsg struct {
	// JobID is optional (nil when absent); when absent the job id comes
	// from Nats-Msg-Id or the stream sequence (see the design's identity
	// rule). Present, it must pass ValidateJobID: an empty one is refused.
	JobID    *string         `json:"job_id,omitempty"`
	Input    json.RawMessage `json:"input"`
	Budget   *JobBudget      `json:"budget,omitempty"`
	Metadata map[string]any  `json:"metadata,omitempty"`
}

// JobBudget caps what a job may spend.
type JobBudget struct {
	Tokens int64   `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
}

// ChunkMsg is a chunk on SALVAGE_CHUNKS. It is self-contained so a hand
// replay without headers still works.
type ChunkMsg struct {
	Job      string          `json:"job_id"`
	Chunk    int             `json:"chunk"`
	Pipeline string          `json:"pipeline"`
	Epoch    int             `json:"epoch"`
	TraceID  string          `json:"trace_id"`
	Input    json.RawMessage `json:"input"`
}

// Rejection is published on salvage.events.rejected.<reason> for input that
// was refused. Data carries the refused payload (unless it was oversized)
// so nothing is lost.
type Rejection struct {
	Reason    string    `json:"reason"`
	Error     string    `json:"error"`
	Subject   string    `json:"subject"`
	StreamSeq uint64    `json:"stream_seq,omitempty"`
	Size      int       `json:"size"`
	Data      string    `json:"data,omitempty"`
	At        time.Time `json:"at"`
}

// Rejection reasons, the last token of salvage.events.rejected.<reason>.
const (
	RejectMalformedJSON   = "malformed-json"
	RejectUnknownPipeline = "unknown-pipeline"
	RejectOversized       = "oversized"
	RejectBadToken        = "bad-token"
	RejectBadSubject      = "bad-subject"
	RejectBadInput        = "bad-input"
	RejectDuplicateJob    = "duplicate-job"
)

// JobEvent is published on salvage.events.<job>.<kind>.
type JobEvent struct {
	Job      string    `json:"job_id"`
	Kind     string    `json:"kind"`
	Pipeline string    `json:"pipeline,omitempty"`
	Status   string    `json:"status,omitempty"`
	Chunks   int       `json:"chunks"`
	Done     int       `json:"done"`
	Failed   int       `json:"failed"`
	TraceID  string    `json:"trace_id,omitempty"`
	At       time.Time `json:"at"`
}

// Advisory is the part of a JetStream consumer advisory Salvage reads.
type Advisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
	Reason     string `json:"reason,omitempty"`
}
