package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// A chunk's stages and how its run ends: finished, cancelled, retried,
// released, dead-lettered or dropped.

// stages runs the pipeline from the checkpoint's stage to the end.
func (r *run) stages(ctx, chunkCtx context.Context, p *recovery.Plan, cp kv.Checkpoint, fence *kv.Fence) error {
	w := r.w
	var stats recovery.Stats
	flushStats := func(cp *kv.Checkpoint) {
		cp.Tier1Retries += int(stats.Retries.Swap(0))
		cp.CachedCalls += int(stats.Cached.Swap(0))
		r.tally(cp)
	}
	for s := cp.Stage; s <= len(p.Stages); s++ {
		st := p.Stages[s-1]
		log := r.log.With().Int("stage", s).Str("stage_name", st.Name).Logger()
		// The job was read when the chunk was taken; a cancel since then
		// reaches the chunk through the worker's watch of job records,
		// which cancels chunkCtx.
		if errors.Is(context.Cause(chunkCtx), recovery.ErrJobCancelled) {
			flushStats(&cp)
			return r.cancelled(ctx, cp, fence, s)
		}
		if w.pauses.paused(r.chunk.Pipeline) {
			flushStats(&cp)
			return r.pause(ctx, cp, fence, s)
		}
		if st.RequiresApproval && !cp.Approved(s) {
			flushStats(&cp)
			return r.awaitApproval(ctx, cp, fence, s, st.Name)
		}
		outs, err := recovery.RunStage(chunkCtx, st, recovery.StageRun{
			Job: r.chunk.Job, Pipeline: r.chunk.Pipeline, TraceID: r.chunk.TraceID, Chunk: r.chunk.Chunk,
			Stage: s, Epoch: cp.Epoch, Input: r.chunk.Input, Prior: cp.Outputs, Exec: w.exec, Stats: &stats,
			Tools: p.Tools, Replay: r.replay, States: r.states, Snapshots: w.stores.Snapshots, Gate: w.gate, Limiter: w.limiter, FallbackAfter: p.FallbackAfter, Prices: w.cfg.Prices,
			Tracer: w.tracer,
		})
		flushStats(&cp)
		if err != nil {
			cause := context.Cause(chunkCtx)
			switch {
			case errors.Is(cause, flow.ErrStale):
				log.Warn().Msg("claim lost mid-chunk; stopping without ack")
				return nil
			case errors.Is(cause, recovery.ErrJobCancelled) || errors.Is(err, recovery.ErrJobCancelled):
				return r.cancelled(ctx, cp, fence, s)
			case errors.Is(cause, flow.ErrDraining):
				return r.release(ctx, cp, fence, "worker shut down mid-chunk")
			case st.Optional:
				log.Warn().Err(err).Msg("optional stage failed; continuing without it")
				cp.Gaps = append(cp.Gaps, st.Name)
			case errors.Is(err, salvagetype.ErrBreakerOpen):
				return r.hold(ctx, cp, fence, breakerSystem(err), err)
			case recovery.ClassOf(err).Permanent():
				recordError(&cp, err)
				if werr := r.part.Checkpoints.Write(ctx, fence, cp); werr != nil {
					return r.fencedOr(werr)
				}
				return r.permanent(ctx, err)
			default:
				return r.retryLater(ctx, cp, fence, err)
			}
		}
		cp.Outputs = append(cp.Outputs, outs...)
		if err := r.snapshot(ctx, st, &cp); err != nil {
			return err
		}
		if s == len(p.Stages) {
			// finish writes the outputs with done, in one write.
			break
		}
		cp.Stage = s + 1
		if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
			return r.fencedOr(err)
		}
		log.Debug().Msg("stage done")
	}
	return r.finish(ctx, p, cp, fence)
}

// tally sets cp's calls, tokens and cost from the journal: the rows of
// its earlier epochs and those of this one as this run knows them.
func (r *run) tally(cp *kv.Checkpoint) {
	flow.SetTally(cp, r.past.Plus(r.replay.Tally(r.w.cfg.Prices)))
}

// loadJournal reads the rows of the chunk's epoch. A row that still
// expires (retention retired the chunk while this run took it) makes the
// chunk's rows stop expiring first, in every epoch.
func (r *run) loadJournal(ctx context.Context, epoch int) (map[string]kv.StoredRow, error) {
	j := r.part.Journal
	rows, err := j.Load(ctx, r.chunk.Job, r.chunk.Chunk, epoch)
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		if row.Expires {
			if err := r.unretire(ctx); err != nil {
				return nil, err
			}
			return j.Load(ctx, r.chunk.Job, r.chunk.Chunk, epoch)
		}
	}
	return rows, nil
}

