package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// Plan is a pipeline made ready to run: its tools registered, every agent
// and tool served on a subject bound to a caller. The root package builds
// one from a salvage.Pipeline when a worker registers it.
type Plan struct {
	// Name is the subject token jobs are submitted under
	// (salvage.jobs.<Name>).
	Name string
	// Split turns a job's input into chunk inputs, at least one. It returns
	// an error wrapping ErrBadInput for input it cannot use.
	Split func(input json.RawMessage) ([]json.RawMessage, error)
	// Stages run in order; stage numbers are 1-based.
	Stages []salvagetype.Stage
	// Tools are the calls the pipeline's agents may make.
	Tools *Tools
	// MaxChunks bounds how many chunks one job may split into; a job past
	// it is rejected (too-many-chunks). Zero takes the splitter's limit
	// (10,000 unless configured).
	MaxChunks int
	// TenantFrom names the metadata field whose string is a job's tenant
	// when its message names none (salvage.Pipeline.TenantFrom).
	TenantFrom string
	// Result builds the findings published for a finished chunk from every
	// stage's outputs. Nil publishes the outputs as they are.
	Result func(chunk json.RawMessage, outputs []salvagetype.StageOutput) (json.RawMessage, error)
	// Concurrency, AckWait and MaxDeliver tune the pipeline's chunk pool:
	// how many of its chunks a worker runs at once, how long one may go
	// without a heartbeat (its claim lease), how many deliveries it gets.
	// Zero takes the worker's (and the deployment's) settings.
	Concurrency int
	AckWait     time.Duration
	MaxDeliver  int
	// Retention is how long what its finished jobs leave is kept, by data
	// class; zero fields take the deployment's.
	Retention salvagetype.Retention
	// FallbackAfter bounds how long a link of a fallback chain waits for
	// a rate limit's budget before it is passed over; 0 waits as long as
	// it must.
	FallbackAfter time.Duration
	// Version is part of the pipeline's definition (Definition): every
	// process that runs the pipeline's workers or recovery must run the
	// same definition, so a change of code that matters to jobs in flight
	// changes it, and rolls out as an upgrade.
	Version string
}

// Turn is one agent's run in one stage of one chunk. Every external call
// the agent makes goes through Tool, so it is journaled, retried by tier 1
// and numbered for a stable idempotency key. A Turn is not safe for
// concurrent use: an agent's calls are a sequence, which keeps their
// numbering, and so their idempotency keys, stable.
type turn struct {
	// Job, Pipeline and TraceID say which job this is.
	Job, Pipeline, TraceID string
	// Chunk and Stage are 1-based; Epoch changes only when a chunk's
	// effects were compensated and it runs fresh.
	Chunk, Stage, Epoch int
	// Agent is the agent's name.
	Agent string
	// Input is the chunk's input, as the pipeline's Split made it.
	Input json.RawMessage
	// Prior holds the outputs of earlier stages.
	Prior []salvagetype.StageOutput

	exec    *Executor
	stats   *Stats
	tools   *Tools
	replay  *Replay
	state   *salvagetype.AgentState
	snaps   snapshotStore
	gate    Gate
	limiter limiter
	// fallbackAfter bounds a fallback link's wait for a rate limit.
	fallbackAfter time.Duration
	prices        Prices
	tracer        trace.Tracer
	seq           int
	// failedTool and failedKey name the call whose failure the agent
	// returned, for AgentError.
	failedTool, failedKey string
}

// Seq is the number of calls the agent has made so far in this turn.
func (t *turn) Seq() int { return t.seq }

// StageRun is what RunStage needs besides the stage.
type StageRun struct {
	Job, Pipeline, TraceID string
	Chunk, Stage, Epoch    int
	Input                  json.RawMessage
	Prior                  []salvagetype.StageOutput
	Exec                   *Executor
	Stats                  *Stats
	Tools                  *Tools
	// Replay is the chunk epoch's journal; nil starts an empty one that
	// is not stored anywhere (tests of agents alone).
	Replay *Replay
	// States holds each agent's state by name; RunStage adds missing ones
	// and agents update theirs in place. Nil keeps states for this stage
	// only.
	States map[string]*salvagetype.AgentState
	// Snapshots, when set, receives a snapshot before every call to an
	// irreversible tool.
	Snapshots snapshotStore
	// Gate, when set, guards every call to a tool with a System: the
	// circuit breakers.
	Gate Gate
	// Limiter, when set, paces every request to what a rate limit is
	// declared on. FallbackAfter bounds a fallback link's wait for it.
	Limiter       limiter
	FallbackAfter time.Duration
	// Prices price the usage model calls report, into Stats.CostMicros.
	Prices Prices
	// Tracer, when set, records a span for the stage, each agent's turn
	// and each call.
	Tracer trace.Tracer
}

