package recovery

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Envelope is the failure envelope published on SALVAGE_DLQ. It is
// immutable; its mutable status lives in the salvage_envelopes record.
type Envelope struct {
	ID       string               `json:"envelope_id"`
	Job      string               `json:"job_id"`
	Chunk    int                  `json:"chunk"`
	Pipeline string               `json:"pipeline"`
	TraceID  string               `json:"trace_id"`
	Category salvagetype.Category `json:"category"`
	Strategy salvagetype.Strategy `json:"strategy"`
	Error    string               `json:"error"`
	// StoppedChunks, on a BUDGET_EXCEEDED envelope, are the job's chunks
	// its budget stopped (cancelled-at-stage-N, reason budget exceeded),
	// the first 10,000 (Error says how many); Chunk is the first of them.
	StoppedChunks []int `json:"stopped_chunks,omitempty"`
	// ErrorClass is the failure's class: transient, rate-limited,
	// timeout, permanent, cancelled or panic (Error then holds the
	// panic's value and stack).
	ErrorClass string `json:"error_class,omitempty"`
	FailedTool string `json:"failed_tool,omitempty"`
	// FailedAgent and FailedCall (a journal key) name the agent and call
	// whose failure sent the chunk here, never a sibling it stopped.
	FailedAgent          string   `json:"failed_agent,omitempty"`
	FailedCall           string   `json:"failed_call,omitempty"`
	FailedStage          int      `json:"failed_stage"`
	Deliveries           uint64   `json:"deliveries"`
	Tier1Attempts        int      `json:"tier1_attempts"`
	Recoveries           int      `json:"recoveries"`
	CompletedEntries     []string `json:"completed_entries"`
	InFlightEntries      []string `json:"in_flight_entries"`
	PendingCompensations []string `json:"pending_compensations"`
	// EntriesDropped counts the journal keys left out of the three lists
	// above, each of which holds at most EnvelopeEntriesMax (the newest):
	// a chunk of thousands of calls would otherwise push its envelope
	// past the message size. Recovery reads the journal, never the lists.
	EntriesDropped int                `json:"entries_dropped,omitempty"`
	Checkpoint     EnvelopeCheckpoint `json:"checkpoint"`
	Original       Original           `json:"original"`
	CreatedAt      time.Time          `json:"created_at"`
}

// EnvelopeEntriesMax bounds each journal-key list of an Envelope.
const EnvelopeEntriesMax = 1000

// EnvelopeCheckpoint is the chunk's checkpoint when it was dead-lettered.
type EnvelopeCheckpoint struct {
	Stage  int                     `json:"stage"`
	Status salvagetype.ChunkStatus `json:"status"`
	Epoch  int                     `json:"epoch"`
}

// Original is the chunk message as it sat in SALVAGE_CHUNKS; Data is the
// verbatim chunk JSON, so `nats pub <subject> '<data>'` replays it.
type Original struct {
	Stream  string          `json:"stream"`
	Seq     uint64          `json:"seq"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

// DecodeEnvelope reads a failure envelope as published on SALVAGE_DLQ and
// checks what the recovery of it builds keys and subjects from: the
// envelope and job ids and the pipeline are tokens, the chunk counts from
// 1. It returns an error wrapping ErrBadEnvelope otherwise.
func DecodeEnvelope(data []byte) (Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return env, fmt.Errorf("%w: %v", ErrBadEnvelope, err)
	}
	for _, c := range []struct{ what, tok string }{{"envelope_id", env.ID}, {"pipeline", env.Pipeline}} {
		if err := streams.ValidateToken(c.what, c.tok); err != nil {
			return env, fmt.Errorf("%w: %w", ErrBadEnvelope, err)
		}
	}
	if err := streams.ValidateJobID(env.Job); err != nil {
		return env, fmt.Errorf("%w: %w", ErrBadEnvelope, err)
	}
	if env.Chunk < 1 {
		return env, fmt.Errorf("%w: chunk %d: chunks count from 1", ErrBadEnvelope, env.Chunk)
	}
	return env, nil
}
