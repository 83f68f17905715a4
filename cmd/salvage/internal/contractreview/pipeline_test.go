package contractreview_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
)

type countingModel struct{ n atomic.Int64 }

func (m *countingModel) Score(_ context.Context, _, prompt string) (int, error) {
	m.n.Add(1)
	return len(prompt) % 11, nil
}

func TestSplitIntoClauses(t *testing.T) {
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
		if _, err := contractreview.Split(json.RawMessage(bad)); !errors.Is(err, recovery.ErrBadInput) {
			t.Errorf("Split(%s) = %v, want ErrBadInput", bad, err)
		}
	}
}

func TestChunkMakes116Calls(t *testing.T) {
	m := &countingModel{}
	p := contractreview.New(m)
	exec, err := recovery.NewExecutor(recovery.RetryPolicy{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(contractreview.Clause{Index: 1, Text: "The Supplier shall indemnify the Customer."})
	var outs []kv.StageOutput
	var stats recovery.Stats
	for i, st := range p.Stages {
		o, err := recovery.RunStage(context.Background(), st, recovery.StageRun{Job: "J", Chunk: 1, Stage: i + 1, Input: in, Prior: outs, Exec: exec, Stats: &stats, Tools: p.Tools})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o...)
	}
	if got := m.n.Load(); got != contractreview.CallsPerChunk {
		t.Fatalf("%d model calls, want %d", got, contractreview.CallsPerChunk)
	}
	res, err := p.Result(in, outs)
	if err != nil {
		t.Fatal(err)
	}
	var f contractreview.Finding
	if err := json.Unmarshal(res, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Scores) != 101 || len(f.CategoryRisk) != len(contractreview.Categories) || f.Risk == "" || f.ClauseType == "" {
		t.Fatalf("finding = %+v", f)
	}
}
