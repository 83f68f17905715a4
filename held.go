package salvage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// HeldChunk is a chunk waiting in SALVAGE_HOLD, across jobs: held at an
// open circuit breaker, parked while its pipeline is paused, or awaiting
// a person's approval.
type HeldChunk struct {
	Job   string `json:"job_id"`
	Chunk int    `json:"chunk"`
	// Pipeline is the chunk's pipeline.
	Pipeline string `json:"pipeline,omitempty"`
	// System is what it waits on: an external system whose breaker is
	// open or which paces it, "approval", or paused-<pipeline>.
	System string `json:"system"`
	// Why says it in words: held, parked, awaiting approval.
	Why string `json:"why"`
	// Since is when it began to wait there.
	Since time.Time `json:"since"`
}

// HeldLimit bounds one ChunkListHeld answer.
const HeldLimit = 1000

// ChunkListHeld lists up to limit chunks waiting in SALVAGE_HOLD (default
// 100, at most HeldLimit), longest waiting first, across every job: of
// one system (an external system, "approval", or a paused pipeline's
// paused-<pipeline>) or, with "", of all. One read per chunk listed,
// whatever the number waiting.
func (c *Client) ChunkListHeld(ctx context.Context, system string, limit int) ([]HeldChunk, error) {
	if limit <= 0 {
		limit = 100
	}
	if limit > HeldLimit {
		return nil, fmt.Errorf("%w: limit %d: at most %d", ErrBadFilter, limit, HeldLimit)
	}
	filter := "salvage.hold.>"
	if system != "" {
		if err := salvagetype.ValidateToken("system", system); err != nil {
			return nil, err
		}
		filter = streams.System(system).Held()
	}
	out := []HeldChunk{}
	err := c.heldMessages(ctx, filter, limit, func(m *jetstream.RawStreamMsg, system, job string, chunk int, msg salvagetype.ChunkMsg) {
		h := HeldChunk{Job: job, Chunk: chunk, System: system, Pipeline: msg.Pipeline, Since: m.Time, Why: "held: breaker of " + system + " open, or paced"}
		if system == streams.SystemApproval {
			h.Why = "awaiting approval"
		} else if p, ok := streams.System(system).PausedPipeline(); ok {
			h.Why = "parked: pipeline " + p + " paused"
		}
		out = append(out, h)
	})
	return out, err
}

// heldMessages hands fn up to limit messages of SALVAGE_HOLD under
// filter, oldest first, each with its subject's system, job and chunk and
// its chunk message (zero when it does not decode): one read a message.
// A message whose subject is not a hold subject is passed over.
func (c *Client) heldMessages(ctx context.Context, filter string, limit int, fn func(m *jetstream.RawStreamMsg, system, job string, chunk int, msg salvagetype.ChunkMsg)) error {
	s, err := c.js.Stream(ctx, streams.Hold)
	if err != nil {
		return err
	}
	for seq, n := uint64(1), 0; n < limit; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		seq = m.Sequence + 1
		ref, err := streams.ParseHoldSubject(m.Subject)
		if err != nil {
			continue
		}
		var msg salvagetype.ChunkMsg
		_ = json.Unmarshal(m.Data, &msg)
		fn(m, ref.System, ref.Job, ref.Chunk, msg)
		n++
	}
	return nil
}

// apiHeld takes {"system"?, "limit"?} and answers the held chunks.
func (c *Client) apiHeld(ctx context.Context, req micro.Request) (any, error) {
	var r struct {
		System string `json:"system,omitempty"`
		Limit  int    `json:"limit,omitempty"`
	}
	if err := decode(req, &r, true); err != nil {
		return nil, err
	}
	return c.ChunkListHeld(ctx, r.System, r.Limit)
}
