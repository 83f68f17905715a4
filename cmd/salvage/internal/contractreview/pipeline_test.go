package contractreview_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/salvagetest"
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
		if _, err := contractreview.Split(json.RawMessage(bad)); !errors.Is(err, salvage.ErrBadInput) {
			t.Errorf("Split(%s) = %v, want ErrBadInput", bad, err)
		}
	}
}

// TestChunkMakes116Calls runs one clause through the pipeline on a real
// server and worker: 116 model calls, one journal row each, and a finding.
func TestChunkMakes116Calls(t *testing.T) {
	m := &countingModel{}
	c := salvagetest.StartServer(t).Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{contractreview.New(m)}})
	ctx := context.Background()
	id, err := c.Submit(ctx, contractreview.Name, contractreview.Input{Text: "Clause 1\n\nThe Supplier shall indemnify the Customer."}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
	if got := m.n.Load(); got != contractreview.CallsPerChunk {
		t.Fatalf("%d model calls, want %d", got, contractreview.CallsPerChunk)
	}
	tr, err := c.Trace(ctx, id)
	if err != nil || len(tr.Chunks) != 1 || len(tr.Chunks[0].Calls) != contractreview.CallsPerChunk {
		t.Fatalf("trace: %v, %d chunks", err, len(tr.Chunks))
	}
	res, err := c.Results(ctx, id)
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
