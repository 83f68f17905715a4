package worker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// hold parks the chunk while system's breaker is open: its checkpoint
// says held (its stage, journal and snapshots stay as they are), a copy of
// its message waits on salvage.hold.<system>.<job>.<chunk>, and the
// delivery is acked — no delivery of tier 2 is spent and nothing reaches
// the DLQ.
func (r *run) hold(ctx context.Context, cp kv.Checkpoint, fence *kv.Fence, system string, cause error) error {
	recordError(&cp, cause)
	cp.Status, cp.HeldOn = salvagetype.ChunkHeld, system
	cp.Holds++
	cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventHeld, Worker: r.w.cfg.ID, Stage: cp.Stage, Detail: system})
	// Before its slot is free: a chunk this process starts from now on
	// admits the next of its job onto this hold (run.started).
	r.w.gate.noteParked(system)
	if err := r.park(ctx, cp, fence, system, "circuit breaker of "+system+" open"); err != nil {
		return err
	}
	r.log.Info().Str("system", system).Int("stage", cp.Stage).Msg("chunk held: its system's circuit breaker is open")
	return nil
}

// awaitApproval parks the chunk before stage, which requires a person's
// approval, on salvage.hold.approval.<job>.<chunk>, and announces it on
// salvage.events.<job>.approval. `salvage approve` releases it.
func (r *run) awaitApproval(ctx context.Context, cp kv.Checkpoint, fence *kv.Fence, stage int, name string) error {
	cp.ClearLastError()
	cp.Status, cp.Stage = salvagetype.ChunkAwaitingApproval, stage
	cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventAwaitingApproval, Worker: r.w.cfg.ID, Stage: stage, Detail: name})
	if err := r.park(ctx, cp, fence, streams.SystemApproval, "stage "+name+" requires approval"); err != nil {
		return err
	}
	ev := salvagetype.ApprovalEvent{Job: r.chunk.Job, Chunk: r.chunk.Chunk, Stage: stage, StageName: name,
		Pipeline: r.chunk.Pipeline, TraceID: r.chunk.TraceID, At: time.Now().UTC()}
	h := nats.Header{}
	h.Set(salvagetype.HeaderMsgID, fmt.Sprintf("%s.%d.approval.%d.%d", r.chunk.Job, r.chunk.Chunk, cp.Epoch, stage))
	if err := flow.PublishJSON(ctx, r.w.js, streams.JobRef{Job: r.chunk.Job}.Event(streams.EventApproval), ev, h); err != nil {
		r.log.Warn().Err(err).Msg("announce the approval request")
	}
	r.log.Info().Int("stage", stage).Msg("chunk awaits approval")
	return nil
}

// park writes cp (a parked status) through the fence, copies the chunk
// message to salvage.hold.<system>.<job>.<chunk> and acks the delivery. A
// crash between the steps is repaired by the redelivery of the message:
// it parks the chunk again, and the copy's message id (from this
// message's sequence) keeps it single.
func (r *run) park(ctx context.Context, cp kv.Checkpoint, fence *kv.Fence, system, reason string) error {
	w := r.w
	d := cp.Recount()
	if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
		return r.fencedOr(err)
	}
	h := nats.Header{}
	for _, k := range flow.CarriedHeaders {
		if v := r.m.Headers().Get(k); v != "" {
			h.Set(k, v)
		}
	}
	h.Set(salvagetype.HeaderMsgID, fmt.Sprintf("%s.%d.%s.%d", r.chunk.Job, r.chunk.Chunk, system, r.meta.Sequence.Stream))
	h.Set(salvagetype.HeaderJob, r.chunk.Job)
	h.Set(salvagetype.HeaderChunk, strconv.Itoa(r.chunk.Chunk))
	h.Set(salvagetype.HeaderReason, reason)
	if _, err := flow.Publish(ctx, w.js, &nats.Msg{Subject: flow.RefOf(r.chunk).Hold(system), Data: r.m.Data(), Header: h}); err != nil {
		// The checkpoint says parked; the redelivery parks it again.
		return err
	}
	r.done()
	if err := r.ack(ctx); err != nil {
		r.log.Warn().Err(err).Msg("ack parked chunk")
	}
	r.releaseClaim(ctx)
	r.outcome = string(cp.Status)
	_, err := w.tracker.Apply(ctx, r.chunk.Job, r.chunk.Chunk, cp.Status, d)
	return err
}
