package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// run is one delivery of one chunk.
type run struct {
	w     *Worker
	m     jetstream.Msg
	meta  *jetstream.MsgMetadata
	chunk salvagetype.ChunkMsg
	log   zerolog.Logger

	mu    sync.Mutex
	lease kv.Lease
	// heldRev is the revision of the claim's listing under this worker
	// (listClaim), 0 when there is none.
	heldRev uint64
	// replay is the chunk epoch's journal, loaded once at take.
	replay *recovery.Replay
	// states are the agents' states, from their latest stage snapshots.
	states map[string]*salvagetype.AgentState

	// slot is the run's place in its pool; its free runs at most once
	// (done), through freeOnce.
	slot     slot
	freeOnce sync.Once
	tail     bool
	// bg holds work started off the chunk's critical path.
	bg sync.WaitGroup
	// outcome is how this delivery ended (a checkpoint status, retry,
	// released), for its span.
	outcome string
	// pool is how the worker runs the chunk's pipeline.
	pool pool
	// past is what the calls of the chunk's earlier epochs came to.
	past recovery.Tally
	// part is the storage of the chunk's partition: the one whose chunk
	// stream delivered the message.
	part *kv.Part
}

// pipelineOf is the pipeline token of a chunk subject ("" when it has
// another shape: the message is rejected before its pool matters).
func pipelineOf(subject string) string {
	ref, err := streams.ParseChunkSubject(subject)
	if err != nil {
		return ""
	}
	return ref.Pipeline
}

// background runs f beside the chunk; the delivery's handling ends only
// when f has returned.
func (r *run) background(f func()) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		f()
	}()
}

// done gives the run's slot to the next chunk while this one finishes its
// bookkeeping, as one of at most Concurrency such tails.
func (r *run) done() {
	r.freeOnce.Do(func() {
		r.w.tails <- struct{}{}
		r.tail = true
		r.slot.free()
	})
}

// handle runs one delivered chunk to one of: ack (done, cancelled, already
// finished), term (permanent failure, after its envelope is stored), nak
// with delay (tier 1 exhausted), or nothing at all (a stale worker, which
// must not ack). s.free gives the delivery's slot back: once, when the
// chunk's outcome is durable (its bookkeeping goes on beside the next
// chunk) or when handle returns.
func (w *Worker) handle(ctx context.Context, m jetstream.Msg, s slot) {
	r := &run{w: w, m: m, log: w.log, slot: s, pool: w.poolFor(pipelineOf(m.Subject()))}
	w.inFlight.Add(1)
	defer w.inFlight.Add(-1)
	defer func() {
		r.bg.Wait()
		r.freeOnce.Do(s.free)
		r.unlistClaim(ctx)
		if r.tail {
			<-w.tails
		}
	}()
	meta, err := m.Metadata()
	if err != nil {
		w.log.Error().Err(err).Msg("chunk message without metadata")
		return
	}
	r.meta = meta
	k, ok := streams.PartitionOfStream(meta.Stream)
	if !ok {
		w.log.Error().Str("stream", meta.Stream).Msg("chunk message from a stream that is no partition's")
		return
	}
	if r.part, err = w.stores.Part(ctx, k); err != nil {
		w.log.Error().Err(err).Int("partition", k).Msg("open the partition's storage; JetStream will redeliver")
		return
	}
	if err := json.Unmarshal(m.Data(), &r.chunk); err != nil || r.chunk.Job == "" || r.chunk.Chunk < 1 {
		r.malformed(ctx, err)
		return
	}
	if ref, err := streams.ParseChunkSubject(m.Subject()); err != nil || ref.Job != r.chunk.Job || ref.Chunk != r.chunk.Chunk || ref.Pipeline != r.chunk.Pipeline ||
		ref.Partition != k || r.chunk.Partition != k {
		r.reject(ctx, salvagetype.RejectBadChunk, fmt.Errorf("subject %s, stream %s and body (chunk %d of job %s, pipeline %s, partition %d) disagree",
			m.Subject(), meta.Stream, r.chunk.Chunk, r.chunk.Job, r.chunk.Pipeline, r.chunk.Partition))
		return
	}
	r.log = w.log.With().Str("job_id", r.chunk.Job).Int("chunk", r.chunk.Chunk).
		Str("trace_id", r.chunk.TraceID).Uint64("delivery", meta.NumDelivered).Logger()
	ctx, span := w.tracer.Start(flow.UnderJob(ctx, r.chunk.TraceID, r.chunk.Job), "chunk "+strconv.Itoa(r.chunk.Chunk),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(recovery.AttrJob.String(r.chunk.Job), recovery.AttrPipeline.String(r.chunk.Pipeline),
			recovery.AttrChunk.Int(r.chunk.Chunk), recovery.AttrDelivery.Int64(int64(meta.NumDelivered)), recovery.AttrEpoch.Int(r.chunk.Epoch)))
	err = r.run(ctx)
	if err != nil {
		r.log.Error().Err(err).Msg("chunk run ended on an infrastructure error; JetStream will redeliver")
		span.RecordError(err)
	}
	flow.EndChunkSpan(span, r.outcome, err)
}

