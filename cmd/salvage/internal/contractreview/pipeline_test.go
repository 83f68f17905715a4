package contractreview_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/salvagetest"
)

// countingModel answers every chat request with a score drawn from the
// prompt, and 10 prompt tokens and 1 completion token of usage; vague
// answers the first call of each prompt with words, not a score.
type countingModel struct {
	n     atomic.Int64
	vague bool
	seen  sync.Map
}

func (m *countingModel) tool() salvage.Tool {
	return salvage.Tool{Name: "any-name", System: "model", Call: func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
		m.n.Add(1)
		var req salvage.ChatRequest
		if err := json.Unmarshal(c.Input, &req); err != nil || len(req.Messages) < 2 || req.Messages[0].Role != "system" {
			return salvage.ToolResult{}, salvage.Permanent(400, fmt.Errorf("not a chat request: %s", c.Input))
		}
		prompt := req.Messages[1].Content
		answer := strconv.Itoa(len(prompt) % 11)
		if _, again := m.seen.LoadOrStore(prompt, true); m.vague && !again {
			answer = "It depends on the jurisdiction."
		}
		usage := salvage.Usage{Model: "counting", PromptTokens: 10, CompletionTokens: 1}
		out, _ := json.Marshal(salvage.ChatResponse{Content: answer, Usage: usage})
		return salvage.ToolResult{Output: out, Usage: &usage}, nil
	}}
}

func TestSplitIntoClauses(t *testing.T) {
	t.Parallel()
	in, _ := json.Marshal(contractreview.Input{Text: contractreview.Contract(22, 7)})
	chunks, err := contractreview.Split(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 22 {
		t.Fatalf("%d chunks, want 22", len(chunks))
	}
	var c contractreview.Clause
	_ = json.Unmarshal(chunks[21], &c)
	if c.Index != 22 || c.Heading != "Clause 22" || c.Text == "" {
		t.Fatalf("last clause = %+v", c)
	}
	for _, bad := range []string{`{"text": ""}`, `{"text": 5}`, `[]`, `{"text": "Heading only"}`} {
		if _, err := contractreview.Split(json.RawMessage(bad)); !errors.Is(err, salvage.ErrBadInput) {
			t.Errorf("Split(%s) = %v, want ErrBadInput", bad, err)
		}
	}
}

// TestChunkMakes116Calls runs one clause through the pipeline on a real
// server and worker: 116 model calls, one journal row each, and a finding.
func TestChunkMakes116Calls(t *testing.T) {
	t.Parallel()
	m := &countingModel{}
	c := salvagetest.StartServer(t).Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{contractreview.New(m.tool())}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, contractreview.Name, contractreview.Input{Text: "Clause 1\n\nThe Supplier shall indemnify the Customer."}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
	if got := m.n.Load(); got != contractreview.CallsPerChunk {
		t.Fatalf("%d model calls, want %d", got, contractreview.CallsPerChunk)
	}
	// Every call's usage is in its journal row and adds up in the job.
	j, err := c.JobGet(ctx, id)
	if err != nil || j.Summary.PromptTokens != 10*contractreview.CallsPerChunk || j.Summary.CompletionTokens != contractreview.CallsPerChunk {
		t.Fatalf("job tokens = %d + %d, %v; want %d + %d", j.Summary.PromptTokens, j.Summary.CompletionTokens, err, 10*contractreview.CallsPerChunk, contractreview.CallsPerChunk)
	}
	tr, err := c.JobTrace(ctx, id)
	if err != nil || len(tr.Chunks) != 1 || len(tr.Chunks[0].Calls) != contractreview.CallsPerChunk {
		t.Fatalf("trace: %v, %d chunks", err, len(tr.Chunks))
	}
	if u := tr.Chunks[0].Calls[0].Usage; u == nil || u.Model != "counting" || u.PromptTokens != 10 {
		t.Errorf("the first call's journaled usage = %+v", u)
	}
	res, err := c.JobResults(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var f contractreview.Finding
	if err := json.Unmarshal(res[1], &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Scores) != 101 || len(f.CategoryRisk) != len(contractreview.Categories) || f.Risk == "" || f.ClauseType == "" {
		t.Fatalf("finding = %+v", f)
	}
}

// TestVagueAnswerIsAskedAgain: a model that answers in words is asked once
// more for the integer; each ask is its own journaled call.
func TestVagueAnswerIsAskedAgain(t *testing.T) {
	t.Parallel()
	m := &countingModel{vague: true}
	c := salvagetest.StartServer(t).Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{contractreview.New(m.tool())}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, contractreview.Name, contractreview.Input{Text: "The Supplier shall indemnify the Customer."}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
	// Prompts repeat across synthesis steps only by step name, so every
	// prompt is new: each was asked twice.
	if got := m.n.Load(); got != 2*contractreview.CallsPerChunk {
		t.Errorf("%d model calls, want %d (each asked again once)", got, 2*contractreview.CallsPerChunk)
	}
}
