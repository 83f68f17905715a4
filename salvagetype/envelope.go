package salvagetype

import (
	"encoding/json"
	"time"
)

// Envelope is a failure envelope as published on
// salvage.dlq.<category>.<pipeline>.<job>.<chunk> (stream SALVAGE_DLQ):
// what failed and what stands. It is immutable; its status lives in the
// envelope's record in salvage_envelopes.
type Envelope struct {
	ID       string   `json:"envelope_id"`
	Job      string   `json:"job_id"`
	Chunk    int      `json:"chunk"`
	Pipeline string   `json:"pipeline"`
	TraceID  string   `json:"trace_id"`
	Category Category `json:"category"`
	Strategy Strategy `json:"strategy"`
	Error    string   `json:"error"`
	// StoppedChunks, on a BUDGET_EXCEEDED envelope, are the chunks the
	// job's budget stopped (cancelled-at-stage-N, reason budget
	// exceeded), the first 10,000 (Error says how many); Chunk is the
	// first of them.
	StoppedChunks []int `json:"stopped_chunks,omitempty"`
	// ErrorClass is transient, rate-limited, timeout, permanent,
	// cancelled or panic (Error then holds the panic and its stack).
	ErrorClass string `json:"error_class,omitempty"`
	// FailedAgent, FailedCall (a journal key) and FailedTool name what
	// failed, never a sibling it stopped.
	FailedAgent   string `json:"failed_agent,omitempty"`
	FailedCall    string `json:"failed_call,omitempty"`
	FailedTool    string `json:"failed_tool,omitempty"`
	FailedStage   int    `json:"failed_stage"`
	Deliveries    uint64 `json:"deliveries"`
	Tier1Attempts int    `json:"tier1_attempts"`
	Recoveries    int    `json:"recoveries"`
	// CompletedEntries, InFlightEntries and PendingCompensations are
	// journal keys: calls that succeeded, calls whose outcome is unknown,
	// and reversible effects to undo, newest first.
	CompletedEntries     []string `json:"completed_entries"`
	InFlightEntries      []string `json:"in_flight_entries"`
	PendingCompensations []string `json:"pending_compensations"`
	// EntriesDropped counts the keys left out of those lists, each at
	// most EnvelopeEntriesMax long (the newest kept): a chunk of
	// thousands of calls would otherwise push its envelope past the
	// message size. The journal has them all, and recovery reads the
	// journal, never the lists.
	EntriesDropped int                `json:"entries_dropped,omitempty"`
	Checkpoint     EnvelopeCheckpoint `json:"checkpoint"`
	// Original is the chunk message verbatim: `nats pub <Subject> <Data>`
	// replays it.
	Original  OriginalMessage `json:"original"`
	CreatedAt time.Time       `json:"created_at"`
}

// EnvelopeEntriesMax bounds each journal-key list of an Envelope.
const EnvelopeEntriesMax = 1000

// EnvelopeCheckpoint is the chunk's checkpoint when it was dead-lettered.
type EnvelopeCheckpoint struct {
	Stage  int         `json:"stage"`
	Status ChunkStatus `json:"status"`
	Epoch  int         `json:"epoch"`
}

// OriginalMessage is the chunk message as it sat in SALVAGE_CHUNKS; Data
// is the verbatim chunk JSON, so `nats pub <subject> '<data>'` replays it.
type OriginalMessage struct {
	Stream  string          `json:"stream"`
	Seq     uint64          `json:"seq"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}