// unretire takes back the TTLs retention gave the chunk's journal rows,
// in every epoch: nothing a running chunk needs expires.
func (r *run) unretire(ctx context.Context) error {
	n, err := r.part.Journal.Unretire(ctx, r.chunk.Job, r.chunk.Chunk)
	if err != nil {
		return err
	}
	r.log.Info().Int("rows", n).Msg("the chunk runs again after retention retired it: its journal rows no longer expire")
	return nil
}

// snapshot saves each agent of a finished stage that keeps more than the
// journal rebuilds (recovery.AgentState.Derivable), or was snapshotted
// before; the names go into the stage's checkpoint write, so a resume
// starts every agent from here.
func (r *run) snapshot(ctx context.Context, st salvagetype.Stage, cp *kv.Checkpoint) error {
	if cp.Snapshots == nil {
		cp.Snapshots = map[string]kv.SnapshotRef{}
	}
	for _, a := range st.Agents {
		state := r.states[a.Name]
		if _, had := cp.Snapshots[a.Name]; state == nil || (state.Derivable() && !had) {
			// Nothing the journal does not rebuild on resume.
			continue
		}
		ref, err := r.w.stores.Snapshots.SaveState(ctx, r.chunk.Job, r.chunk.Chunk, cp.Epoch, a.Name, state)
		if err != nil {
			return err
		}
		cp.Snapshots[a.Name] = ref
	}
	return nil
}

// finish publishes the findings, marks the checkpoint done, acks, releases.
func (r *run) finish(ctx context.Context, p *recovery.Plan, cp kv.Checkpoint, fence *kv.Fence) error {
	w := r.w
	result, err := p.BuildResult(r.chunk.Input, cp.Outputs)
	if err != nil {
		return r.permanent(ctx, fmt.Errorf("build result: %w", err))
	}
	h := nats.Header{}
	h.Set(salvagetype.HeaderMsgID, fmt.Sprintf("%s.%d.result.%d", r.chunk.Job, r.chunk.Chunk, cp.Epoch))
	h.Set(salvagetype.HeaderJob, r.chunk.Job)
	h.Set(salvagetype.HeaderChunk, strconv.Itoa(r.chunk.Chunk))
	if r.chunk.TraceID != "" {
		h.Set(salvagetype.HeaderTraceParent, streams.TraceParent(r.chunk.TraceID, streams.DeriveSpanID(h.Get(salvagetype.HeaderMsgID))))
	}
	if _, err := flow.Publish(ctx, w.js, &nats.Msg{Subject: flow.RefOf(r.chunk).Result(), Data: result, Header: h}); err != nil {
		return err
	}
	cp.Status = salvagetype.ChunkDone
	cp.Stage = len(p.Stages)
	cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventDone, Worker: w.cfg.ID, Stage: cp.Stage})
	d := cp.Recount()
	if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
		return r.fencedOr(err)
	}
	if w.hooks.AfterDone != nil {
		w.hooks.AfterDone()
	}
	// Done is durable: what is left (ack, release, counts) is bookkeeping
	// whose loss a redelivery or the sweeper repairs. Another chunk may
	// start meanwhile.
	r.done()
	if err := r.m.Ack(); err != nil {
		// Done is recorded: a redelivery acks without re-running.
		r.log.Warn().Err(err).Msg("ack after done")
	}
	r.releaseClaim(ctx)
	r.log.Info().Int("calls", cp.Calls).Int("tier1_retries", cp.Tier1Retries).Msg("chunk done")
	r.outcome = string(cp.Status)
	return r.ended(ctx, cp, d)
}

// ended counts a chunk's outcome in its job, then settles the envelope
// the chunk ran for (a recovery's or a replay's): in that order, so an
// envelope that reads settled never sits beside a job that has not yet
// counted the chunk (a script that waits for "jobs finished, no envelope
// open" then reads a job that agrees; the other way round it could read
// a replayed chunk's job still incomplete). A crash between or before
// them is repaired by whoever sees the finished chunk next
// (finishedAgain, in the same order).
func (r *run) ended(ctx context.Context, cp kv.Checkpoint, d kv.Delta) error {
	_, err := r.w.tracker.Apply(ctx, r.chunk.Job, r.chunk.Chunk, cp.Status, d)
	if serr := flow.SettleEnvelope(ctx, r.w.stores, cp, r.w.cfg.ID); serr != nil {
		r.log.Warn().Err(serr).Str("envelope_id", cp.Envelope).Msg("settle the chunk's envelope")
	}
	return err
}

