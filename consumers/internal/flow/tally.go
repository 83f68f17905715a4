package flow

import (
	"context"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
)

// PastTally is what the calls of a chunk's epochs before epoch came to,
// from their journal rows: a chunk runs in a later epoch only after a
// compensate-and-retry, so this reads nothing for almost every chunk.
func PastTally(ctx context.Context, part *kv.Part, job string, chunk, epoch int, prices recovery.Prices) (recovery.Tally, error) {
	var t recovery.Tally
	for e := range epoch {
		rows, err := part.Journal.Load(ctx, job, chunk, e)
		if err != nil {
			return t, err
		}
		t = t.Plus(recovery.Rows(rows).Tally(prices))
	}
	return t, nil
}

// SetTally sets cp's calls, tokens and cost to t, what its journal rows
// say (invariant 12). A row retention removed after it was counted (the
// pure calls of a finished chunk a replay runs again) is not uncounted:
// each figure only grows, as the job's counts built from it do.
func SetTally(cp *kv.Checkpoint, t recovery.Tally) {
	cp.Calls = max(cp.Calls, t.Calls)
	cp.PromptTokens = max(cp.PromptTokens, t.PromptTokens)
	cp.CompletionTokens = max(cp.CompletionTokens, t.CompletionTokens)
	cp.CostMicros = max(cp.CostMicros, t.CostMicros)
}

// ChunkTally is what every call of a chunk came to, in every epoch up to
// epoch, from the journal; nothing is read for a chunk no worker ever took
// (taken is false): it has no rows.
func ChunkTally(ctx context.Context, part *kv.Part, cp kv.Checkpoint, prices recovery.Prices) (recovery.Tally, error) {
	if cp.MsgSeq == 0 {
		return recovery.Tally{}, nil
	}
	return PastTally(ctx, part, cp.Job, cp.Chunk, cp.Epoch+1, prices)
}
