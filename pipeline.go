package salvage

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
)

// Pipeline is what a pipeline author writes: how a job's input becomes
// chunks, the stages each chunk runs, and the tools its agents may call.
// Jobs for it are submitted under its Name (salvage.jobs.<Name>).
type Pipeline struct {
	// Name is the subject token jobs are submitted under: 1-128 bytes of
	// A-Z a-z 0-9 - _ =. Required.
	Name string
	// Split turns a job's input into chunk inputs, at least one. It
	// returns an error wrapping ErrBadInput for input it cannot use (the
	// job is rejected as bad-input); a panic rejects the job as panic.
	// Required.
	Split func(input json.RawMessage) ([]json.RawMessage, error)
	// Stages run in order, numbered from 1. At least one is required.
	Stages []Stage
	// Tools are the calls the pipeline's agents may make (Turn.Tool).
	Tools []Tool
	// MaxChunks bounds the chunks one job may split into; a job past it
	// is rejected (too-many-chunks). Zero takes Config.MaxChunks.
	MaxChunks int
	// Result builds the findings published on SALVAGE_RESULTS for a
	// finished chunk from its input and every stage's outputs. Nil
	// publishes the outputs as a JSON array. An error or a panic fails
	// the chunk permanently.
	Result func(chunk json.RawMessage, outputs []StageOutput) (json.RawMessage, error)
	// Concurrency is how many of its chunks one worker runs at once;
	// AckWait how long one of its chunks may go without a heartbeat
	// before it is redelivered (and its claim lease); MaxDeliver how many
	// deliveries one gets before it is dead-lettered. They tune the
	// pipeline's own chunk pool (workers-<Name>). Zero takes Config's
	// Concurrency, AckWait and MaxDeliver.
	Concurrency int
	AckWait     time.Duration
	MaxDeliver  int
}

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
	// with Client.Approve, `salvage approve` or salvage.api.approve.
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
	// turn is one request there (a ServiceRequest with the chunk's input
	// and the earlier stages' outputs), answered by anything that answers
	// NATS requests, in any language. The reply is the agent's output. A
	// turn is journaled like a tool call, so a resumed chunk never asks
	// again for a turn that was answered.
	Subject string
	// Timeout bounds one request to Subject. Default
	// ServiceTimeoutDefault.
	Timeout time.Duration
}

// StageOutput is what one agent produced in one stage; later stages read
// it in Turn.Prior, and Pipeline.Result gets them all.
type StageOutput struct {
	Stage  int             `json:"stage"`
	Agent  string          `json:"agent"`
	Output json.RawMessage `json:"output"`
}

// Turn is one agent's run in one stage of one chunk. Every external call
// the agent makes goes through Tool, so it is journaled, retried by tier 1
// and numbered for a stable idempotency key. A Turn is not safe for
// concurrent use: an agent's calls are a sequence.
type Turn struct {
	// Job, Pipeline and TraceID say which job this is.
	Job, Pipeline, TraceID string
	// Chunk and Stage are 1-based; Epoch changes only when a chunk's
	// effects were compensated and it runs fresh.
	Chunk, Stage, Epoch int
	// Agent is the agent's name.
	Agent string
	// Input is the chunk's input, as Split made it.
	Input json.RawMessage
	// Prior holds the outputs of earlier stages.
	Prior []StageOutput

	t *recovery.Turn
}

// Tool calls the registered tool name with input (which must marshal to
// JSON) and returns its output. The call is journaled before it runs
// when the tool has a side effect, and after; a call that already
// succeeded in an earlier run returns its recorded output without running
// again; a side effect whose outcome is unknown is verified first. It
// blocks for the call and its tier-1 retries. The error is the tool's own
// (see Transient, Permanent, …) or one wrapping ErrRetriesExhausted.
func (t *Turn) Tool(ctx context.Context, name string, input any) (json.RawMessage, error) {
	return t.t.Tool(ctx, name, input)
}

// ToolWithFallback calls the first of names that answers and returns its
// output and name — a premium model, then a cheaper one, possibly at
// another provider (each chatmodel.New tool is its own system, with its own
// breaker). A link that is rate-limited or overloaded, or whose breaker
// is open, passes on to the next at once instead of waiting out tier 1;
// any other failure is returned as Tool would. Each link is a journaled
// call of its own, so the journal shows every attempt and, in a model
// call's Usage, the model that answered; a resumed chunk passes over the
// links that passed before, so it makes the same calls under the same
// keys.
func (t *Turn) ToolWithFallback(ctx context.Context, names []string, input any) (json.RawMessage, string, error) {
	return t.t.ToolWithFallback(ctx, names, input)
}

