package salvage

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// ErrNotAwaitingApproval is returned by Approve for a chunk that does not
// wait for a person's approval, or whose message is still being parked
// (try again in a moment).
var ErrNotAwaitingApproval = salvagetype.ErrNotAwaitingApproval

// Decision is a person's answer to a chunk awaiting approval before a
// stage with Stage.RequiresApproval.
type Decision struct {
	// Reject ends the chunk instead: what it did is compensated, newest
	// first, and its envelope ends abandoned (escalated when an
	// irreversible effect stands).
	Reject bool
	// By names who decided (recorded in the checkpoint or the envelope);
	// default "api". Note says why.
	By, Note string
}

// ChunkApprove answers chunk of job, which waits (status awaiting-approval)
// before a stage that requires approval. Approved, the chunk goes back to
// the work queue and runs the stage, wherever its worker is — also after
// every process was restarted. It returns the chunk's checkpoint, or an
// error wrapping ErrUnknownJob, ErrInvalidToken or ErrNotAwaitingApproval.
func (c *Client) ChunkApprove(ctx context.Context, job string, chunk int, d Decision) (*Chunk, error) {
	if err := streams.ValidateJobID(job); err != nil {
		return nil, err
	}
	if chunk < 1 {
		return nil, fmt.Errorf("%w: chunk %d: chunks are numbered from 1", ErrNotAwaitingApproval, chunk)
	}
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	e := AuditEntry{Action: AuditApprove, Job: job, Chunk: chunk}
	if d.Reject {
		e.Action = AuditReject
	}
	var cp kv.Checkpoint
	err = c.audited(ctx, &e, streams.AuditScopeJob, job, d.By, d.Note, func(by string) (err error) {
		cp, err = op.Approve(ctx, job, chunk, operator.Decision{Approve: !d.Reject, By: by, Note: d.Note})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := chunkOf(cp)
	return &out, nil
}

// AwaitingLimit bounds one Awaiting answer.
const AwaitingLimit = 1000

// Awaiting is a chunk parked for a person's approval, with what a person
// needs to judge it.
type Awaiting struct {
	Job   string `json:"job_id"`
	Chunk int    `json:"chunk"`
	// Since is when it was parked.
	Since time.Time `json:"since"`
	// Pipeline, Stage and StageName say what waits: the stage that runs
	// once approved.
	Pipeline  string `json:"pipeline,omitempty"`
	Stage     int    `json:"stage,omitempty"`
	StageName string `json:"stage_name,omitempty"`
	// Input is the chunk's input, cut to AwaitingInputMax bytes
	// (InputCut says so).
	Input    string `json:"input,omitempty"`
	InputCut bool   `json:"input_cut,omitempty"`
}

// AwaitingInputMax bounds the input Awaiting carries.
const AwaitingInputMax = 2048

// ChunkListAwaiting lists up to limit chunks awaiting approval (default 100, at
// most AwaitingLimit), longest waiting first: two requests per chunk
// listed (its parked message, its checkpoint for the stage), whatever the
// number waiting.
func (c *Client) ChunkListAwaiting(ctx context.Context, limit int) ([]Awaiting, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, AwaitingLimit)
	st, _ := c.storesFor(ctx) // without the buckets, the list still names the chunks
	out := []Awaiting{}
	err := c.heldMessages(ctx, streams.System(streams.SystemApproval).Held(), limit, func(m *jetstream.RawStreamMsg, _, job string, chunk int, msg salvagetype.ChunkMsg) {
		a := Awaiting{Job: job, Chunk: chunk, Since: m.Time, Pipeline: msg.Pipeline}
		a.Input, a.InputCut = string(msg.Input), len(msg.Input) > AwaitingInputMax
		if a.InputCut {
			a.Input = strings.ToValidUTF8(a.Input[:AwaitingInputMax], "")
		}
		if st != nil {
			// The stage it waits before, from its timeline: one read
			// per chunk listed.
			if cp, err := checkpointOf(ctx, st, msg.Partition, job, chunk); err == nil {
				a.Stage = cp.Stage
				for i := len(cp.Events) - 1; i >= 0; i-- {
					if cp.Events[i].Kind == salvagetype.EventAwaitingApproval {
						a.StageName = cp.Events[i].Detail
						break
					}
				}
			}
		}
		out = append(out, a)
	})
	return out, err
}

// checkpointOf reads one chunk's checkpoint in partition k.
func checkpointOf(ctx context.Context, st *kv.Stores, k int, job string, chunk int) (kv.Checkpoint, error) {
	part, err := st.Part(ctx, k)
	if err != nil {
		return kv.Checkpoint{}, err
	}
	cp, _, err := part.Checkpoints.Get(ctx, job, chunk)
	return cp, err
}
