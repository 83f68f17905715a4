package consumers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/consumers/worker"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// meteredPipeline: each chunk makes two model calls (one per stage) that
// report 100 prompt and 50 completion tokens of model "m".
func meteredPipeline(t *testing.T) *recovery.Plan {
	t.Helper()
	tools, err := recovery.NewTools(salvagetype.Tool{Name: "model", System: "llm", Call: func(ctx context.Context, c salvagetype.ToolCall) (salvagetype.ToolResult, error) {
		select {
		case <-ctx.Done():
			return salvagetype.ToolResult{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		return salvagetype.ToolResult{Output: json.RawMessage(`"ok"`), Usage: &salvagetype.Usage{Model: "m", PromptTokens: 100, CompletionTokens: 50}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	agent := salvagetype.Agent{Name: "writer", Run: func(ctx context.Context, t *salvagetype.Turn) (any, error) {
		return t.Tool(ctx, "model", t.Chunk)
	}}
	return &recovery.Plan{
		Name: "metered",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var n int
			if err := json.Unmarshal(in, &n); err != nil {
				return nil, fmt.Errorf("%w: %w", salvagetype.ErrBadInput, err)
			}
			out := make([]json.RawMessage, n)
			for i := range out {
				out[i] = json.RawMessage(fmt.Sprint(i + 1))
			}
			return out, nil
		},
		Tools:  tools,
		Stages: []salvagetype.Stage{{Name: "draft", Agents: []salvagetype.Agent{agent}}, {Name: "edit", Agents: []salvagetype.Agent{agent}}},
	}
}

// A job whose priced usage passes its budget stops its remaining chunks
// (cancelled-at-stage-N, reason budget exceeded) and gets one
// BUDGET_EXCEEDED envelope listing them, escalated; the chunks already
// done stay done, with their results.
func TestBudgetStopsTheRestOfTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{pipelines: []*recovery.Plan{meteredPipeline(t)}})
	b.startWorkerWith(t, "w1", func(c *worker.Config) {
		c.Concurrency = 2
		// 100 prompt tokens at 1 and 50 completion tokens at 2 per million:
		// 200 millionths a call, 400 a chunk.
		c.Prices = recovery.Prices{"m": {Prompt: 1, Completion: 2}}
	})
	b.startOrchestrator(t, "o1")
	escalations := b.subscribe(t, streams.EscalationSubject(salvagetype.CategoryBudgetExceeded))
	const chunks = 30
	job := ulid.Make().String()
	body, _ := json.Marshal(map[string]any{"job_id": job, "input": chunks, "budget": map[string]any{"cost": 0.001}})
	if _, err := b.JS.Publish(b.ctx, streams.Pipeline("metered").Subject(), body); err != nil {
		t.Fatal(err)
	}
	j := b.waitJob(t, job, salvagetype.JobCancelled)
	if j.BudgetExceededAt == nil || j.CancelReason != salvagetype.CancelReasonBudget {
		t.Fatalf("job %+v; want stopped by its budget", j)
	}
	// Three chunks (1,200 millionths) pass 0.001; chunks in flight then
	// may finish their stage.
	if j.Summary.Done < 3 || j.Summary.Done > 6 || j.Summary.Done+j.Summary.Cancelled != chunks || j.Summary.CostMicros < int64(400*j.Summary.Done) {
		t.Fatalf("summary %+v; want 3-6 done, the rest cancelled, at least 400 millionths per done chunk", j.Summary)
	}
	var spent int64 // a chunk stopped after its first stage spent that stage's call
	var stopped []int
	cps, err := b.stores.Parts()[0].Checkpoints.ForJob(b.ctx, job, chunks)
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range j.View(cps) {
		c := cp.Chunk
		switch {
		case cp.Status == salvagetype.ChunkDone:
			if cp.CostMicros != 400 {
				t.Fatalf("chunk %d cost %d; want 400", c, cp.CostMicros)
			}
			spent += cp.CostMicros
		case cp.Status.IsCancelled():
			stopped = append(stopped, c)
			spent += cp.CostMicros
			if cp.Status != salvagetype.CancelledAtStage(0) && cp.Reason != salvagetype.CancelReasonBudget {
				t.Fatalf("chunk %d cancelled with reason %q", c, cp.Reason)
			}
		default:
			t.Fatalf("chunk %d is %s", c, cp.Status)
		}
	}
	if j.Summary.CostMicros != spent {
		t.Fatalf("job cost %d; its chunks' costs add up to %d", j.Summary.CostMicros, spent)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(b.dlq(t)) == 1 }, "one BUDGET_EXCEEDED envelope")
	env := b.dlq(t)[0]
	if env.Category != salvagetype.CategoryBudgetExceeded || env.Strategy != salvagetype.StrategyEscalate || fmt.Sprint(env.StoppedChunks) != fmt.Sprint(stopped) {
		t.Fatalf("envelope %+v; want BUDGET_EXCEEDED listing %v", env, stopped)
	}
	rec := b.envelopeOf(t, job, env.Chunk, func(r kv.EnvelopeRecord) bool { return r.Status == salvagetype.EnvelopeEscalated }, "escalated")
	if rec.ID != env.ID {
		t.Fatalf("record %+v", rec)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(escalations()) == 1 }, "the escalation event")
	if n := b.streamMsgs(t, streams.Results); n != uint64(j.Summary.Done) {
		t.Fatalf("%d results; want one per done chunk (%d)", n, j.Summary.Done)
	}
}
