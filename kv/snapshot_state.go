package kv

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/salvagehq/salvage/salvagetype"
)

// SaveState takes agent's next snapshot of st (st.Seq counts up) at a
// stage boundary of one chunk epoch and returns its reference, for the
// stage's checkpoint write: inline when small (Save).
func (s *snapshotStore) SaveState(ctx context.Context, job string, chunk, epoch int, agent string, st *salvagetype.AgentState) (SnapshotRef, error) {
	st.Seq++
	name := snapshotName(job, chunk, epoch, agent, st.Seq)
	data, err := json.Marshal(st)
	if err != nil {
		return SnapshotRef{}, fmt.Errorf("kv: snapshot %s: %w", name, err)
	}
	return s.Save(ctx, name, st.Seq, data)
}

// PutState stores agent's next snapshot of st (st.Seq counts up) in the
// object store, for a point no checkpoint write marks (before an
// irreversible call).
func (s *snapshotStore) PutState(ctx context.Context, job string, chunk, epoch int, agent string, st *salvagetype.AgentState) error {
	st.Seq++
	name := snapshotName(job, chunk, epoch, agent, st.Seq)
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("kv: snapshot %s: %w", name, err)
	}
	return s.Put(ctx, name, data)
}

// LoadState reads the agent state a snapshot reference names, or
// ErrNotFound.
func (s *snapshotStore) LoadState(ctx context.Context, ref SnapshotRef) (*salvagetype.AgentState, error) {
	data, err := s.Load(ctx, ref)
	if err != nil {
		return nil, err
	}
	var st salvagetype.AgentState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("kv: snapshot %d: %w", ref.Seq, err)
	}
	return &st, nil
}
