package consumers

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/streams"
)

// carriedHeaders go with a chunk message wherever it is parked or
// released: its trace and the envelope it re-runs the chunk for.
var carriedHeaders = []string{streams.HeaderTraceParent, streams.HeaderRecoveryOf, streams.HeaderReplayOf}

// hold parks the chunk while system's breaker is open: its checkpoint
// says held (its stage, journal and snapshots stay as they are), a copy of
// its message waits on salvage.hold.<system>.<job>.<chunk>, and the
// delivery is acked — no delivery of tier 2 is spent and nothing reaches
// the DLQ. A crash between the steps is repaired by the redelivery of the
// message: it meets the breaker again and holds the chunk again, and the
// copy's message id (from this message's sequence) keeps it single.
func (r *run) hold(ctx context.Context, cp kv.Checkpoint, fence *kv.Fence, system string, cause error) error {
	w := r.w
	recordError(&cp, cause)
	cp.Status, cp.HeldOn = kv.StatusHeld, system
	cp.Holds++
	d := cp.Recount()
	if err := w.stores.Checkpoints.Write(ctx, fence, cp); err != nil {
		return r.fencedOr(err)
	}
	h := nats.Header{}
	for _, k := range carriedHeaders {
		if v := r.m.Headers().Get(k); v != "" {
			h.Set(k, v)
		}
	}
	h.Set(streams.HeaderMsgID, fmt.Sprintf("%s.%d.hold.%d", r.chunk.Job, r.chunk.Chunk, r.meta.Sequence.Stream))
	h.Set(streams.HeaderJob, r.chunk.Job)
	h.Set(streams.HeaderChunk, strconv.Itoa(r.chunk.Chunk))
	h.Set(streams.HeaderReason, "circuit breaker of "+system+" open")
	if _, err := publish(ctx, w.js, &nats.Msg{Subject: streams.HoldSubject(system, r.chunk.Job, r.chunk.Chunk), Data: r.m.Data(), Header: h}); err != nil {
		// The checkpoint says held; the redelivery holds it again.
		return err
	}
	r.done()
	if err := r.ack(ctx); err != nil {
		r.log.Warn().Err(err).Msg("ack held chunk")
	}
	r.releaseClaim(ctx)
	r.log.Info().Str("system", system).Int("stage", cp.Stage).Msg("chunk held: its system's circuit breaker is open")
	_, err := w.tracker.apply(ctx, r.chunk.Job, r.chunk.Chunk, cp.Status, d)
	return err
}