// State is the agent's state: goal, messages, completed journal entries,
// working memory. Salvage snapshots it at stage boundaries and before any
// call to an irreversible tool, and a resumed chunk starts each agent from
// its latest snapshot.
func (t *Turn) State() *AgentState { return t.t.State() }

// Seq is the number of calls the agent has made so far in this turn.
func (t *Turn) Seq() int { return t.t.Seq() }

// AgentState is what an agent knows (see Turn.State): Goal and SubGoals,
// its Messages, the journal keys of the calls it Completed, its working
// Memory (a map of JSON values), and Seq, which numbers its snapshots.
// Salvage snapshots it, gzip-compressed, at stage boundaries and before
// any call to an irreversible tool; a resumed chunk starts each agent from
// its latest snapshot.
type AgentState = recovery.AgentState

// Message is one turn of an agent's conversation (Role, Content), in
// AgentState.
type Message = recovery.Message

// Tool is an external call an agent can make.
type Tool struct {
	// Name is what agents call it by. Required.
	Name string
	// System is the external system it touches (payments, crm, …): a
	// subject token, not "approval" nor beginning with "paused-" (both
	// reserved). Calls to one system share
	// one circuit breaker across every worker (Config.Breaker); a tool
	// without a System has none.
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
	// An output past MaxOutput, or Usage out of range, fails the call
	// permanently.
	Call func(ctx context.Context, c ToolCall) (ToolResult, error)
	// Subject names a NATS subject that serves the tool instead: each call
	// is one ServiceRequest there and the reply is its output. An error
	// reply's Nats-Service-Error-Code classifies it (4xx permanent; 429
	// with Retry-After rate-limited; 408, 409, 5xx transient; see
	// HeaderOutcome for what a side effect's answer says of its effect);
	// no responders is transient and no answer within Timeout a timeout.
	// The service must not apply a request after its Salvage-Deadline.
	Subject string
	// Timeout bounds one request to Subject. Default
	// ServiceTimeoutDefault.
	Timeout time.Duration
}

// SideEffect declares what a tool changes in an external system.
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
	// VerifySubject names a NATS subject that answers a VerifyRequest
	// with a VerifyReply, instead of Verify.
	VerifySubject string
}

// Verification is recovery.Verification: the same type for tools, agents and the
// machinery.
type Verification = recovery.Verification

// ToolCall is recovery.ToolCall: the same type for tools, agents and the
// machinery.
type ToolCall = recovery.ToolCall

// ToolResult is recovery.ToolResult: the same type for tools, agents and the
// machinery.
type ToolResult = recovery.ToolResult

// Usage is the tokens one model call spent, and the model that spent them.
type Usage = kv.Usage

// CompensationInput is the input a compensation tool receives: the
// idempotency key and the output of the call it undoes. The compensation
// call itself runs under its own deterministic key, so it never undoes
// twice.
type CompensationInput = recovery.CompensationInput