// malformed removes a chunk message whose body cannot be read, with a
// bad-chunk event: Salvage only publishes chunks it built, and a replay
// by hand publishes an envelope's original verbatim, so the body is not
// one of Salvage's; dead-lettering it would mark the real chunk of its
// subject dead-lettered.
func (r *run) malformed(ctx context.Context, err error) {
	if ref, perr := streams.ParseChunkSubject(r.m.Subject()); perr == nil {
		r.chunk.Job = ref.Job
	}
	if err == nil {
		err = errors.New(`no "job_id" or no "chunk" from 1`)
	}
	r.reject(ctx, salvagetype.RejectBadChunk, fmt.Errorf("malformed chunk message: %w", err))
}

func (r *run) run(ctx context.Context) error {
	w := r.w
	p, err := w.cfg.Registry.Get(r.chunk.Pipeline)
	if err != nil {
		return r.permanent(ctx, err)
	}
	job, ok, err := r.checkJob(ctx)
	if err != nil || !ok {
		return err
	}
	cp, _, err := r.part.Checkpoints.Get(ctx, r.chunk.Job, r.chunk.Chunk)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return err
	}
	if cp.Status == salvagetype.ChunkDeadLettered && cp.MsgSeq == r.meta.Sequence.Stream {
		// This very message ran the chunk last, and that run ended in the
		// DLQ: a redelivery whose earlier ack was lost (a worker killed
		// before its term left, a server restart). Its envelope decides
		// what runs next; run again here, it would resume the chunk beside
		// its recovery — or, a replay of an envelope superseded since, run
		// it fresh in a new epoch, effects no envelope accounts for.
		r.log.Info().Uint64("stream_seq", r.meta.Sequence.Stream).Str("envelope_id", cp.Envelope).
			Msg("a message whose run was dead-lettered came back; removed without running")
		return r.dropStale("its run was dead-lettered")
	}
	linked, byHand := r.linkedEnvelope()
	freshEpoch, err := r.checkLinked(ctx, linked, byHand, cp.Epoch)
	if err != nil || r.outcome != "" {
		return err
	}
	if done, err := r.againstCheckpoint(ctx, cp); done || err != nil {
		return err
	}
	if job.CancelledAt != nil {
		return r.cancelUnclaimed(ctx, job, cp)
	}
	job, endTurn, waited, err := r.tenantTurn(ctx, job)
	if err != nil || endTurn == nil {
		return err
	}
	defer endTurn()
	if waited {
		// The checkpoint may have moved while the chunk waited (another
		// message of it ran, a requeue): checked again, as read now.
		if cp, _, err = r.part.Checkpoints.Get(ctx, r.chunk.Job, r.chunk.Chunk); err != nil && !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		if done, err := r.againstCheckpoint(ctx, cp); done || err != nil {
			return err
		}
	}
	// The chunk's calls count against its tenant's limit too.
	ctx = withTenant(ctx, job.Tenant)
	if job.CancelledAt != nil {
		return r.cancelUnclaimed(ctx, job, cp)
	}

	lease, ok, err := r.claimChunk(ctx, cp)
	if err != nil || !ok {
		return err
	}
	return r.takeAndRun(ctx, p, job, lease, linked, byHand, freshEpoch)
}

