package salvagetype

import "time"

// Chunk is one chunk's checkpoint as an operator sees it.
type Chunk struct {
	Job string `json:"job_id"`
	// Chunk is the chunk's number, from 1.
	Chunk int `json:"chunk"`
	// Stage is the stage it is in or last entered, from 1.
	Stage  int         `json:"stage"`
	Status ChunkStatus `json:"status"`
	// ClaimedBy is the worker that holds or last held it.
	ClaimedBy string `json:"claimed_by,omitempty"`
	// Epoch counts fresh runs after compensation; its journal keys carry it.
	Epoch int `json:"epoch"`
	// Compensated says effects of this epoch were undone: it can never
	// resume in it, only run fresh in a new epoch (a replay does that).
	Compensated bool `json:"compensated,omitempty"`
	// Recoveries counts the orchestrator's resumes (bounded by
	// Config.MaxRecoveries).
	Recoveries int `json:"recoveries"`
	// Gaps names the optional stages it finished without.
	Gaps []string `json:"gaps,omitempty"`
	// Deliveries is JetStream's delivery count of the message the chunk
	// last ran from; Redeliveries adds up the tier-2 redeliveries of all
	// its messages; Takeovers counts the times a survivor took it over
	// from a dead worker on the same delivery; Tier1Retries the retries
	// inside the worker.
	Deliveries   uint64 `json:"deliveries"`
	Redeliveries int    `json:"redeliveries,omitempty"`
	Takeovers    int    `json:"takeovers,omitempty"`
	Tier1Retries int    `json:"tier1_retries"`
	// Calls counts its calls as its journal has them (one row each,
	// however often a crash or replay made the chunk run); CachedCalls
	// those answered from the journal on a resume, without running again.
	Calls       int `json:"calls"`
	CachedCalls int `json:"cached_calls,omitempty"`
	// PromptTokens and CompletionTokens add up its model calls' usage.
	PromptTokens     int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
	// DeadLetters counts its envelopes.
	DeadLetters int `json:"dead_letters,omitempty"`
	// Envelope is the chunk's latest failure envelope.
	Envelope string `json:"envelope,omitempty"`
	// Reason says why it ended as it did (cancelled, dead-lettered).
	Reason string `json:"reason,omitempty"`
	// HeldOn is the system whose open circuit breaker holds it (status
	// held); Holds counts how often it was held.
	HeldOn string `json:"held_on,omitempty"`
	Holds  int    `json:"holds,omitempty"`
	// Approvals are the approvals its stages got (RequiresApproval).
	Approvals []Approval `json:"approvals,omitempty"`
	// LastError and the fields after it describe the failure that sent
	// the chunk back to tier 2, and the agent, tool and call it came from.
	LastError       string `json:"last_error,omitempty"`
	LastErrorClass  string `json:"last_error_class,omitempty"`
	LastErrorStatus int    `json:"last_error_status,omitempty"`
	LastErrorAgent  string `json:"last_error_agent,omitempty"`
	LastErrorTool   string `json:"last_error_tool,omitempty"`
	LastErrorCall   string `json:"last_error_call,omitempty"`
	// LastErrorOlder says a later delivery took the chunk since LastError
	// was recorded and has not ended with an error of its own.
	LastErrorOlder bool      `json:"last_error_older,omitempty"`
	UpdatedAt      time.Time `json:"updated_at"`
	// KeptUntil is when the checkpoint expires: set once retention ran on
	// the finished chunk.
	KeptUntil *time.Time `json:"kept_until,omitempty"`
}

// The attention ranks, lowest first: what an operator looks at first.
const (
	// attentionNone: the chunk needs nobody (done, or running clean).
	attentionNone = -1
	// attentionDeadLettered: the chunk's envelope waits in the DLQ.
	attentionDeadLettered = 0
	// attentionParked: held at a breaker, awaiting approval, or paused.
	attentionParked = 1
	// attentionCancelledSettled: cancelled after effects an envelope
	// settles.
	attentionCancelledSettled = 2
	// attentionUnfinished: not finished, carrying an envelope or an
	// error.
	attentionUnfinished = 3
)

// Attention ranks the chunk for an operator, lowest first: 0
// dead-lettered, 1 parked (held at a breaker, awaiting approval, paused),
// 2 cancelled with effects an envelope settles, 3 unfinished (running or
// pending) carrying an envelope or an error; -1 a chunk that needs
// nobody: every done chunk, whatever it went through on the way (a hold,
// a failure a recovery mended), and one cancelled before it had effects.
func (c Chunk) Attention() int {
	switch c.Status {
	case ChunkDone:
		return attentionNone
	case ChunkDeadLettered:
		return attentionDeadLettered
	case ChunkHeld, ChunkAwaitingApproval, ChunkPaused:
		return attentionParked
	}
	if c.Status.IsCancelled() {
		if c.Envelope != "" {
			return attentionCancelledSettled
		}
		return attentionNone
	}
	if c.Envelope != "" || c.LastError != "" {
		return attentionUnfinished
	}
	return attentionNone
}
