package salvage

import (
	"cmp"
	"context"
	"slices"

	"github.com/salvagehq/salvage/kv"
)

// NeedingAttention keeps the chunks that need a person or are not
// finished (Attention 0 and up), dead-lettered first, then parked, then
// cancelled with settled effects, then unfinished ones with an envelope
// or an error, each group in the order given.
func NeedingAttention(chunks []Chunk) []Chunk {
	var out []Chunk
	for _, ch := range chunks {
		if ch.Attention() >= 0 {
			out = append(out, ch)
		}
	}
	slices.SortStableFunc(out, func(a, b Chunk) int { return cmp.Compare(a.Attention(), b.Attention()) })
	return out
}

// FailingPage is a job and one page of the chunks of it that failed or
// wait (NeedingAttention).
type FailingPage struct {
	ChunkPage
	// Matched counts them all, every page's.
	Matched int `json:"matched"`
}

// ChunkListFailing returns job id and one page of its chunks that failed or wait,
// dead-lettered first, each group by chunk number (see NeedingAttention):
// what `salvage status --failed` and the dashboard's failed filter show.
// It reads the chunks the job's attention index names — O(chunks that
// ever failed or waited), whatever the job's size — except for a job
// created before that index, whose chunks it reads all, a thousand at a
// time, keeping only the failing ones.
func (c *Client) ChunkListFailing(ctx context.Context, id string, page *Page) (*FailingPage, error) {
	j, st, err := c.jobOrWhy(ctx, id)
	if err != nil {
		return nil, err
	}
	var chunks []Chunk
	keep := func(cps []kv.Checkpoint) {
		for _, cp := range j.View(cps) {
			if ch := chunkOf(cp); ch.Attention() >= 0 {
				chunks = append(chunks, ch)
			}
		}
	}
	part, err := st.PartOf(ctx, j)
	if err != nil {
		return nil, err
	}
	if j.AttentionIndexed {
		flagged, err := part.Checkpoints.Flagged(ctx, id, j.Chunks)
		if err != nil {
			return nil, err
		}
		cps, err := part.Checkpoints.Chunks(ctx, id, flagged)
		if err != nil {
			return nil, err
		}
		keep(cps)
	} else {
		for lo := 1; lo <= j.Chunks; lo += PageMax {
			cps, err := part.Checkpoints.ForJobRange(ctx, id, lo, min(lo+PageMax-1, j.Chunks))
			if err != nil {
				return nil, err
			}
			keep(cps)
		}
	}
	failing := NeedingAttention(chunks)
	from, to := page.Bounds(len(failing))
	out := &FailingPage{ChunkPage: ChunkPage{Job: jobOf(j), Chunks: failing[from:to], Offset: from}, Matched: len(failing)}
	if out.Chunks == nil {
		out.Chunks = []Chunk{}
	}
	if to < len(failing) {
		out.NextOffset = to
	}
	return out, nil
}
