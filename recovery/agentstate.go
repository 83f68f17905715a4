package recovery

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// RebuildCompleted gives every agent that has no state in states one
// rebuilt from the journal: the entries it completed in stages before
// stage, in the order they were made. A chunk resuming at stage uses it
// for the agents whose states were derivable, so never snapshotted.
func RebuildCompleted(states map[string]*salvagetype.AgentState, rows map[string]kv.StoredRow, stage int) {
	for _, r := range SortedRows(rows) {
		if r.Stage >= stage || r.Status != salvagetype.CallSucceeded {
			continue
		}
		st := states[r.Agent]
		if st == nil {
			st = &salvagetype.AgentState{}
			states[r.Agent] = st
		} else if st.Seq > 0 {
			continue // loaded from a snapshot, which has its entries
		}
		st.Completed = append(st.Completed, r.Key)
	}
}

// snapshotStore keeps snapshots; kv.Snapshots implements it.
type snapshotStore interface {
	// Save returns a reference, inline when small.
	Save(ctx context.Context, name string, seq int, data []byte) (kv.SnapshotRef, error)
	// Put stores a snapshot under name in the object store.
	Put(ctx context.Context, name string, data []byte) error
	// Load reads a snapshot by reference.
	Load(ctx context.Context, ref kv.SnapshotRef) ([]byte, error)
}

// SaveSnapshot takes the agent's next snapshot at a stage boundary and
// returns its reference, for the stage's checkpoint write.
func SaveSnapshot(ctx context.Context, store snapshotStore, job string, chunk, epoch int, agent string, st *salvagetype.AgentState) (kv.SnapshotRef, error) {
	st.Seq++
	name := kv.SnapshotName(job, chunk, epoch, agent, st.Seq)
	data, err := json.Marshal(st)
	if err != nil {
		return kv.SnapshotRef{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	return store.Save(ctx, name, st.Seq, data)
}

// putSnapshot stores the agent's next snapshot in the object store, for a
// point no checkpoint write marks (before an irreversible call).
func putSnapshot(ctx context.Context, store snapshotStore, job string, chunk, epoch int, agent string, st *salvagetype.AgentState) error {
	st.Seq++
	name := kv.SnapshotName(job, chunk, epoch, agent, st.Seq)
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", name, err)
	}
	return store.Put(ctx, name, data)
}

// LoadSnapshot reads a snapshot.
func LoadSnapshot(ctx context.Context, store snapshotStore, ref kv.SnapshotRef) (*salvagetype.AgentState, error) {
	data, err := store.Load(ctx, ref)
	if err != nil {
		return nil, err
	}
	var st salvagetype.AgentState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("snapshot %d: %w", ref.Seq, err)
	}
	return &st, nil
}

// State is the agent's state for this turn, loaded from its latest
// snapshot on resume. Agents keep their conversation and memory here.
func (t *turn) State() *salvagetype.AgentState { return t.state }
