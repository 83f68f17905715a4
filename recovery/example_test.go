package recovery_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// A pipeline author declares tools with their side effects, then stages of
// agents that call them through their Turn. Salvage journals every call,
// retries it (tier 1), verifies unknown outcomes and compensates.
func Example() {
	ledger := map[string]string{} // idempotency key -> charge id: a stand-in payment API
	charge := salvagetype.Tool{
		Name: "charge", System: "payments",
		Effect: &salvagetype.SideEffect{
			Reversible: true, Compensation: "refund",
			Verify: func(_ context.Context, key string) (salvagetype.Verification, error) {
				id, ok := ledger[key]
				return salvagetype.Verification{Applied: ok, ResourceID: id}, nil
			},
		},
		Call: func(_ context.Context, c salvagetype.ToolCall) (salvagetype.ToolResult, error) {
			if _, ok := ledger[c.IdempotencyKey]; !ok {
				ledger[c.IdempotencyKey] = fmt.Sprintf("ch_%d", len(ledger)+1)
			}
			id := ledger[c.IdempotencyKey]
			return salvagetype.ToolResult{Output: json.RawMessage(`"` + id + `"`), ResourceID: id}, nil
		},
	}
	refund := salvagetype.Tool{Name: "refund", System: "payments", Call: func(context.Context, salvagetype.ToolCall) (salvagetype.ToolResult, error) {
		return salvagetype.ToolResult{}, nil
	}}
	tools, err := recovery.NewTools(charge, refund)
	if err != nil {
		panic(err)
	}
	billing := salvagetype.Stage{Name: "bill", Agents: []salvagetype.Agent{{
		Name: "billing",
		Run: func(ctx context.Context, t *salvagetype.Turn) (any, error) {
			out, err := t.Tool(ctx, "charge", map[string]any{"order": "o-1", "amount": 42})
			if err != nil {
				return nil, err
			}
			var id string
			_ = json.Unmarshal(out, &id)
			return id, nil
		},
	}}}

	exec, _ := recovery.NewExecutor(recovery.RetryPolicy{}, zerolog.Nop())
	outs, err := recovery.RunStage(context.Background(), billing, recovery.StageRun{
		Job: "J1", Chunk: 1, Stage: 1, Exec: exec, Stats: &recovery.Stats{}, Tools: tools,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(outs[0].Agent, string(outs[0].Output), len(ledger))
	// Output: billing "ch_1" 1
}

// Classify decides what the recovery orchestrator does with an envelope,
// from typed errors and the journal, never from error text.
func ExampleFailure_Classify() {
	category, strategy := recovery.Failure{Class: salvagetype.ClassTransient, Status: 503, Exhausted: true}.Classify(recovery.Limits{})
	fmt.Println(category, strategy)
	category, strategy = recovery.Failure{Class: salvagetype.ClassPermanent}.Classify(recovery.Limits{})
	fmt.Println(category, strategy)
	// Output:
	// EXTERNAL_SYSTEM_DOWN RESUME_FROM_CHECKPOINT
	// UNRECOVERABLE DEAD_END
}