// machinery turns p into the pipeline the workers run; agents and tools
// served on NATS subjects are called through rem.
func (p *Pipeline) machinery(rem remote) (*recovery.Pipeline, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: a nil Pipeline", ErrInvalidConfig)
	}
	tools := make([]recovery.Tool, 0, len(p.Tools))
	for _, t := range p.Tools {
		mt, err := t.machinery(rem)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", p.Name, err)
		}
		tools = append(tools, mt)
	}
	// An agent served on a subject is called through a tool of its own.
	served := map[string]bool{}
	for _, st := range p.Stages {
		for _, a := range st.Agents {
			if a.Subject == "" || served[a.Subject] {
				continue
			}
			if err := ValidateSubject("agent "+a.Name, a.Subject); err != nil {
				return nil, fmt.Errorf("pipeline %s: %w", p.Name, err)
			}
			served[a.Subject] = true
			subject, timeout := a.Subject, cmp.Or(a.Timeout, ServiceTimeoutDefault)
			tools = append(tools, recovery.Tool{Name: remoteAgentTool(subject), System: SystemName(subject),
				Call: func(ctx context.Context, c recovery.ToolCall) (recovery.ToolResult, error) {
					return rem.call(ctx, subject, timeout, c, true)
				}})
		}
	}
	reg, err := recovery.NewTools(tools...)
	if err != nil {
		return nil, fmt.Errorf("%w: pipeline %s: %w", ErrInvalidConfig, p.Name, err)
	}
	if p.Concurrency < 0 || p.AckWait < 0 || p.MaxDeliver < 0 || p.AckWait > kv.AckWaitMax || (p.AckWait > 0 && p.AckWait < 3*time.Millisecond) {
		return nil, fmt.Errorf("%w: pipeline %s: Concurrency, AckWait and MaxDeliver must not be negative, and AckWait must be at most %s", ErrInvalidConfig, p.Name, kv.AckWaitMax)
	}
	out := &recovery.Pipeline{Name: p.Name, Split: p.Split, Tools: reg, MaxChunks: p.MaxChunks,
		Concurrency: p.Concurrency, AckWait: p.AckWait, MaxDeliver: p.MaxDeliver}
	for _, st := range p.Stages {
		ms := recovery.Stage{Name: st.Name, Optional: st.Optional, RequiresApproval: st.RequiresApproval}
		for _, a := range st.Agents {
			if (a.Run == nil) == (a.Subject == "") {
				return nil, fmt.Errorf("%w: pipeline %s: agent %q needs exactly one of Run and Subject", ErrInvalidConfig, p.Name, a.Name)
			}
			ms.Agents = append(ms.Agents, a.machinery())
		}
		out.Stages = append(out.Stages, ms)
	}
	if p.Result != nil {
		result := p.Result
		out.Result = func(chunk json.RawMessage, outs []kv.StageOutput) (json.RawMessage, error) {
			return result(chunk, stageOutputs(outs))
		}
	}
	return out, nil
}

func (a Agent) machinery() recovery.Agent {
	run := a.Run
	if a.Subject != "" {
		tool := remoteAgentTool(a.Subject)
		run = func(ctx context.Context, t *Turn) (any, error) {
			out, err := t.Tool(ctx, tool, agentTurn{Input: t.Input, Prior: t.Prior})
			if err != nil {
				return nil, err
			}
			return out, nil
		}
	}
	return recovery.Agent{Name: a.Name, Run: func(ctx context.Context, rt *recovery.Turn) (any, error) {
		if run == nil {
			return nil, Permanent(0, fmt.Errorf("agent %s has no Run", a.Name))
		}
		return run(ctx, &Turn{
			Job: rt.Job, Pipeline: rt.Pipeline, TraceID: rt.TraceID, Chunk: rt.Chunk, Stage: rt.Stage, Epoch: rt.Epoch,
			Agent: rt.Agent, Input: rt.Input, Prior: stageOutputs(rt.Prior), t: rt,
		})
	}}
}

func (t Tool) machinery(rem remote) (recovery.Tool, error) {
	out := recovery.Tool{Name: t.Name, System: t.System, RetryableAfterCompensation: t.RetryableAfterCompensation}
	call := t.Call
	timeout := cmp.Or(t.Timeout, ServiceTimeoutDefault)
	switch {
	case call != nil && t.Subject != "":
		return out, fmt.Errorf("%w: tool %q has both Call and Subject", ErrInvalidConfig, t.Name)
	case t.Subject != "":
		if err := ValidateSubject("tool "+t.Name, t.Subject); err != nil {
			return out, err
		}
		subject := t.Subject
		call = func(ctx context.Context, c ToolCall) (ToolResult, error) {
			return rem.call(ctx, subject, timeout, c, false)
		}
		if out.System == "" {
			out.System = SystemName(subject)
		}
	}
	if call != nil {
		out.Call = call
	}
	if e := t.Effect; e != nil {
		out.Effect = &recovery.SideEffect{Reversible: e.Reversible, Compensation: e.Compensation}
		verify := e.Verify
		switch {
		case verify != nil && e.VerifySubject != "":
			return out, fmt.Errorf("%w: tool %q has both Verify and VerifySubject", ErrInvalidConfig, t.Name)
		case e.VerifySubject != "":
			if err := ValidateSubject("tool "+t.Name+" verify", e.VerifySubject); err != nil {
				return out, err
			}
			subject := e.VerifySubject
			verify = func(ctx context.Context, key string) (Verification, error) {
				return rem.verify(ctx, subject, timeout, key)
			}
		}
		out.Effect.Verify = verify
	}
	return out, nil
}

func stageOutputs(in []kv.StageOutput) []StageOutput {
	out := make([]StageOutput, len(in))
	for i, o := range in {
		out[i] = StageOutput(o)
	}
	return out
}
