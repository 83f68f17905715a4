package salvagetype

import (
	"context"
	"encoding/json"
)

// Turn is one agent's run in one stage of one chunk. Every external call
// the agent makes goes through Tool or ToolWithFallback, so it is
// journaled, retried by tier 1 and numbered for a stable idempotency key;
// State is the agent's state, snapshotted at stage boundaries. A Turn is
// not safe for concurrent use: an agent's calls are a sequence, which
// keeps their numbering, and so their idempotency keys, stable.
type Turn struct {
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
	Prior []StageOutput

	calls TurnCalls
}

// TurnCalls is what a Turn's methods run: Salvage's journaled executor
// binds each Turn it starts to one (NewTurn). A test of an agent may bind
// its own, though salvagetest.RunAgent runs an agent against the real one.
type TurnCalls interface {
	Tool(ctx context.Context, name string, input any) (json.RawMessage, error)
	ToolWithFallback(ctx context.Context, names []string, input any) (json.RawMessage, string, error)
	State() *AgentState
	Seq() int
}

// NewTurn returns t bound to calls, which its methods run.
func NewTurn(t Turn, calls TurnCalls) *Turn {
	t.calls = calls
	return &t
}

// Tool calls a registered tool through the journal, under a
// deterministic key: a tool with a side effect has its row written
// INITIATED before the call, and every call's row says SUCCEEDED or
// FAILED after it. A row that already SUCCEEDED returns its output
// without a call; a row left INITIATED by a crash is an unknown outcome,
// settled by the tool's Verify before anything else runs. input must
// marshal to JSON.
func (t *Turn) Tool(ctx context.Context, name string, input any) (json.RawMessage, error) {
	return t.calls.Tool(ctx, name, input)
}

// ToolWithFallback calls the first tool of names that answers, and
// returns its output and name: a premium model, then a cheaper one,
// possibly at another provider. Each link is a call of its own (its own
// sequence number, key and journal row). A link that is rate-limited or
// overloaded, or whose system's breaker is open, passes on to the next at
// once, without waiting out tier 1; any other failure is the call's. The
// last link is called like Tool. On a resume the journal decides, so a
// resumed agent makes the same calls under the same keys.
func (t *Turn) ToolWithFallback(ctx context.Context, names []string, input any) (json.RawMessage, string, error) {
	return t.calls.ToolWithFallback(ctx, names, input)
}

// State is the agent's state for this turn, loaded from its latest
// snapshot on resume. Agents keep their conversation and memory here.
func (t *Turn) State() *AgentState { return t.calls.State() }

// Seq is the number of calls the agent has made so far in this turn.
func (t *Turn) Seq() int { return t.calls.Seq() }
