package salvage

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
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
	// TenantFrom names the metadata field (SubmitOpts.Metadata) whose
	// string is a job's tenant when its submission names none
	// (SubmitOpts.Tenant). Empty: a job has the tenant it is given.
	TenantFrom string
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
	// Retention is how long what this pipeline's finished jobs leave is
	// kept, by data class (see Retention); zero fields take
	// Config.Retention's.
	Retention Retention
	// FallbackAfter bounds how long a link of a fallback chain
	// (Turn.ToolWithFallback) waits for a rate limit's budget (Limit):
	// a link that would wait longer is passed over for the next, as after
	// a 429. The chain's last link waits as long as it must. Default
	// FallbackAfterDefault.
	FallbackAfter time.Duration
	// Version is part of the pipeline's definition: every process that
	// runs the pipeline's workers or recovery must run one definition (its
	// stages, agents, tools and effects, and Version), checked when a
	// client starts (ErrDefinitionDiffers). Change it when the agents'
	// code changes in a way that matters to jobs in flight, and roll the
	// new version out as an upgrade (Config.Upgrades). Default empty.
	Version string
}

// FallbackAfterDefault is how long a link of a fallback chain waits for a
// rate limit's budget before the chain passes it over (Pipeline.FallbackAfter).
const FallbackAfterDefault = time.Second

// Stage runs its agents in parallel; salvagetype.Stage documents its
// fields (Name, Agents, Optional, RequiresApproval). When one agent fails, the
// others are stopped and the failure decides the chunk's fate; an Optional
// stage that fails leaves its job partial; RequiresApproval parks each
// chunk before the stage until a person answers.
type Stage = salvagetype.Stage

// Agent is one actor of a stage: its Run makes calls through its Turn and
// returns its output, which must marshal to JSON; or its Subject names a
// NATS subject that serves it, in any language. salvagetype.Agent
// documents its fields. Run is replayed on a resume: calls that already succeeded
// return their recorded outputs without running again, so Run must make
// the same calls in the same order given the same results.
type Agent = salvagetype.Agent

// StageOutput is what one agent produced in one stage (Stage, Agent,
// Output); later stages read it in Turn.Prior, and Pipeline.Result gets
// them all.
type StageOutput = salvagetype.StageOutput

// Turn is one agent's run in one stage of one chunk; salvagetype.Turn
// documents its fields and methods.
// Every external call the agent makes goes through Turn.Tool or
// Turn.ToolWithFallback, so it is journaled, retried by tier 1 and
// numbered for a stable idempotency key; Turn.State is the agent's state,
// snapshotted at stage boundaries. A Turn is not safe for concurrent use.
type Turn = salvagetype.Turn

// AgentState is what an agent knows (see Turn.State): Goal and SubGoals,
// its Messages, the journal keys of the calls it Completed, its working
// Memory (a map of JSON values), and Seq, which numbers its snapshots.
// Salvage snapshots it, gzip-compressed, at stage boundaries and before
// any call to an irreversible tool; a resumed chunk starts each agent from
// its latest snapshot.
type AgentState = salvagetype.AgentState

// Message is one turn of an agent's conversation (Role, Content), in
// AgentState.
type Message = salvagetype.Message

// Tool is an external call an agent can make: its Name, the System it
// touches (one circuit breaker per system), its Effect (nil for a pure
// call), and either a Call or a Subject that serves it. salvagetype.Tool
// documents its fields and how a Call's error classifies the failure.
type Tool = salvagetype.Tool

// SideEffect declares what a tool changes in an external system: whether
// it is Reversible and by which Compensation tool, and how to Verify (or
// VerifySubject) whether a call with an idempotency key took effect
// (salvagetype.SideEffect documents its fields).
type SideEffect = salvagetype.SideEffect

// Verification is the external system's answer about one idempotency key:
// whether it was Applied, the ResourceID and the Output standing in for
// the call's.
type Verification = salvagetype.Verification

// ToolCall is what a tool receives: where the call runs (Job, Chunk,
// Stage, Epoch, Agent, Seq), its stable IdempotencyKey, its Input and the
// job's TraceID.
type ToolCall = salvagetype.ToolCall

// ToolResult is what a tool returns: its Output, the ResourceID the
// external system gave the effect, and the Usage of a model call.
type ToolResult = salvagetype.ToolResult

// Usage is the tokens one model call spent, and the model that spent them.
type Usage = salvagetype.Usage

// CompensationInput is the input a compensation tool receives: the
// idempotency key and the output of the call it undoes. The compensation
// call itself runs under its own deterministic key, so it never undoes
// twice.
type CompensationInput = salvagetype.CompensationInput