// fencedOr turns a lost fence into a silent stop (no ack, no nak): the
// chunk belongs to another worker now.
func (r *run) fencedOr(err error) error {
	if errors.Is(err, kv.ErrFenced) {
		r.log.Warn().Err(err).Msg("fenced out; stopping without ack")
		return nil
	}
	return err
}

// cancelled records cancelled-at-stage-N and acks: never retried, never
// dead-lettered (invariant 4). When effects of the chunk may stand — a
// call in flight when the cancel landed, side effects of earlier stages —
// they are settled by an envelope the checkpoint names.
func (r *run) cancelled(ctx context.Context, cp kv.Checkpoint, fence *kv.Fence, stage int) error {
	if rows := r.replay.Rows(); len(recovery.Rows(rows).Standing()) > 0 {
		cp.Stage = stage
		// What this delivery counted (calls, tokens) is kept first,
		// while the fence is still ours.
		if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
			return r.fencedOr(err)
		}
		job := kv.Job{Job: salvagetype.Job{ID: r.chunk.Job, Pipeline: r.chunk.Pipeline, TraceID: r.chunk.TraceID, CancelReason: r.w.cancels.reason(r.chunk.Job)}}
		if _, err := r.w.tracker.SendStopped(ctx, job, cp, rows, r.chunk, r.letterOf()); err != nil {
			return err // the message stays: its redelivery settles it
		}
		return r.stoppedWithEffects(ctx, stage)
	}
	cp.Status = salvagetype.CancelledAtStage(stage)
	cp.Stage = stage
	cp.Reason = r.w.cancels.reason(r.chunk.Job)
	cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventCancelled, Worker: r.w.cfg.ID, Stage: stage})
	d := cp.Recount()
	if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
		return r.fencedOr(err)
	}
	r.log.Info().Int("stage", stage).Msg("chunk cancelled")
	r.outcome = string(cp.Status)
	if err := r.ack(ctx); err != nil {
		r.log.Warn().Err(err).Msg("ack cancelled chunk")
	}
	r.releaseClaim(ctx)
	return r.ended(ctx, cp, d)
}

// stoppedWithEffects acks a chunk whose cancellation an envelope settles.
func (r *run) stoppedWithEffects(ctx context.Context, stage int) error {
	r.log.Info().Int("stage", stage).Msg("chunk cancelled with effects that may stand; an envelope settles them")
	r.outcome = string(salvagetype.CancelledAtStage(stage))
	if err := r.ack(ctx); err != nil {
		r.log.Warn().Err(err).Msg("ack cancelled chunk")
	}
	r.releaseClaim(ctx)
	return nil
}

// letterOf is a letter for this delivery's message.
func (r *run) letterOf() flow.Letter {
	return flow.Letter{Seq: r.meta.Sequence.Stream, Subject: r.m.Subject(), Data: r.m.Data(), Deliveries: r.meta.NumDelivered}
}

// cancelUnclaimed records the cancellation of a chunk nobody runs; effects
// an earlier delivery left standing are settled by an envelope.
func (r *run) cancelUnclaimed(ctx context.Context, job kv.Job, cp kv.Checkpoint) error {
	stage, reason := max(cp.Stage, 1), job.StopReason()
	settled, err := r.w.tracker.SettleStopped(ctx, job, cp, r.chunk, r.letterOf())
	if err != nil {
		return err
	}
	if settled {
		return r.stoppedWithEffects(ctx, stage)
	}
	// A worker that died in it made calls nobody counted yet.
	tally, err := flow.ChunkTally(ctx, r.part, cp, r.w.cfg.Prices)
	if err != nil {
		return err
	}
	var d kv.Delta
	cp, err = r.part.Checkpoints.Mutate(ctx, r.chunk.Job, r.chunk.Chunk, func(cp *kv.Checkpoint) error {
		d = kv.Delta{}
		if cp.Terminal() && cp.Status != salvagetype.ChunkDeadLettered {
			return kv.ErrNoChange
		}
		cp.Status, cp.Stage, cp.Reason = salvagetype.CancelledAtStage(stage), stage, reason
		flow.SetTally(cp, tally)
		d = cp.Recount()
		return nil
	})
	if err != nil {
		return err
	}
	r.log.Info().Int("stage", stage).Msg("chunk cancelled before it ran")
	r.outcome = string(cp.Status)
	if err := r.ack(ctx); err != nil {
		r.log.Warn().Err(err).Msg("ack cancelled chunk")
	}
	return r.ended(ctx, cp, d)
}