// takeAndRun takes the claimed chunk under lease (its checkpoint written
// through a new fence), counts its start, and runs its stages from where
// its checkpoint says. linked is the envelope its message runs it for
// (byHand: a person's replay), freshEpoch whether that runs it fresh.
func (r *run) takeAndRun(ctx context.Context, p *recovery.Plan, job kv.Job, lease kv.Lease, linked string, byHand bool, freshEpoch freshFrom) error {
	approval, approved := r.approval()
	cp, fence, taken, fresh, err := r.take(ctx, lease, approval, approved, linked, freshEpoch)
	if errors.Is(err, kv.ErrFenced) {
		r.log.Warn().Msg("another worker took the chunk while we claimed it; standing down")
		return nil
	}
	if errors.Is(err, kv.ErrFinished) {
		// Finished by the holder we waited for, between our checks.
		r.releaseClaim(ctx)
		return r.ack(ctx)
	}
	if err != nil {
		return err
	}
	r.log.Debug().Int("stage", cp.Stage).Msg("chunk taken")
	if cp.Compensated {
		// Its recorded outcomes were taken back: resuming would finish on
		// undone effects. Only a replay that runs it fresh may take it.
		return r.permanent(ctx, fmt.Errorf("effects of epoch %d of this chunk were compensated: it cannot resume, only run fresh in a new epoch (replay its envelope)", cp.Epoch))
	}
	r.started(ctx, p, job, taken, approved)
	if byHand && cp.Envelope == linked {
		r.replayedByHand(ctx, linked, freshEpoch.ok)
	}
	if err := r.loadResume(ctx, cp, fresh); err != nil {
		return err
	}

	return r.runStages(ctx, p, cp, fence)
}

// runStages runs the chunk's stages from checkpoint cp under fence, with
// a heartbeat keeping its message in progress and its claim alive, and a
// cancel of its job (or a lost claim) stopping it at the next stage.
func (r *run) runStages(ctx context.Context, p *recovery.Plan, cp kv.Checkpoint, fence kv.Fence) error {
	w := r.w
	chunkCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.cancels.add(r.chunk.Job, r.chunk.Chunk, cancel)
	defer w.cancels.remove(r.chunk.Job, r.chunk.Chunk)
	hbDone := make(chan struct{})
	hbStopped := make(chan struct{})
	go r.heartbeat(chunkCtx, cancel, hbDone, hbStopped)
	defer func() { close(hbDone); <-hbStopped }()

	return r.stages(ctx, chunkCtx, p, cp, &fence)
}