// RunStage runs a stage's agents in parallel and returns their outputs in
// agent order. The first agent error cancels its siblings with a
// siblingFailedError (their calls are recorded CANCELLED); the error
// returned is an *AgentError for the failure that decides the chunk's fate
// (see severity), naming that agent and its failing call.
func RunStage(ctx context.Context, st salvagetype.Stage, r StageRun) ([]salvagetype.StageOutput, error) {
	if r.Replay == nil {
		r.Replay = NewReplay(discardJournal{}, nil)
	}
	if r.States == nil {
		r.States = map[string]*salvagetype.AgentState{}
	}
	for _, a := range st.Agents {
		if r.States[a.Name] == nil {
			r.States[a.Name] = &salvagetype.AgentState{}
		}
	}
	ctx, span := startStage(ctx, st, r)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	outs := make([]salvagetype.StageOutput, len(st.Agents))
	errs := make([]error, len(st.Agents))
	var wg sync.WaitGroup
	for i, a := range st.Agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &turn{
				Job: r.Job, Pipeline: r.Pipeline, TraceID: r.TraceID, Chunk: r.Chunk,
				Stage: r.Stage, Epoch: r.Epoch, Agent: a.Name, Input: r.Input, Prior: r.Prior,
				exec: r.Exec, stats: r.Stats, tools: r.Tools, replay: r.Replay,
				state: r.States[a.Name], snaps: r.Snapshots, gate: r.Gate, limiter: r.Limiter, fallbackAfter: r.FallbackAfter, prices: r.Prices, tracer: r.Tracer,
			}
			turnCtx, turn := startTurn(ctx, r.Tracer, t)
			out, err := runAgent(turnCtx, a, t)
			endWith(turn, err)
			if err == nil {
				var data []byte
				data, err = agentOutput(a.Name, out)
				outs[i] = salvagetype.StageOutput{Stage: r.Stage, Agent: a.Name, Output: data}
			}
			if err != nil {
				errs[i] = &AgentError{Agent: a.Name, Tool: t.failedTool, Call: t.failedKey, Err: err}
				// Siblings stop as cancelled, not failed. A context
				// already cancelled (the job was) keeps its own cause.
				if !errors.Is(err, errSiblingFailed) {
					cancel(&siblingFailedError{Agent: a.Name})
				}
			}
		}()
	}
	wg.Wait()
	// The stage's result rows must be durable before anyone checkpoints
	// past it, even when the stage was cancelled.
	flushErr := r.Replay.Flush(context.WithoutCancel(ctx))
	var worst error
	for _, err := range errs {
		if severity(err) > severity(worst) {
			worst = err
		}
	}
	if worst != nil || flushErr != nil {
		err := errors.Join(worst, flushErr)
		endWith(span, err)
		return nil, err
	}
	span.End()
	return outs, nil
}

// Registry maps pipeline names to pipelines. It is not safe to register
// while workers run; build it at start-up.
type Registry struct {
	m map[string]*Plan
}

// NewRegistry returns a registry holding ps. It fails on a bad or
// duplicate name, or a pipeline with no Split or no stages.
func NewRegistry(ps ...*Plan) (*Registry, error) {
	r := &Registry{m: map[string]*Plan{}}
	for _, p := range ps {
		if err := salvagetype.ValidateToken("pipeline name", p.Name); err != nil {
			return nil, err
		}
		if p.Split == nil || len(p.Stages) == 0 {
			return nil, fmt.Errorf("recovery: pipeline %s needs Split and at least one stage", p.Name)
		}
		for _, st := range p.Stages {
			for _, a := range st.Agents {
				// Agent names are journal key tokens.
				if err := salvagetype.ValidateToken("agent name", a.Name); err != nil {
					return nil, fmt.Errorf("recovery: pipeline %s stage %s: %w", p.Name, st.Name, err)
				}
			}
		}
		if _, dup := r.m[p.Name]; dup {
			return nil, fmt.Errorf("recovery: pipeline %s registered twice", p.Name)
		}
		r.m[p.Name] = p
	}
	return r, nil
}

// Get returns the named pipeline, or an error wrapping ErrUnknownPipeline.
func (r *Registry) Get(name string) (*Plan, error) {
	p, ok := r.m[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q (known: %v)", salvagetype.ErrUnknownPipeline, name, r.Names())
	}
	return p, nil
}

// Names lists the registered pipelines, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.m))
	for n := range r.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// discardJournal keeps rows only in the Replay's memory.
type discardJournal struct{}

func (discardJournal) Put(_ context.Context, _ kv.JournalRow, expect uint64) (uint64, error) {
	return expect + 1, nil
}

func (discardJournal) PutAsync(_ kv.JournalRow, expect uint64) (func(context.Context) (uint64, error), error) {
	return func(context.Context) (uint64, error) { return expect + 1, nil }, nil
}

// agentOutput encodes what agent returned for its checkpoint: an output
// that does not encode, or is past salvagetype.MaxOutput encoded, fails the
// agent permanently — no retry can change it.
func agentOutput(agent string, out any) (json.RawMessage, error) {
	data, err := json.Marshal(out)
	if err != nil {
		return nil, salvagetype.Permanent(0, fmt.Errorf("agent %s output: %w", agent, err))
	}
	if len(data) > salvagetype.MaxOutput {
		return nil, salvagetype.Permanent(0, fmt.Errorf("%w: agent %s returned %d bytes, a checkpoint keeps at most %d", salvagetype.ErrOutputTooLarge, agent, len(data), salvagetype.MaxOutput))
	}
	return data, nil
}