// machinery turns p into the plan the workers run; agents and tools
// served on NATS subjects are bound to calls through rem. p itself is not
// changed.
func (p *Pipeline) machinery(rem remote) (*recovery.Plan, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: a nil Pipeline", ErrInvalidConfig)
	}
	tools := make([]salvagetype.Tool, 0, len(p.Tools))
	for _, t := range p.Tools {
		bt, err := bindTool(t, rem)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", p.Name, err)
		}
		tools = append(tools, bt)
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
			tools = append(tools, salvagetype.Tool{Name: remoteAgentTool(subject), System: SystemName(subject),
				Call: func(ctx context.Context, c salvagetype.ToolCall) (salvagetype.ToolResult, error) {
					return rem.call(ctx, subject, timeout, c, true)
				}})
		}
	}
	reg, err := recovery.NewTools(tools...)
	if err != nil {
		return nil, fmt.Errorf("%w: pipeline %s: %w", ErrInvalidConfig, p.Name, err)
	}
	if p.FallbackAfter < 0 {
		return nil, fmt.Errorf("%w: pipeline %s: FallbackAfter must not be negative", ErrInvalidConfig, p.Name)
	}
	if p.Concurrency < 0 || p.AckWait < 0 || p.MaxDeliver < 0 || p.AckWait > kv.AckWaitMax || (p.AckWait > 0 && p.AckWait < 3*time.Millisecond) {
		return nil, fmt.Errorf("%w: pipeline %s: Concurrency, AckWait and MaxDeliver must not be negative, and AckWait must be at most %s", ErrInvalidConfig, p.Name, kv.AckWaitMax)
	}
	if err := p.Retention.Validate(); err != nil {
		return nil, fmt.Errorf("%w: pipeline %s: %w", ErrInvalidConfig, p.Name, err)
	}
	out := &recovery.Plan{Name: p.Name, Split: p.Split, Tools: reg, MaxChunks: p.MaxChunks, TenantFrom: p.TenantFrom, Result: p.Result,
		Concurrency: p.Concurrency, AckWait: p.AckWait, MaxDeliver: p.MaxDeliver, Retention: p.Retention, Version: p.Version,
		FallbackAfter: cmp.Or(p.FallbackAfter, FallbackAfterDefault)}
	for _, st := range p.Stages {
		bs := st
		bs.Agents = make([]Agent, 0, len(st.Agents))
		for _, a := range st.Agents {
			if (a.Run == nil) == (a.Subject == "") {
				return nil, fmt.Errorf("%w: pipeline %s: agent %q needs exactly one of Run and Subject", ErrInvalidConfig, p.Name, a.Name)
			}
			bs.Agents = append(bs.Agents, bindAgent(a))
		}
		out.Stages = append(out.Stages, bs)
	}
	return out, nil
}

// bindAgent gives an agent served on a subject a Run that asks it through
// its tool (see machinery).
func bindAgent(a Agent) Agent {
	if a.Subject == "" {
		return a
	}
	tool := remoteAgentTool(a.Subject)
	a.Run = func(ctx context.Context, t *Turn) (any, error) {
		out, err := t.Tool(ctx, tool, agentTurn{Input: t.Input, Prior: t.Prior})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return a
}

// bindTool gives a tool served on a subject a Call, and a side effect
// verified on a subject a Verify, both through rem.
func bindTool(t Tool, rem remote) (Tool, error) {
	timeout := cmp.Or(t.Timeout, ServiceTimeoutDefault)
	switch {
	case t.Call != nil && t.Subject != "":
		return t, fmt.Errorf("%w: tool %q has both Call and Subject", ErrInvalidConfig, t.Name)
	case t.Subject != "":
		if err := ValidateSubject("tool "+t.Name, t.Subject); err != nil {
			return t, err
		}
		subject := t.Subject
		t.Call = func(ctx context.Context, c ToolCall) (ToolResult, error) {
			return rem.call(ctx, subject, timeout, c, false)
		}
		if t.System == "" {
			t.System = SystemName(subject)
		}
	}
	if t.Effect == nil {
		return t, nil
	}
	e := *t.Effect
	t.Effect = &e
	switch {
	case e.Verify != nil && e.VerifySubject != "":
		return t, fmt.Errorf("%w: tool %q has both Verify and VerifySubject", ErrInvalidConfig, t.Name)
	case e.VerifySubject != "":
		if err := ValidateSubject("tool "+t.Name+" verify", e.VerifySubject); err != nil {
			return t, err
		}
		subject := e.VerifySubject
		e.Verify = func(ctx context.Context, key string) (Verification, error) {
			return rem.verify(ctx, subject, timeout, key)
		}
	}
	return t, nil
}
