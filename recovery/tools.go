package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// ErrInvalidTool is returned by NewTools for a tool that cannot be
// registered: no name, no call, a reversible effect without a compensation
// tool, a side effect without a way to verify it.
var ErrInvalidTool = errors.New("invalid tool")

// errUnknownTool is returned when an agent calls a tool its pipeline did
// not register.
var errUnknownTool = errors.New("unknown tool")

// ErrDiverged is returned when an agent makes a different call (another
// tool or another input) at a journal key that already holds a row: the
// old row is kept, never overwritten.
var ErrDiverged = errors.New("agent diverged from its journal")

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
	Usage *salvagetype.Usage
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

// Tools is a pipeline's tool registry.
type Tools struct {
	m map[string]*Tool
}

// NewTools registers ts. It returns an error wrapping ErrInvalidTool for a
// tool without a name or call, a System that is not a subject token (or
// is reserved: "approval" or "paused-…"), a duplicate, a reversible side effect
// without a registered compensation tool, or a side effect without Verify.
func NewTools(ts ...Tool) (*Tools, error) {
	r := &Tools{m: map[string]*Tool{}}
	for i := range ts {
		t := ts[i]
		if t.Name == "" || t.Call == nil {
			return nil, fmt.Errorf("%w: tool %d needs a Name and a Call (a Subject is bound to a Call by the root package)", ErrInvalidTool, i)
		}
		if streams.ReservedSystem(t.System) {
			return nil, fmt.Errorf("%w: %s: system name %q is reserved", ErrInvalidTool, t.Name, t.System)
		}
		if t.System != "" {
			if err := salvagetype.ValidateToken("system", t.System); err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrInvalidTool, t.Name, err)
			}
		}
		if _, dup := r.m[t.Name]; dup {
			return nil, fmt.Errorf("%w: %s registered twice", ErrInvalidTool, t.Name)
		}
		r.m[t.Name] = &t
	}
	for _, t := range r.m {
		if t.Effect == nil {
			continue
		}
		if t.Effect.Verify == nil { // a VerifySubject is bound to a Verify by the root package
			return nil, fmt.Errorf("%w: %s has a side effect but no Verify", ErrInvalidTool, t.Name)
		}
		if !t.Effect.Reversible {
			continue
		}
		if t.Effect.Compensation == "" {
			return nil, fmt.Errorf("%w: %s is reversible but names no compensation tool", ErrInvalidTool, t.Name)
		}
		if _, ok := r.m[t.Effect.Compensation]; !ok {
			return nil, fmt.Errorf("%w: %s's compensation tool %s is not registered", ErrInvalidTool, t.Name, t.Effect.Compensation)
		}
		// Undoing must end: no tool is its own compensation, directly
		// or through others.
		for c, n := r.m[t.Effect.Compensation], 0; c != nil && n <= len(r.m); n++ {
			if c.Name == t.Name {
				return nil, fmt.Errorf("%w: %s is undone by itself (compensation %s)", ErrInvalidTool, t.Name, t.Effect.Compensation)
			}
			if c.Effect == nil || !c.Effect.Reversible {
				break
			}
			c = r.m[c.Effect.Compensation]
		}
	}
	return r, nil
}

// Get returns a tool, or an error wrapping errUnknownTool.
func (r *Tools) Get(name string) (*Tool, error) {
	if r != nil {
		if t, ok := r.m[name]; ok {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", errUnknownTool, name)
}

// CompensationInput is what a compensation tool receives: the key and the
// output of the call it undoes.
type CompensationInput struct {
	Key    string          `json:"idempotency_key"`
	Output json.RawMessage `json:"output,omitempty"`
}
