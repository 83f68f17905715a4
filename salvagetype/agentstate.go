package salvagetype

import "encoding/json"

// Message is one turn of an agent's conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// AgentState is what an agent knows: its conversation, goal and
// sub-goals, the journal entries it completed, and its working memory.
// Salvage snapshots it at stage boundaries and before any call to an
// irreversible tool; a resumed chunk starts each agent from its latest
// stage-boundary snapshot and replays it against its journal.
type AgentState struct {
	Goal      string                     `json:"goal,omitempty"`
	SubGoals  []string                   `json:"sub_goals,omitempty"`
	Messages  []Message                  `json:"messages,omitempty"`
	Completed []string                   `json:"completed_entries,omitempty"`
	Memory    map[string]json.RawMessage `json:"memory,omitempty"`
	// Seq numbers the agent's snapshots; it only grows.
	Seq int `json:"seq"`
}

// Derivable reports whether the journal alone rebuilds the state: it holds
// nothing but the entries the agent completed. Such a state needs no
// snapshot at a stage boundary (RebuildCompleted restores it on resume),
// which keeps snapshots off the hot path of agents that keep no memory.
func (s *AgentState) Derivable() bool {
	return s.Goal == "" && len(s.SubGoals) == 0 && len(s.Messages) == 0 && len(s.Memory) == 0
}
