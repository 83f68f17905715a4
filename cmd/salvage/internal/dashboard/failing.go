package dashboard

import (
	"cmp"
	"slices"

	"github.com/salvagehq/salvage"
)

// attention ranks a chunk for an operator: 0 dead-lettered, 1 parked
// (held at a breaker, awaiting approval, paused), 2 cancelled with
// effects settled by an envelope, 3 unfinished (running or pending)
// carrying an envelope or an error; -1 a chunk that needs nobody: every
// done chunk, whatever it went through on the way (a hold, a failure a
// recovery mended).
func attention(ch salvage.Chunk) int {
	switch ch.Status {
	case salvage.ChunkDone:
		return -1
	case salvage.ChunkDeadLettered:
		return 0
	case salvage.ChunkHeld, salvage.ChunkAwaitingApproval, salvage.ChunkPaused:
		return 1
	}
	if _, ok := ch.Status.Cancelled(); ok {
		if ch.Envelope != "" {
			return 2
		}
		return -1
	}
	if ch.Envelope != "" || ch.LastError != "" {
		return 3
	}
	return -1
}

// Failing keeps the chunks that need a person or are not finished —
// dead-lettered first, then parked, then cancelled with settled effects,
// then unfinished ones with an envelope or an error, each group by chunk
// number — for `salvage status --failed` and the job page's filter. A
// done chunk is never among them.
func Failing(chunks []salvage.Chunk) []salvage.Chunk {
	var out []salvage.Chunk
	for _, ch := range chunks {
		if attention(ch) >= 0 {
			out = append(out, ch)
		}
	}
	slices.SortStableFunc(out, func(a, b salvage.Chunk) int { return cmp.Compare(attention(a), attention(b)) })
	return out
}
