package recovery

import (
	"context"

	"github.com/salvagehq/salvage/salvagetype"
)

// RebuildCompleted gives every agent that has no state in states one
// rebuilt from the rows: the entries it completed in stages before
// stage, in the order they were made. A chunk resuming at stage uses it
// for the agents whose states were derivable, so never snapshotted.
func (rows Rows) RebuildCompleted(states map[string]*salvagetype.AgentState, stage int) {
	for _, r := range rows.Sorted() {
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

// snapshotStore keeps snapshots; kv's Snapshots implements it.
type snapshotStore interface {
	// PutState stores agent's next snapshot of st (st.Seq counts up) in
	// the object store.
	PutState(ctx context.Context, job string, chunk, epoch int, agent string, st *salvagetype.AgentState) error
}

// State is the agent's state for this turn, loaded from its latest
// snapshot on resume. Agents keep their conversation and memory here.
func (t *turn) State() *salvagetype.AgentState { return t.state }
