package salvagetype

import (
	"encoding/json"
	"time"
)

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
