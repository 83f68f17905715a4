package worker

import (
	"context"
	"errors"
	"time"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// A chunk's claim: taken, listed under its worker, renewed by the
// heartbeat, waited for while another holds it, given back.

func (r *run) releaseClaim(ctx context.Context) {
	r.mu.Lock()
	l := r.lease
	r.mu.Unlock()
	if l.Key == "" {
		return
	}
	if err := r.part.Claims.Release(ctx, l); err != nil {
		r.log.Debug().Err(err).Msg("release claim")
	}
}

// listClaim lists the claim under this worker (Claims.Hold), for the reaper
// to find should the process die; a listing that fails leaves the chunk
// to JetStream's redelivery in that case.
func (r *run) listClaim(ctx context.Context) {
	rev, err := r.part.Claims.Hold(ctx, r.lease)
	if err != nil {
		r.log.Warn().Err(err).Msg("list the claim under this process; should it die, the chunk waits for AckWait")
		return
	}
	r.mu.Lock()
	r.heldRev = rev
	r.mu.Unlock()
}

// unlistClaim removes the listing listClaim wrote, once the run is over.
func (r *run) unlistClaim(ctx context.Context) {
	r.mu.Lock()
	rev, key := r.heldRev, r.lease.Key
	r.heldRev = 0
	r.mu.Unlock()
	if rev == 0 {
		return
	}
	if err := r.part.Claims.Unhold(context.WithoutCancel(ctx), r.w.cfg.ID, key, rev); err != nil {
		r.log.Debug().Err(err).Msg("unlist the claim")
	}
}

// acquire claims the chunk for this delivery (Claims.AcquireAs). A claim
// another process holds is believed only while that process lives
// (Config.Alive): one whose holder has no record is taken at once.
func (r *run) acquire(ctx context.Context) (kv.Lease, error) {
	lease, err := r.part.Claims.AcquireAs(ctx, r.chunk.Job, r.chunk.Chunk, r.claim(), r.pool.lease())
	var held *kv.HeldError
	if !errors.As(err, &held) || r.w.cfg.Alive == nil || held.Holder.ClaimedBy == r.w.cfg.ID || r.w.cfg.Alive(ctx, held.Holder.ClaimedBy) {
		return lease, err
	}
	return r.part.Claims.Steal(ctx, held.Holder, r.claim(), r.pool.lease(), "a claim of "+held.Holder.ClaimedBy+", a process with no live record")
}

// claim is the claim this delivery holds: who, which delivery, and the
// reply subject through which a reaper naks it should this process die.
func (r *run) claim() kv.Claim {
	return kv.Claim{ClaimedBy: r.w.cfg.ID, Delivery: r.meta.NumDelivered, Pipeline: r.chunk.Pipeline,
		Seq: r.meta.Sequence.Stream, Reply: r.m.Reply()}
}

// heartbeat keeps the message in progress every Heartbeat and renews the
// claim three times a lease. A lost claim cancels the chunk as stale.
func (r *run) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, done <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(min(r.pool.renew(), r.pool.heartbeat))
	defer t.Stop()
	lastBeat := time.Now()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(lastBeat) >= r.pool.heartbeat-r.pool.renew()/2 {
			if err := r.m.InProgress(); err != nil {
				r.log.Debug().Err(err).Msg("in-progress heartbeat")
			}
			lastBeat = time.Now()
		}
		r.mu.Lock()
		l := r.lease
		r.mu.Unlock()
		nl, err := r.part.Claims.Renew(ctx, l, r.pool.lease())
		if errors.Is(err, kv.ErrClaimLost) {
			// Taken over by another holder — or overwritten by something
			// no holder writes, which the records do not believe.
			nl, err = r.part.Claims.Reclaim(ctx, l, r.pool.lease())
			if err == nil {
				r.log.Warn().Str("claim", l.Key).Str("replaced", nl.Replaced).Msg("claim overwritten by something no holder writes; taken back")
			}
		}
		switch {
		case errors.Is(err, kv.ErrClaimLost):
			cancel(flow.ErrStale)
			return
		case err != nil:
			r.log.Warn().Err(err).Msg("renew claim")
		default:
			r.mu.Lock()
			r.lease = nl
			r.mu.Unlock()
		}
	}
}

// waitForHolder keeps a redelivered message in progress while another
// worker holds a live claim on its chunk (invariant 3: a nak would spend a
// delivery, and a live holder must never be dead-lettered). It returns when
// the chunk is finished (acked here, held false) or the lease expired and
// this worker stole it (held true).
func (r *run) waitForHolder(ctx context.Context) (kv.Lease, bool, error) {
	r.log.Info().Msg("chunk held by a live worker; waiting")
	t := time.NewTicker(min(r.pool.heartbeat, time.Second))
	defer t.Stop()
	lastBeat := time.Now()
	for {
		select {
		case <-ctx.Done():
			return kv.Lease{}, false, nil
		case <-t.C:
		}
		if time.Since(lastBeat) >= r.pool.heartbeat {
			if err := r.m.InProgress(); err != nil {
				r.log.Debug().Err(err).Msg("in-progress while waiting")
			}
			lastBeat = time.Now()
		}
		cp, _, err := r.part.Checkpoints.Get(ctx, r.chunk.Job, r.chunk.Chunk)
		if err == nil && (cp.Status == salvagetype.ChunkDone || cp.Status.IsCancelled()) {
			r.log.Info().Str("status", string(cp.Status)).Msg("holder finished the chunk; acking this delivery")
			return kv.Lease{}, false, r.ack(ctx)
		}
		if err == nil && cp.Status == salvagetype.ChunkDeadLettered {
			return kv.Lease{}, false, nil
		}
		lease, err := r.acquire(ctx)
		if err == nil {
			r.log.Info().Msg("holder's lease expired; chunk taken over")
			return lease, true, nil
		}
		if !errors.Is(err, kv.ErrClaimHeld) {
			return kv.Lease{}, false, err
		}
	}
}
