package salvage

import (
	"context"
	"fmt"
	"sort"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// Trace is a job's timeline: each chunk's state and its calls.
type Trace struct {
	Job     string       `json:"job_id"`
	TraceID string       `json:"trace_id"`
	Status  JobStatus    `json:"status"`
	Chunks  []TraceChunk `json:"chunks"`
	// NextOffset, on a page (JobTracePage), is the offset of the next page
	// of chunks; 0 when this page is the last.
	NextOffset int `json:"next_offset,omitempty"`
}

// TraceChunk is one chunk's part of a Trace: its calls in the order they
// began, every epoch, each with the earlier outcomes a re-run replaced.
type TraceChunk struct {
	Chunk  int         `json:"chunk"`
	Status ChunkStatus `json:"status"`
	Stage  int         `json:"stage"`
	Epoch  int         `json:"epoch"`
	// Deliveries is JetStream's delivery count of the message the chunk
	// last ran from (as Chunk.Deliveries); Redeliveries adds up every
	// redelivery of every message of the chunk.
	Deliveries   uint64 `json:"deliveries"`
	Redeliveries int    `json:"redeliveries,omitempty"`
	Tier1        int    `json:"tier1_retries"`
	Recoveries   int    `json:"recoveries"`
	Envelope     string `json:"envelope,omitempty"`
	Error        string `json:"error,omitempty"`
	Calls        []Call `json:"calls"`
	// Events are what happened to the chunk besides its calls: each
	// delivery a worker took (a redelivery after a crash shows as a
	// second delivery by another worker), holds, parks and outcomes,
	// oldest first; EventsDropped counts those dropped past the bound.
	Events        []ChunkEvent `json:"events,omitempty"`
	EventsDropped int          `json:"events_dropped,omitempty"`
}

// ChunkEvent is one thing that happened to a chunk: Kind is delivered,
// held, awaiting-approval, paused, compensated, done, dead-lettered or
// cancelled (the Event* constants), At when, Delivery the delivery count
// a worker took, Worker who, Stage where, Detail the system a hold waits
// for, the effect a compensation undid or a dead-letter's envelope.
type ChunkEvent = salvagetype.ChunkEvent

// JobTrace returns job id's timeline, from its record, checkpoints and
// journal. It reads every call of the job: meant for one job at a time,
// not for a loop; ChunkTrace reads one chunk's.
func (c *Client) JobTrace(ctx context.Context, id string) (*Trace, error) {
	j, st, err := c.job(ctx, id)
	if err != nil {
		return nil, err
	}
	return traceOf(ctx, j, st, 1, j.Chunks)
}

// JobTracePage returns one page of job id's timeline: the chunks page
// selects (nil: the first PageDefault), with NextOffset set when more
// follow. It reads only those chunks' checkpoints and journals; a page
// of one chunk (Offset chunk-1, Limit 1) is that chunk's timeline.
func (c *Client) JobTracePage(ctx context.Context, id string, page *Page) (*Trace, error) {
	j, st, err := c.job(ctx, id)
	if err != nil {
		return nil, err
	}
	from, to := page.Bounds(j.Chunks)
	tr, err := traceOf(ctx, j, st, from+1, to)
	if err != nil {
		return nil, err
	}
	if to < j.Chunks {
		tr.NextOffset = to
	}
	return tr, nil
}

// traceOf is the timeline of chunks first to last of job j (none when
// last < first): one read of their checkpoints, one of each chunk's
// journal.
func traceOf(ctx context.Context, j kv.Job, st *kv.Stores, first, last int) (*Trace, error) {
	tr := &Trace{Job: j.ID, TraceID: j.TraceID, Status: JobStatus(j.Status), Chunks: []TraceChunk{}}
	if first > last {
		return tr, nil
	}
	part, err := st.PartOf(ctx, j)
	if err != nil {
		return nil, err
	}
	cps, err := part.Checkpoints.ForJobRange(ctx, j.ID, first, last)
	if err != nil {
		return nil, err
	}
	for _, cp := range j.View(cps) {
		rows, err := part.Journal.LoadChunk(ctx, j.ID, cp.Chunk)
		if err != nil {
			return nil, err
		}
		tc, err := traceChunk(cp, rows)
		if err != nil {
			return nil, err
		}
		tr.Chunks = append(tr.Chunks, tc)
	}
	return tr, nil
}

// ChunkTrace returns one chunk's part of job id's timeline, reading only
// that chunk's checkpoint and journal. A chunk outside the job wraps
// ErrUnknownJob.
func (c *Client) ChunkTrace(ctx context.Context, id string, chunk int) (*TraceChunk, error) {
	j, st, err := c.job(ctx, id)
	if err != nil {
		return nil, err
	}
	if chunk < 1 || chunk > j.Chunks {
		return nil, fmt.Errorf("%w: job %s has no chunk %d", ErrUnknownJob, id, chunk)
	}
	part, err := st.PartOf(ctx, j)
	if err != nil {
		return nil, err
	}
	cps, err := part.Checkpoints.ForJobRange(ctx, id, chunk, chunk)
	if err != nil {
		return nil, err
	}
	rows, err := part.Journal.LoadChunk(ctx, id, chunk)
	if err != nil {
		return nil, err
	}
	tc, err := traceChunk(j.View(cps)[0], rows)
	return &tc, err
}

// traceChunk is one chunk's timeline: its checkpoint and its calls of
// every epoch, in the order they began.
func traceChunk(cp kv.Checkpoint, rows map[string]kv.StoredRow) (TraceChunk, error) {
	calls := make([]kv.JournalRow, 0, len(rows))
	for _, r := range rows {
		calls = append(calls, r.JournalRow)
	}
	sort.Slice(calls, func(a, b int) bool {
		if calls[a].Epoch != calls[b].Epoch {
			return calls[a].Epoch < calls[b].Epoch
		}
		return calls[a].StartedAt.Before(calls[b].StartedAt)
	})
	tc := TraceChunk{Chunk: cp.Chunk, Status: ChunkStatus(cp.Status), Stage: cp.Stage, Epoch: cp.Epoch,
		Deliveries: cp.Deliveries, Redeliveries: cp.Redeliveries, Tier1: cp.Tier1Retries, Recoveries: cp.Recoveries, Envelope: cp.Envelope, Error: cp.Reason,
		Events: cp.Events, EventsDropped: cp.EventsDropped}
	tc.Calls = callsOf(calls)
	return tc, nil
}
