package recovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

type memSnapshots struct {
	mu      sync.Mutex
	objects map[string][]byte
}

func (m *memSnapshots) PutState(_ context.Context, job string, chunk, epoch int, agent string, st *salvagetype.AgentState) error {
	st.Seq++
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[fmt.Sprintf("%s.%d.%d.%s.%d", job, chunk, epoch, agent, st.Seq)] = data
	return nil
}

// TestSnapshotBeforeIrreversibleCallsOnly: a snapshot is paid before a call
// nothing can undo, not per call.
func TestSnapshotBeforeIrreversibleCallsOnly(t *testing.T) {
	t.Parallel()
	call := func(context.Context, salvagetype.ToolCall) (salvagetype.ToolResult, error) {
		return salvagetype.ToolResult{Output: json.RawMessage(`{}`)}, nil
	}
	verify := func(context.Context, string) (salvagetype.Verification, error) {
		return salvagetype.Verification{}, nil
	}
	tools, err := recovery.NewTools(
		salvagetype.Tool{Name: "lookup", Call: call},
		salvagetype.Tool{Name: "charge", Call: call, Effect: &salvagetype.SideEffect{Reversible: true, Compensation: "refund", Verify: verify}},
		salvagetype.Tool{Name: "refund", Call: call},
		salvagetype.Tool{Name: "email", Call: call, Effect: &salvagetype.SideEffect{Verify: verify}},
	)
	if err != nil {
		t.Fatal(err)
	}
	exec, _ := recovery.NewExecutor(recovery.RetryPolicy{}, zerolog.Nop())
	snaps := &memSnapshots{objects: map[string][]byte{}}
	states := map[string]*salvagetype.AgentState{}
	var stats recovery.Stats
	_, err = recovery.RunStage(context.Background(), salvagetype.Stage{Agents: []salvagetype.Agent{{Name: "clerk", Run: func(ctx context.Context, tr *salvagetype.Turn) (any, error) {
		tr.State().Goal = "fulfil order o-1"
		for _, tool := range []string{"lookup", "charge", "email", "lookup"} {
			if _, err := tr.Tool(ctx, tool, tool); err != nil {
				return nil, err
			}
			tr.State().Messages = append(tr.State().Messages, salvagetype.Message{Role: "tool", Content: tool})
		}
		return nil, nil
	}}}}, recovery.StageRun{Job: "J", Chunk: 1, Stage: 1, Exec: exec, Stats: &stats, Tools: tools, States: states, Snapshots: snaps})
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps.objects) != 1 || stats.Snapshots.Load() != 1 {
		t.Fatalf("%d snapshots for 4 calls, want 1 (before the email)", len(snaps.objects))
	}
	data := snaps.objects["J.1.0.clerk.1"]
	var before salvagetype.AgentState
	if err := json.Unmarshal(data, &before); err != nil {
		t.Fatal(err)
	}
	if before.Goal != "fulfil order o-1" || len(before.Completed) != 2 || len(before.Messages) != 2 {
		t.Fatalf("snapshot before the email = %+v, want the goal and the two calls before it", before)
	}
	st := states["clerk"]
	if len(st.Completed) != 4 || st.Seq != 1 {
		t.Fatalf("state after the stage = %+v", st)
	}
}

// TestRebuildCompleted: an agent never snapshotted gets back the entries
// it completed before the resumed stage, in order; a snapshotted one and
// rows of the resumed stage or that did not succeed are left alone.
func TestRebuildCompleted(t *testing.T) {
	t.Parallel()
	row := func(stage int, agent string, seq int, status salvagetype.CallStatus) kv.StoredRow {
		return kv.StoredRow{JournalRow: kv.JournalRow{Call: salvagetype.Call{Key: kv.JournalKey("J", 1, 0, stage, agent, seq), Stage: stage, Agent: agent, Seq: seq, Status: status, StartedAt: time.Unix(int64(stage*100+seq), 0)}}, Seq: uint64(stage*100 + seq)}
	}
	rows := map[string]kv.StoredRow{}
	for _, r := range []kv.StoredRow{
		row(1, "a", 2, salvagetype.CallSucceeded), row(1, "a", 1, salvagetype.CallSucceeded), row(1, "a", 3, salvagetype.CallFailed),
		row(2, "a", 1, salvagetype.CallSucceeded), row(1, "snap", 1, salvagetype.CallSucceeded), row(1, "b", 1, salvagetype.CallSucceeded),
	} {
		rows[r.Key] = r
	}
	snapped := &salvagetype.AgentState{Completed: []string{"from-snapshot"}, Seq: 1}
	states := map[string]*salvagetype.AgentState{"snap": snapped}
	recovery.Rows(rows).RebuildCompleted(states, 2)
	want := []string{kv.JournalKey("J", 1, 0, 1, "a", 1), kv.JournalKey("J", 1, 0, 1, "a", 2)}
	if got := states["a"].Completed; !slices.Equal(got, want) {
		t.Errorf("a completed = %v, want %v", got, want)
	}
	if got := states["b"].Completed; len(got) != 1 {
		t.Errorf("b completed = %v, want its one stage-1 entry", got)
	}
	if got := states["snap"].Completed; !slices.Equal(got, []string{"from-snapshot"}) {
		t.Errorf("snapshotted agent's entries = %v, want the snapshot's", got)
	}
	if !(&salvagetype.AgentState{Completed: want}).Derivable() || (&salvagetype.AgentState{Memory: map[string]json.RawMessage{"k": []byte(`1`)}}).Derivable() {
		t.Error("Derivable: want true for entries only, false with memory")
	}
}
