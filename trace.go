package salvage

import (
	"context"
	"sort"

	"github.com/salvagehq/salvage/kv"
)

// Trace is a job's timeline: each chunk's state and its calls.
type Trace struct {
	Job     string       `json:"job_id"`
	TraceID string       `json:"trace_id"`
	Status  JobStatus    `json:"status"`
	Chunks  []TraceChunk `json:"chunks"`
}

// TraceChunk is one chunk's part of a Trace: its calls in the order they
// began, every epoch, each with the earlier outcomes a re-run replaced.
type TraceChunk struct {
	Chunk      int         `json:"chunk"`
	Status     ChunkStatus `json:"status"`
	Stage      int         `json:"stage"`
	Epoch      int         `json:"epoch"`
	Deliveries uint64      `json:"deliveries"`
	Tier1      int         `json:"tier1_retries"`
	Recoveries int         `json:"recoveries"`
	Envelope   string      `json:"envelope,omitempty"`
	Error      string      `json:"error,omitempty"`
	Calls      []Call      `json:"calls"`
}

// Trace returns job id's timeline, from its record, checkpoints and
// journal. It reads every call of the job: meant for one job at a time,
// not for a loop.
func (c *Client) Trace(ctx context.Context, id string) (*Trace, error) {
	j, st, err := c.job(ctx, id)
	if err != nil {
		return nil, err
	}
	cps, err := st.Checkpoints.ForJob(ctx, id, j.Chunks)
	if err != nil {
		return nil, err
	}
	rows, err := st.Journal.LoadJob(ctx, id, j.Chunks)
	if err != nil {
		return nil, err
	}
	byChunk := map[int][]kv.JournalRow{}
	for _, r := range rows {
		byChunk[r.Chunk] = append(byChunk[r.Chunk], r.JournalRow)
	}
	tr := &Trace{Job: id, TraceID: j.TraceID, Status: JobStatus(j.Status)}
	for _, cp := range j.View(cps) {
		calls := byChunk[cp.Chunk]
		sort.Slice(calls, func(a, b int) bool {
			if calls[a].Epoch != calls[b].Epoch {
				return calls[a].Epoch < calls[b].Epoch
			}
			return calls[a].StartedAt.Before(calls[b].StartedAt)
		})
		tc := TraceChunk{Chunk: cp.Chunk, Status: ChunkStatus(cp.Status), Stage: cp.Stage, Epoch: cp.Epoch,
			Deliveries: cp.Deliveries, Tier1: cp.Tier1Retries, Recoveries: cp.Recoveries, Envelope: cp.Envelope, Error: cp.Reason}
		if tc.Calls, err = recast[[]Call](calls); err != nil {
			return nil, err
		}
		if tc.Calls == nil {
			tc.Calls = []Call{}
		}
		tr.Chunks = append(tr.Chunks, tc)
	}
	return tr, nil
}
