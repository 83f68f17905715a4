package salvagetype

import (
	"context"
	"encoding/json"
	"time"
)

// Stage runs its agents in parallel. When one fails, the others are
// stopped (their calls are recorded cancelled) and the failure decides
// the chunk's fate.
type Stage struct {
	// Name names the stage in logs and in a job's explanation.
	Name string
	// Agents run in parallel; each gets its own Turn.
	Agents []Agent
	// Optional stages degrade gracefully: when one fails, the chunk goes
	// on without its output and its job ends partial.
	Optional bool
	// RequiresApproval parks each chunk before the stage (status
	// awaiting-approval, its message on salvage.hold.approval.<job>.<chunk>,
	// an event on salvage.events.<job>.approval) until a person answers
	// with Client.ChunkApprove, `salvage approve` or salvage.api.approve; a
	// rejection compensates the chunk's effects.
	RequiresApproval bool
}

// Agent is one actor of a stage: its Run makes calls through its Turn and
// returns its output, which must marshal to JSON. Run is replayed on a
// resume: calls that already succeeded return their recorded outputs
// without running again, so Run must make the same calls in the same
// order given the same results.
type Agent struct {
	// Name identifies the agent in journal keys: a token, unique within
	// its stage.
	Name string
	// Run is the agent. A panic fails its chunk (class panic). Exactly
	// one of Run and Subject is set.
	Run func(ctx context.Context, t *Turn) (any, error)
	// Subject names a NATS subject that serves the agent instead: each
	// turn is one request there (a salvage.ServiceRequest with the chunk's
	// input and the earlier stages' outputs), answered by anything that
	// answers NATS requests, in any language. The reply is the agent's
	// output. A turn is journaled like a tool call, so a resumed chunk
	// never asks again for a turn that was answered. The root package
	// binds it when it builds the Plan.
	Subject string
	// Timeout bounds one request to Subject. Default
	// salvage.ServiceTimeoutDefault.
	Timeout time.Duration
}

// Price is what one model charges, per million tokens, in the currency
// job budgets are given in.
type Price struct {
	Prompt     float64 `json:"prompt"`
	Completion float64 `json:"completion"`
}

// RecoveryStats is the automatic recovery rate and what it is made of.
type RecoveryStats struct {
	// Rate is Recovered over DeadLettered, 1 when nothing was
	// dead-lettered.
	Rate float64 `json:"auto_recovery_rate"`
	// DeadLettered counts chunks that were dead-lettered at least once.
	DeadLettered int `json:"chunks_dead_lettered"`
	// Recovered counts those whose latest envelope is resolved because
	// the chunk finished, or abandoned with every effect compensated,
	// with no person acting on any envelope of the chunk.
	Recovered int `json:"chunks_recovered"`
}

// SideEffect declares what a tool changes in an external system. A pure
// call (a model call, a read) has none.
type SideEffect struct {
	// Reversible effects can be undone by the Compensation tool.
	Reversible bool
	// Compensation names the registered tool that undoes this effect; it
	// receives a CompensationInput. Required when Reversible.
	Compensation string
	// Verify asks the external system whether a call with this
	// idempotency key took effect. Salvage calls it before anything else
	// when a call's outcome is unknown (a crash, a timeout or a 5xx
	// mid-call), and before it makes such a call again. While it fails,
	// the call stays unknown: it is verified again within bounds, then
	// escalated to a person by name. Exactly one of Verify and
	// VerifySubject is required.
	Verify func(ctx context.Context, idempotencyKey string) (Verification, error)
	// VerifySubject names a NATS subject that answers a
	// salvage.VerifyRequest with a salvage.VerifyReply, instead of Verify.
	// The root package binds it when it builds the Plan.
	VerifySubject string
}

// Verification is the external system's answer about one idempotency key.
type Verification struct {
	// Applied says the call took effect.
	Applied bool
	// ResourceID is the id the system gave the effect.
	ResourceID string
	// Output, when Applied, stands in for the call's output.
	Output json.RawMessage
}

// ToolCall is what a tool receives: where the call runs, its stable
// idempotency key, and its input.
type ToolCall struct {
	// Job, Chunk, Stage, Epoch, Agent and Seq place the call: the Seq-th
	// call of Agent in Stage of Chunk of Job. A compensation call carries
	// the place of the call it undoes.
	Job                 string
	Chunk, Stage, Epoch int
	Agent               string
	Seq                 int
	// IdempotencyKey is the same on every retry, redelivery and resume of
	// this call: pass it to the external system.
	IdempotencyKey string
	// Input is the agent's input, as JSON.
	Input json.RawMessage
	// TraceID is the job's W3C trace id.
	TraceID string
}

// ToolResult is what a tool returns.
type ToolResult struct {
	// Output is replayed to the agent on a resume.
	Output json.RawMessage
	// ResourceID is the id the external system gave the effect (a charge,
	// an invoice); compensation and people see it.
	ResourceID string
	// Usage is what a model call spent: recorded in the call's journal
	// row, counted in salvage_model_tokens_total, shown by salvage trace.
	Usage *Usage
	// Wait, when above 0, is how long the system's rate-limit headers
	// say nothing is left of its budget (x-ratelimit-remaining-requests
	// 0, until x-ratelimit-reset-requests): every process holds the
	// limits declared on the tool for that long, before a 429 says so.
	// Not journaled.
	Wait time.Duration
}

// Tool is an external call an agent can make.
type Tool struct {
	// Name is what agents call it by. Required.
	Name string
	// System is the external system it touches (payments, crm, …): a
	// subject token, not "approval" nor beginning with "paused-" (both
	// reserved). Calls to one system share one circuit breaker across
	// every worker; a tool without a System has none.
	System string
	// Effect is nil for a pure call (a model call, a read): such a call
	// is simply made again when its outcome is unknown.
	Effect *SideEffect
	// RetryableAfterCompensation marks a step whose chunk may run again,
	// in a fresh epoch, once its earlier effects are compensated.
	RetryableAfterCompensation bool
	// Call performs the call. Return errors built with Transient,
	// RateLimited, Timeout or Permanent so retries and recovery can
	// decide without reading text; any other error counts as transient.
	// A panic fails the chunk (class panic). Exactly one of Call and
	// Subject is set. For a side effect the error also says whether it
	// may have taken effect: a transient error, a timeout, a panic and a
	// 408, 409 or 5xx may have, so the call is verified before it is made
	// again; a rate limit, any other 4xx Permanent and an error wrapped
	// with NotApplied say it did not. A side effect must not take effect
	// once ctx is done (Salvage has stopped waiting and may ask again).
	// An output past the configured MaxOutput, or Usage out of range,
	// fails the call permanently.
	Call func(ctx context.Context, c ToolCall) (ToolResult, error)
	// Subject names a NATS subject that serves the tool instead: each call
	// is one salvage.ServiceRequest there and the reply is its output. An
	// error reply's Nats-Service-Error-Code classifies it (4xx permanent;
	// 429 with Retry-After rate-limited; 408, 409, 5xx transient; see
	// salvage.HeaderOutcome for what a side effect's answer says of its
	// effect); no responders is transient and no answer within Timeout a
	// timeout. The service must not apply a request after its
	// Salvage-Deadline. The root package binds it when it builds the Plan.
	Subject string
	// Timeout bounds one request to Subject. Default
	// salvage.ServiceTimeoutDefault.
	Timeout time.Duration
}

// CompensationInput is what a compensation tool receives: the key and the
// output of the call it undoes.
type CompensationInput struct {
	Key    string          `json:"idempotency_key"`
	Output json.RawMessage `json:"output,omitempty"`
}
