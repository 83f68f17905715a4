package kv

import "github.com/salvagehq/salvage/salvagetype"

// Delta is one chunk's change as its job counts it: from one outcome to
// another, and the events that came with it.
type Delta struct {
	From, To salvagetype.ChunkStatus
	// Degraded is +1 when the chunk ends done without optional stages.
	Degraded int
	// DeadLetters is 1 when the chunk was just dead-lettered.
	DeadLetters int
	// Tier1 and Redeliveries are the chunk's retries since they were
	// last counted.
	Tier1, Redeliveries int
	// PromptTokens and CompletionTokens are the chunk's model usage since
	// it was last counted.
	PromptTokens, CompletionTokens int64
	// CostMicros is what that usage cost, in millionths.
	CostMicros int64
}

// Empty reports whether d changes nothing.
func (d Delta) Empty() bool {
	return d.From == d.To && d.Degraded == 0 && d.DeadLetters == 0 && d.Tier1 == 0 && d.Redeliveries == 0 &&
		d.PromptTokens == 0 && d.CompletionTokens == 0 && d.CostMicros == 0
}

// Recount is called on a checkpoint about to be written: it returns how
// the job's counts must change for the chunk's new status and marks them
// counted, so the change rides in the same compare-and-swap as the status
// (and is applied to the job right after it, with Jobs.Apply). A crash
// between the two loses at most one update, which Jobs.Settle repairs.
func (c *Checkpoint) Recount() Delta {
	d := Delta{From: c.Counted, To: c.Status.Outcome(), Tier1: c.Tier1Retries - c.CountedTier1, Redeliveries: c.Redeliveries - c.CountedRedeliveries,
		PromptTokens: c.PromptTokens - c.CountedPromptTokens, CompletionTokens: c.CompletionTokens - c.CountedCompletionTokens,
		CostMicros: c.CostMicros - c.CountedCostMicros}
	if d.To == salvagetype.ChunkDone && len(c.Gaps) > 0 && d.From != salvagetype.ChunkDone {
		d.Degraded = 1
	}
	if d.To == salvagetype.ChunkDeadLettered && d.From != salvagetype.ChunkDeadLettered {
		d.DeadLetters = 1
		c.DeadLetters++
	}
	c.Counted, c.CountedTier1, c.CountedRedeliveries = d.To, c.Tier1Retries, c.Redeliveries
	c.CountedPromptTokens, c.CountedCompletionTokens, c.CountedCostMicros = c.PromptTokens, c.CompletionTokens, c.CostMicros
	return d
}