// checkJob reads the chunk's job record and checks the message against
// it (invariant 11: the record owns the chunk): a chunk of no job, of a
// duplicate job message, outside the job or not the input split for it
// runs nothing. ok says the chunk may go on; otherwise the delivery was
// ended (rejected, acked, handed back for later, dead-lettered).
func (r *run) checkJob(ctx context.Context) (job kv.Job, ok bool, err error) {
	w := r.w
	job, err = r.job(ctx)
	if errors.Is(err, errNoJob) {
		r.reject(ctx, salvagetype.RejectBadChunk, fmt.Errorf("job %s does not exist and no job message will create it", r.chunk.Job))
		return job, false, nil
	}
	if errors.Is(err, kv.ErrNotFound) && int(r.meta.NumDelivered) >= r.pool.maxDeliver {
		// Still no record: an envelope that resumes the chunk later, once
		// a splitter has created it, or shows an operator a stray chunk.
		return job, false, r.deadLetter(ctx, recovery.Failure{Class: salvagetype.ClassTransient, Exhausted: true},
			fmt.Errorf("no record of job %s after %d deliveries", r.chunk.Job, r.meta.NumDelivered))
	}
	if errors.Is(err, kv.ErrNotFound) {
		r.log.Warn().Dur("waited_ms", w.cfg.JobWait).Msg("chunk of a job with no record yet; trying again later")
		return job, false, r.m.NakWithDelay(w.nakDelay())
	}
	if err != nil {
		return job, false, err
	}
	if r.chunk.SourceSeq != 0 && job.SourceSeq != 0 && r.chunk.SourceSeq != job.SourceSeq {
		// Split from a second message with this job id, which lost the
		// race to create the job: not this job's chunk.
		r.log.Warn().Uint64("source_seq", r.chunk.SourceSeq).Uint64("job_source_seq", job.SourceSeq).Msg("chunk of a duplicate job message; dropped")
		return job, false, r.ack(ctx)
	}
	if r.chunk.Chunk > job.Chunks || r.chunk.Pipeline != job.Pipeline || r.part.Index != job.Partition {
		r.reject(ctx, salvagetype.RejectBadChunk, fmt.Errorf("chunk %d of pipeline %s in partition %d: job %s has %d chunks of pipeline %s in partition %d",
			r.chunk.Chunk, r.chunk.Pipeline, r.part.Index, job.ID, job.Chunks, job.Pipeline, job.Partition))
		return job, false, nil
	}
	if job.ChunksRoot != "" {
		// The record owns the input: a message whose input is not the one
		// split for this chunk runs nothing (invariant 11).
		if err := streams.VerifyChunk(job.ChunksRoot, job.Chunks, r.chunk); err != nil {
			r.reject(ctx, salvagetype.RejectBadChunk, err)
			return job, false, nil
		}
	}
	return job, true, nil
}

// claimChunk takes the chunk's claim (invariant 3), waiting for a live holder
// to finish or lapse, and lists it for the reaper; a chunk retention
// retired stops expiring first. ok is false, with a nil error, when the
// holder it waited for ended the delivery.
func (r *run) claimChunk(ctx context.Context, cp kv.Checkpoint) (lease kv.Lease, ok bool, err error) {
	lease, err = r.acquire(ctx)
	if errors.Is(err, kv.ErrClaimHeld) {
		var held bool
		lease, held, err = r.waitForHolder(ctx)
		if err != nil || !held {
			return lease, false, err
		}
	} else if err != nil {
		return lease, false, err
	}
	r.lease = lease
	r.listClaim(ctx)
	if lease.Replaced != "" {
		r.log.Warn().Str("claim", lease.Key).Str("replaced", lease.Replaced).Msg("chunk claimed over something no live holder wrote")
	}
	if cp.KeptUntil != nil {
		// Retention retired the chunk (its envelope had settled) and a
		// replay runs it again: its rows stop expiring before the fence
		// moves, so a crash between the two leaves kept_until to say so
		// to the next delivery.
		if err := r.unretire(ctx); err != nil {
			return lease, false, err
		}
	}
	return lease, true, nil
}