// retryLater hands the chunk to tier 2: it records why, releases the claim
// so the redelivery need not wait for the lease, and naks with a jittered
// delay — or at once on the last delivery, so the advisory comes promptly.
func (r *run) retryLater(ctx context.Context, cp kv.Checkpoint, fence *kv.Fence, cause error) error {
	recordError(&cp, cause)
	if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
		return r.fencedOr(err)
	}
	r.releaseClaim(ctx)
	delay := r.w.nakDelay()
	if int(r.meta.NumDelivered) >= r.pool.maxDeliver {
		delay = 0
	}
	r.log.Warn().Err(cause).Dur("delay_ms", delay).Int("stage", cp.Stage).Msg("tier 1 exhausted; handing the chunk to tier 2")
	r.outcome = flow.OutcomeRetry
	if delay == 0 {
		return r.m.Nak()
	}
	return r.m.NakWithDelay(delay)
}

// recordError keeps in the checkpoint why the chunk failed and who failed,
// for the envelope the dead-letterer may write later.
func recordError(cp *kv.Checkpoint, cause error) {
	cp.ClearLastError()
	cp.LastError = streams.Clip(cause.Error(), salvagetype.ErrorTextMax)
	cp.LastErrorClass = recovery.ClassOf(cause).String()
	cp.LastErrorStatus = recovery.StatusOf(cause)
	var ae *recovery.AgentError
	if errors.As(cause, &ae) {
		cp.LastErrorAgent, cp.LastErrorTool, cp.LastErrorCall = ae.Agent, ae.Tool, ae.Call
	}
}

// release gives a chunk back during a drain: the claim is released and the
// message naked so another worker resumes it from its checkpoint.
func (r *run) release(ctx context.Context, cp kv.Checkpoint, fence *kv.Fence, why string) error {
	cp.ClearLastError()
	cp.LastError, cp.LastErrorClass = why, salvagetype.ClassTransient.String()
	if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
		return r.fencedOr(err)
	}
	r.releaseClaim(ctx)
	r.log.Info().Int("stage", cp.Stage).Msg("chunk released on drain")
	r.outcome = flow.OutcomeReleased
	return r.m.Nak()
}

// permanent dead-letters the chunk for a failure retrying cannot fix.
func (r *run) permanent(ctx context.Context, cause error) error {
	class := recovery.ClassOf(cause)
	if !class.Permanent() {
		class = salvagetype.ClassPermanent
	}
	return r.deadLetter(ctx, recovery.Failure{Class: class, Status: recovery.StatusOf(cause)}, cause)
}

// deadLetter stores the chunk's envelope, then terms the message: a termed
// message leaves the work queue at once, so the envelope must exist first.
func (r *run) deadLetter(ctx context.Context, f recovery.Failure, cause error) error {
	l := flow.Letter{
		Seq: r.meta.Sequence.Stream, Subject: r.m.Subject(), Data: r.m.Data(), Chunk: r.chunk,
		Deliveries: r.meta.NumDelivered, Failure: f, Err: cause.Error(),
	}
	var ae *recovery.AgentError
	if errors.As(cause, &ae) {
		l.FailedAgent, l.FailedTool, l.FailedCall = ae.Agent, ae.Tool, ae.Call
	}
	id, err := r.w.letter.Send(ctx, l)
	if errors.Is(err, flow.ErrStaleMessage) {
		r.releaseClaim(ctx)
		return r.dropStale("a newer message of the chunk has run it")
	}
	if err != nil {
		// Without an envelope the message must stay: JetStream redelivers.
		return errors.Join(cause, err)
	}
	r.releaseClaim(ctx)
	r.outcome = string(salvagetype.ChunkDeadLettered)
	// The letterer logged the dead-letter, with its category: once.
	return r.m.TermWithReason("dead-lettered: envelope " + id)
}

// dropStale terms a message the records say must not run the chunk: one
// older than the message the chunk last ran from (that newer one, a
// recovery's or a replay's, carries the chunk now), or the message whose
// run was dead-lettered (its envelope carries it).
func (r *run) dropStale(why string) error {
	r.outcome = "stale"
	return r.m.TermWithReason("stale: " + why)
}

func (r *run) ack(ctx context.Context) error {
	return r.m.DoubleAck(ctx)
}
