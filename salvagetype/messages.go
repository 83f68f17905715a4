package salvagetype

import (
	"encoding/json"
	"time"
)

// The bodies of the messages on the contract's subjects: a job submitted
// (SALVAGE_JOBS), a chunk (SALVAGE_CHUNKS, SALVAGE_BACKLOG), the events of
// a job (SALVAGE_EVENTS).

// JobMsg is the body of a job submitted on salvage.jobs.<pipeline>.
type JobMsg struct {
	// JobID is optional (nil when absent); when absent the job id comes
	// from Nats-Msg-Id or the stream sequence (see the design's identity
	// rule). Present, it must be a valid job id (a token, not a reserved id): an empty one is refused.
	JobID    *string         `json:"job_id,omitempty"`
	Input    json.RawMessage `json:"input"`
	Budget   *Budget         `json:"budget,omitempty"`
	Metadata map[string]any  `json:"metadata,omitempty"`
	// Tenant names whose job it is (a token): its chunks count against
	// the limit of tenant.<Tenant>, chunks in flight included. Absent,
	// the pipeline's TenantFrom names a metadata field that holds it.
	Tenant string `json:"tenant,omitempty"`
}

// ChunkMsg is a chunk on SALVAGE_CHUNKS (or, not yet admitted, on
// SALVAGE_BACKLOG). It is self-contained so a hand replay without headers
// still works.
type ChunkMsg struct {
	Job      string `json:"job_id"`
	Chunk    int    `json:"chunk"`
	Pipeline string `json:"pipeline"`
	Epoch    int    `json:"epoch"`
	TraceID  string `json:"trace_id"`
	// Partition is the job's partition (its record's), whose chunk
	// subject the message is published on. A worker runs a chunk only
	// when the message, its subject and the job record agree on it.
	Partition int `json:"partition,omitempty"`
	// SourceSeq is the SALVAGE_JOBS sequence of the job message the chunk
	// was split from. A worker drops a chunk whose job record names
	// another source: it came from a second message that lost the race
	// for the same job id. Zero (hand-made chunks) is always accepted.
	SourceSeq uint64          `json:"source_seq,omitempty"`
	Input     json.RawMessage `json:"input"`
	// Proof binds the chunk to its job's chunks_root (the machinery verifies it):
	// a worker runs a chunk only when its input is the one split for it.
	// Absent only on a job of one chunk or one split before proofs.
	Proof string `json:"proof,omitempty"`
}

// JobEvent is published on salvage.events.<job>.<kind>. A progress event
// names the chunk whose outcome changed (Chunk, ChunkStatus) and carries
// the job's counts after it.
type JobEvent struct {
	Job         string      `json:"job_id"`
	Kind        string      `json:"kind"`
	Pipeline    string      `json:"pipeline,omitempty"`
	Status      JobStatus   `json:"status,omitempty"`
	Chunks      int         `json:"chunks"`
	Done        int         `json:"done"`
	Failed      int         `json:"failed"`
	Cancelled   int         `json:"cancelled"`
	Chunk       int         `json:"chunk,omitempty"`
	ChunkStatus ChunkStatus `json:"chunk_status,omitempty"`
	// Reason is why a cancelled job was cancelled (EventCancelled).
	Reason  string    `json:"reason,omitempty"`
	TraceID string    `json:"trace_id,omitempty"`
	At      time.Time `json:"at"`
}

// ApprovalEvent is published on salvage.events.<job>.approval when a
// chunk is parked before a stage that requires a person's approval.
type ApprovalEvent struct {
	Job       string    `json:"job_id"`
	Chunk     int       `json:"chunk"`
	Stage     int       `json:"stage"`
	StageName string    `json:"stage_name"`
	Pipeline  string    `json:"pipeline"`
	TraceID   string    `json:"trace_id,omitempty"`
	At        time.Time `json:"at"`
}