// take moves the chunk's checkpoint to running under this worker's claim
// (lease): it records the delivery (a takeover, an approval it carries, a
// replay's link or fresh epoch) and recounts what the job counts of it.
// fresh says no worker ever took it (no journal rows to load); taken is
// what the job's counts move by. kv.ErrFenced: another worker took it
// meanwhile; kv.ErrFinished: it finished meanwhile.
func (r *run) take(ctx context.Context, lease kv.Lease, approval salvagetype.Approval, approved bool, linked string, freshEpoch freshFrom) (cp kv.Checkpoint, fence kv.Fence, taken kv.Delta, fresh bool, err error) {
	w := r.w
	cp, fence, err = r.part.Checkpoints.Take(ctx, r.chunk.Job, r.chunk.Chunk, w.cfg.ID, lease.Revision, func(cp *kv.Checkpoint) {
		// Never taken before: no worker has written a journal row for it.
		fresh = cp.MsgSeq == 0
		if approved && cp.Status == salvagetype.ChunkAwaitingApproval && cp.Stage == approval.Stage && !cp.Approved(approval.Stage) {
			cp.Approvals = append(cp.Approvals, approval)
			cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventApproved, At: approval.At, Worker: w.cfg.ID, Stage: approval.Stage,
				Detail: strings.TrimSuffix(approval.By+": "+approval.Note, ": ")})
		}
		cp.Status, cp.HeldOn = salvagetype.ChunkRunning, ""
		ev := salvagetype.ChunkEvent{Kind: salvagetype.EventDelivered, Delivery: r.meta.NumDelivered, Worker: w.cfg.ID, Stage: max(cp.Stage, 1)}
		if lease.TakenFrom != "" {
			// Handed back by the reaper when its holder's process
			// lease lapsed: a redelivery that is a takeover.
			cp.Takeovers++
			ev.Detail = "taken over from " + lease.TakenFrom + " (its process's lease lapsed)"
		}
		cp.Record(ev)
		countRedeliveries(cp, r.meta)
		// The last error stays until this delivery ends with its own.
		cp.LastErrorOlder = cp.LastError != ""
		if freshEpoch.ok && cp.Epoch == freshEpoch.from {
			// A replay by hand of a chunk whose effects were all
			// compensated: it runs fresh, never on undone outcomes.
			cp.FreshEpoch()
		}
		if cp.Stage < 1 {
			cp.Stage = 1
		}
		if linked != "" && (cp.Envelope == "" || cp.Envelope == linked) {
			cp.Envelope = linked
		}
		// A dead-lettered chunk running again (a replay) is unfinished
		// again; redeliveries are counted as they happen.
		taken = cp.Recount()
	})
	return cp, fence, taken, fresh, err
}

// loadResume reads what the chunk resumes from: its epoch's journal (none
// when fresh), the calls of its earlier epochs, its agents' snapshots, and
// the stages those show completed.
func (r *run) loadResume(ctx context.Context, cp kv.Checkpoint, fresh bool) error {
	w := r.w
	var err error
	rows := map[string]kv.StoredRow{}
	if !fresh {
		if rows, err = r.loadJournal(ctx, cp.Epoch); err != nil {
			return err
		}
	}
	r.replay = recovery.NewReplay(w.journalOf(r.part.Journal), rows)
	// The calls of the chunk's earlier epochs (a compensate-and-retry ran
	// it fresh) count too; read once, they do not change.
	if r.past, err = flow.PastTally(ctx, r.part, r.chunk.Job, r.chunk.Chunk, cp.Epoch, w.cfg.Prices); err != nil {
		return err
	}
	r.states = map[string]*salvagetype.AgentState{}
	for agent, ref := range cp.Snapshots {
		st, err := w.stores.Snapshots.LoadState(ctx, ref)
		if errors.Is(err, kv.ErrNotFound) {
			// Expired or never stored: the agent replays from scratch.
			r.log.Warn().Str("agent", agent).Str("snapshot", ref.Object).Msg("agent snapshot missing")
			continue
		}
		if err != nil {
			return err
		}
		r.states[agent] = st
	}
	recovery.Rows(rows).RebuildCompleted(r.states, cp.Stage)
	return nil
}

