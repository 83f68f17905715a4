package recovery

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/salvagehq/salvage/salvagetype"
)

// A panic in code a pipeline author wrote (an agent, a tool, a split or a
// result function) never takes a worker down: these wrappers recover it as
// a ClassPanic error, a permanent failure of the one chunk (or job) it
// happened in.

// Invoke makes the call c with t, recovering a panic as a ClassPanic error.
func Invoke(ctx context.Context, t *salvagetype.Tool, c salvagetype.ToolCall) (res salvagetype.ToolResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered("tool "+t.Name, v)
		}
	}()
	return t.Call(ctx, c)
}

// VerifyEffect asks t's external system whether the call under key took
// effect, recovering a panic as a ClassPanic error. An answer whose output
// is past salvagetype.MaxOutput fails permanently (ErrOutputTooLarge, status
// 502): the call's outcome stays unknown. t must have an Effect.
func VerifyEffect(ctx context.Context, t *salvagetype.Tool, key string) (v salvagetype.Verification, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = recovered("verify of tool "+t.Name, p)
		}
	}()
	v, err = t.Effect.Verify(ctx, key)
	if err == nil && len(v.Output) > salvagetype.MaxOutput {
		return salvagetype.Verification{}, salvagetype.Permanent(502, fmt.Errorf("%w: the verification of %s answered %d bytes, a row keeps at most %d",
			salvagetype.ErrOutputTooLarge, t.Name, len(v.Output), salvagetype.MaxOutput))
	}
	return v, err
}

// SplitInput runs p.Split, recovering a panic as a ClassPanic error.
func (p *Plan) SplitInput(input json.RawMessage) (chunks []json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered("split of pipeline "+p.Name, v)
		}
	}()
	return p.Split(input)
}

// BuildResult builds a finished chunk's findings with p.Result (the outputs
// as they are when it is nil), recovering a panic as a ClassPanic error.
func (p *Plan) BuildResult(chunk json.RawMessage, outputs []salvagetype.StageOutput) (out json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered("result of pipeline "+p.Name, v)
		}
	}()
	if p.Result == nil {
		return json.Marshal(outputs)
	}
	return p.Result(chunk, outputs)
}

// runAgent runs a's turn, recovering a panic as a ClassPanic error.
func runAgent(ctx context.Context, a salvagetype.Agent, t *turn) (out any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered("agent "+a.Name, v)
		}
	}()
	if a.Run == nil { // a Subject is bound to a Run by the root package
		return nil, salvagetype.Permanent(0, fmt.Errorf("agent %s has no Run", a.Name))
	}
	return a.Run(ctx, salvagetype.NewTurn(salvagetype.Turn{
		Job: t.Job, Pipeline: t.Pipeline, TraceID: t.TraceID, Chunk: t.Chunk, Stage: t.Stage, Epoch: t.Epoch,
		Agent: t.Agent, Input: t.Input, Prior: t.Prior,
	}, t))
}