// started follows a take: a parked copy an approval's release left behind
// goes, and, in the background (the run waits for it before it returns),
// the job counts the start and admits its next chunk.
//
// While the hold paces a system the pipeline calls (its breaker open or
// half-open, or its held chunks coming back at the ramp's rate after the
// close), the next chunk is admitted onto that system's hold, not the
// work queue: the holder releases it with the held chunks, at the ramp's
// rate. So a job has at most its window of chunks parked on the hold and
// its window admitted behind them, the rest waits in its backlog, and
// what reaches a recovering system is paced. Admitted to the work queue,
// a job's whole backlog passed through it onto the hold within seconds
// (each chunk let the next in as it started, then parked) and came back,
// in the order it was parked, ahead of every other job's chunks.
func (r *run) started(ctx context.Context, p *recovery.Plan, job kv.Job, taken kv.Delta, approved bool) {
	w := r.w
	if approved {
		// The approval is recorded: a parked copy its release left behind
		// (a crash before the delete) must not come back.
		if err := flow.PurgeSubject(ctx, w.js, streams.Hold, flow.RefOf(r.chunk).Hold(streams.SystemApproval)); err != nil {
			r.log.Warn().Err(err).Msg("remove the released approval's parked copy")
		}
	}
	system, paced := "", false
	if job.Window > 0 {
		system, paced = w.gate.paced(p.Tools.Systems(), time.Now())
	}
	// Counting the start and admitting the job's next chunk need not hold
	// this one up; the run waits for them before it returns.
	r.background(func() {
		if _, err := w.tracker.Apply(ctx, r.chunk.Job, r.chunk.Chunk, salvagetype.ChunkRunning, taken); err != nil {
			r.log.Warn().Err(err).Msg("count the chunk's start in its job")
		}
		admit := flow.AdmitAfter
		if paced {
			admit = func(ctx context.Context, js jetstream.JetStream, job kv.Job, chunk int) error {
				return flow.AdmitOnHold(ctx, js, job, chunk, system)
			}
		}
		if err := admit(ctx, w.js, job, r.chunk.Chunk); err != nil {
			// The next take of this chunk, or the sweeper, admits it.
			r.log.Warn().Err(err).Msg("admit the next chunk of the job")
		}
	})
}

// againstCheckpoint ends the delivery, reporting done, when the chunk's
// checkpoint cp says the message must not run: its epoch is ahead of the
// checkpoint's, the chunk is finished already, or a newer message of it
// has run it since.
func (r *run) againstCheckpoint(ctx context.Context, cp kv.Checkpoint) (bool, error) {
	w := r.w
	if r.chunk.Epoch > cp.Epoch {
		// Epochs move only in the checkpoint, before a requeue publishes
		// the new one: a message ahead of its checkpoint was not sent by
		// Salvage, and would run the chunk's effects again under new keys.
		r.reject(ctx, salvagetype.RejectBadChunk, fmt.Errorf("epoch %d: chunk %d of job %s is at epoch %d", r.chunk.Epoch, r.chunk.Chunk, r.chunk.Job, cp.Epoch))
		return true, nil
	}
	if cp.Status == salvagetype.ChunkDone || cp.Status.IsCancelled() {
		r.log.Info().Str("status", string(cp.Status)).Msg("chunk already finished; acked without re-running")
		if err := r.ack(ctx); err != nil {
			r.log.Warn().Err(err).Msg("ack finished chunk")
		}
		// Its worker may have died before counting it or acking it.
		return true, w.tracker.FinishedAgain(ctx, w.js, cp, w.cfg.ID)
	}
	older, err := flow.OlderMessage(ctx, w.js, r.part.Index, r.meta.Sequence.Stream, cp)
	if err != nil || !older {
		return err != nil, err
	}
	r.log.Info().Uint64("stream_seq", r.meta.Sequence.Stream).Uint64("current_seq", cp.MsgSeq).
		Msg("an older message of the chunk: a newer one has run it since; dropped without running")
	return true, r.dropStale("a newer message of the chunk has run it")
}
