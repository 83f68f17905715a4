package consumers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/streams"
)

// run is one delivery of one chunk.
type run struct {
	w     *Worker
	m     jetstream.Msg
	meta  *jetstream.MsgMetadata
	chunk streams.ChunkMsg
	log   zerolog.Logger

	mu    sync.Mutex
	lease kv.Lease
	// heldRev is the revision of the claim's listing under this worker
	// (listClaim), 0 when there is none.
	heldRev uint64
	// replay is the chunk epoch's journal, loaded once at take.
	replay *recovery.Replay
	// states are the agents' states, from their latest stage snapshots.
	states map[string]*recovery.AgentState

	// free gives the run's slot back, at most once (done).
	free     func()
	freeOnce sync.Once
	// take takes a slot again, for a run that gave its own away while it
	// waited (tenantTurn), unless ctx or stop ends first.
	take func(ctx context.Context, stop <-chan struct{}) error
	// stop is closed when the worker stops taking chunks (a drain).
	stop <-chan struct{}
	tail bool
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
		r.free()
	})
}

// handle runs one delivered chunk to one of: ack (done, cancelled, already
// finished), term (permanent failure, after its envelope is stored), nak
// with delay (tier 1 exhausted), or nothing at all (a stale worker, which
// must not ack). free gives the delivery's slot back: once, when the
// chunk's outcome is durable (its bookkeeping goes on beside the next
// chunk) or when handle returns.
func (w *Worker) handle(ctx context.Context, m jetstream.Msg, s slot) {
	free := s.free
	r := &run{w: w, m: m, log: w.log, free: free, take: s.take, stop: s.stop, pool: w.poolFor(pipelineOf(m.Subject()))}
	w.inFlight.Add(1)
	defer w.inFlight.Add(-1)
	defer func() {
		r.bg.Wait()
		r.freeOnce.Do(free)
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
		r.reject(ctx, streams.RejectBadChunk, fmt.Errorf("subject %s, stream %s and body (chunk %d of job %s, pipeline %s, partition %d) disagree",
			m.Subject(), meta.Stream, r.chunk.Chunk, r.chunk.Job, r.chunk.Pipeline, r.chunk.Partition))
		return
	}
	r.log = w.log.With().Str("job_id", r.chunk.Job).Int("chunk", r.chunk.Chunk).
		Str("trace_id", r.chunk.TraceID).Uint64("delivery", meta.NumDelivered).Logger()
	ctx, span := w.tracer.Start(underJob(ctx, r.chunk.TraceID, r.chunk.Job), "chunk "+strconv.Itoa(r.chunk.Chunk),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(recovery.AttrJob.String(r.chunk.Job), recovery.AttrPipeline.String(r.chunk.Pipeline),
			recovery.AttrChunk.Int(r.chunk.Chunk), recovery.AttrDelivery.Int64(int64(meta.NumDelivered)), recovery.AttrEpoch.Int(r.chunk.Epoch)))
	err = r.run(ctx)
	if err != nil {
		r.log.Error().Err(err).Msg("chunk run ended on an infrastructure error; JetStream will redeliver")
		span.RecordError(err)
	}
	endChunkSpan(span, r.outcome, err)
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
	r.reject(ctx, streams.RejectBadChunk, fmt.Errorf("malformed chunk message: %w", err))
}

func (r *run) run(ctx context.Context) error {
	w := r.w
	p, err := w.cfg.Registry.Get(r.chunk.Pipeline)
	if err != nil {
		return r.permanent(ctx, err)
	}
	job, err := r.job(ctx)
	if errors.Is(err, errNoJob) {
		r.reject(ctx, streams.RejectBadChunk, fmt.Errorf("job %s does not exist and no job message will create it", r.chunk.Job))
		return nil
	}
	if errors.Is(err, kv.ErrNotFound) && int(r.meta.NumDelivered) >= r.pool.maxDeliver {
		// Still no record: an envelope that resumes the chunk later, once
		// a splitter has created it, or shows an operator a stray chunk.
		return r.deadLetter(ctx, recovery.Failure{Class: recovery.ClassTransient, Exhausted: true},
			fmt.Errorf("no record of job %s after %d deliveries", r.chunk.Job, r.meta.NumDelivered))
	}
	if errors.Is(err, kv.ErrNotFound) {
		r.log.Warn().Dur("waited_ms", w.cfg.JobWait).Msg("chunk of a job with no record yet; trying again later")
		return r.m.NakWithDelay(w.nakDelay())
	}
	if err != nil {
		return err
	}
	if r.chunk.SourceSeq != 0 && job.SourceSeq != 0 && r.chunk.SourceSeq != job.SourceSeq {
		// Split from a second message with this job id, which lost the
		// race to create the job: not this job's chunk.
		r.log.Warn().Uint64("source_seq", r.chunk.SourceSeq).Uint64("job_source_seq", job.SourceSeq).Msg("chunk of a duplicate job message; dropped")
		return r.ack(ctx)
	}
	if r.chunk.Chunk > job.Chunks || r.chunk.Pipeline != job.Pipeline || r.part.Index != job.Partition {
		r.reject(ctx, streams.RejectBadChunk, fmt.Errorf("chunk %d of pipeline %s in partition %d: job %s has %d chunks of pipeline %s in partition %d",
			r.chunk.Chunk, r.chunk.Pipeline, r.part.Index, job.ID, job.Chunks, job.Pipeline, job.Partition))
		return nil
	}
	if job.ChunksRoot != "" {
		// The record owns the input: a message whose input is not the one
		// split for this chunk runs nothing (invariant 11).
		if err := streams.VerifyChunk(job.ChunksRoot, job.Chunks, r.chunk); err != nil {
			r.reject(ctx, streams.RejectBadChunk, err)
			return nil
		}
	}
	cp, _, err := r.part.Checkpoints.Get(ctx, r.chunk.Job, r.chunk.Chunk)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return err
	}
	if cp.Status == kv.StatusDeadLettered && cp.MsgSeq == r.meta.Sequence.Stream {
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
	if r.chunk.Epoch > cp.Epoch {
		// Epochs move only in the checkpoint, before a requeue publishes
		// the new one: a message ahead of its checkpoint was not sent by
		// Salvage, and would run the chunk's effects again under new keys.
		r.reject(ctx, streams.RejectBadChunk, fmt.Errorf("epoch %d: chunk %d of job %s is at epoch %d", r.chunk.Epoch, r.chunk.Chunk, r.chunk.Job, cp.Epoch))
		return nil
	}
	if cp.Status == kv.StatusDone || kv.IsCancelled(cp.Status) {
		r.log.Info().Str("status", cp.Status).Msg("chunk already finished; acked without re-running")
		if err := r.ack(ctx); err != nil {
			r.log.Warn().Err(err).Msg("ack finished chunk")
		}
		// Its worker may have died before counting it or acking it.
		return finishedAgain(ctx, w.js, w.tracker, cp, w.cfg.ID)
	}
	if older, err := olderMessage(ctx, w.js, r.part.Index, r.meta.Sequence.Stream, cp); err != nil || older {
		if err != nil {
			return err
		}
		r.log.Info().Uint64("stream_seq", r.meta.Sequence.Stream).Uint64("current_seq", cp.MsgSeq).
			Msg("an older message of the chunk: a newer one has run it since; dropped without running")
		return r.dropStale("a newer message of the chunk has run it")
	}
	if job.CancelledAt != nil {
		return r.cancelUnclaimed(ctx, job, cp)
	}
	job, endTurn, err := r.tenantTurn(ctx, job)
	if err != nil || endTurn == nil {
		return err
	}
	defer endTurn()
	// The chunk's calls count against its tenant's limit too.
	ctx = recovery.WithTenant(ctx, job.Tenant)
	if job.CancelledAt != nil {
		return r.cancelUnclaimed(ctx, job, cp)
	}

	lease, err := r.acquire(ctx)
	if errors.Is(err, kv.ErrClaimHeld) {
		var held bool
		lease, held, err = r.waitForHolder(ctx)
		if err != nil || !held {
			return err
		}
	} else if err != nil {
		return err
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
			return err
		}
	}
	approval, approved := r.approval()
	var taken kv.Delta
	fresh := false
	cp, fence, err := r.part.Checkpoints.Take(ctx, r.chunk.Job, r.chunk.Chunk, w.cfg.ID, lease.Revision, func(cp *kv.Checkpoint) {
		// Never taken before: no worker has written a journal row for it.
		fresh = cp.MsgSeq == 0
		if approved && cp.Status == kv.StatusAwaitingApproval && cp.Stage == approval.Stage && !cp.Approved(approval.Stage) {
			cp.Approvals = append(cp.Approvals, approval)
			cp.Record(kv.ChunkEvent{Kind: kv.EventApproved, At: approval.At, Worker: w.cfg.ID, Stage: approval.Stage,
				Detail: strings.TrimSuffix(approval.By+": "+approval.Note, ": ")})
		}
		cp.Status, cp.HeldOn = kv.StatusRunning, ""
		ev := kv.ChunkEvent{Kind: kv.EventDelivered, Delivery: r.meta.NumDelivered, Worker: w.cfg.ID, Stage: max(cp.Stage, 1)}
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
	if approved {
		// The approval is recorded: a parked copy its release left behind
		// (a crash before the delete) must not come back.
		if err := purgeSubject(ctx, w.js, streams.Hold, streams.HoldSubject(streams.SystemApproval, r.chunk.Job, r.chunk.Chunk)); err != nil {
			r.log.Warn().Err(err).Msg("remove the released approval's parked copy")
		}
	}
	// Counting the start and admitting the job's next chunk need not hold
	// this one up; the run waits for them before it returns.
	r.background(func() {
		if _, err := w.tracker.apply(ctx, r.chunk.Job, r.chunk.Chunk, kv.StatusRunning, taken); err != nil {
			r.log.Warn().Err(err).Msg("count the chunk's start in its job")
		}
		if err := admitAfter(ctx, w.js, job, r.chunk.Chunk); err != nil {
			// The next take of this chunk, or the sweeper, admits it.
			r.log.Warn().Err(err).Msg("admit the next chunk of the job")
		}
	})
	if byHand && cp.Envelope == linked {
		r.replayedByHand(ctx, linked, freshEpoch.ok)
	}
	rows := map[string]kv.StoredRow{}
	if !fresh {
		if rows, err = r.loadJournal(ctx, cp.Epoch); err != nil {
			return err
		}
	}
	r.replay = recovery.NewReplay(w.journal(r.part.Journal), rows)
	// The calls of the chunk's earlier epochs (a compensate-and-retry ran
	// it fresh) count too; read once, they do not change.
	if r.past, err = pastTally(ctx, r.part, r.chunk.Job, r.chunk.Chunk, cp.Epoch, w.cfg.Prices); err != nil {
		return err
	}
	r.states = map[string]*recovery.AgentState{}
	for agent, ref := range cp.Snapshots {
		st, err := recovery.LoadSnapshot(ctx, w.stores.Snapshots, ref)
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
	recovery.RebuildCompleted(r.states, rows, cp.Stage)

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

// job reads the chunk's job record. A chunk can reach a worker before its
// record exists — the splitter publishes every chunk first and creates the
// record last, and may have died in between; its redelivered job message
// then creates it — so a missing record is waited for, up to JobWait,
// with the message kept in progress. It returns kv.ErrNotFound after that.
func (r *run) job(ctx context.Context) (kv.Job, error) {
	deadline := time.Now().Add(r.w.cfg.JobWait)
	lastBeat := time.Now()
	poll := 2 * time.Millisecond
	for first := true; ; first = false {
		job, err := r.w.stores.Jobs.Get(ctx, r.chunk.Job)
		if !errors.Is(err, kv.ErrNotFound) || time.Now().After(deadline) {
			return job, err
		}
		if first {
			pending, err := r.jobPending(ctx)
			if err != nil {
				return job, err
			}
			if !pending {
				// Its job message is gone, so its record would exist by
				// now (the splitter creates it before it acks): a look
				// after that tells a job just created from none at all.
				job, err = r.w.stores.Jobs.Get(ctx, r.chunk.Job)
				if errors.Is(err, kv.ErrNotFound) {
					return job, errNoJob
				}
				return job, err
			}
		}
		if time.Since(lastBeat) >= r.pool.heartbeat {
			_ = r.m.InProgress()
			lastBeat = time.Now()
		}
		select {
		case <-ctx.Done():
			return job, ctx.Err()
		case <-time.After(poll):
		}
		// The record usually lands within milliseconds (the splitter is
		// publishing the job's last chunks): look again soon, then back off.
		poll = min(poll*3/2, 250*time.Millisecond)
	}
}

// errNoJob: the chunk names a job that has no record and no job message
// that would create one.
var errNoJob = errors.New("no such job")

// jobPending reports whether the chunk's job message (SALVAGE_JOBS at its
// source_seq) is still there and names the chunk's job: a splitter is
// creating the job, or will. A chunk without a source, or whose source is
// gone or another job's, has no record coming.
func (r *run) jobPending(ctx context.Context) (bool, error) {
	if r.chunk.SourceSeq == 0 {
		return false, nil
	}
	raw, err := getMsg(ctx, r.w.js, streams.Jobs, r.chunk.SourceSeq)
	if err != nil {
		return false, err
	}
	return raw != nil && intakeJobID(raw) == r.chunk.Job, nil
}

// countRedeliveries adds the deliveries of the message being taken that
// no earlier take counted, so Checkpoint.Redeliveries only grows while
// Deliveries follows the current message (a requeue starts again at 1).
func countRedeliveries(cp *kv.Checkpoint, meta *jetstream.MsgMetadata) {
	d := max(meta.NumDelivered, 1)
	switch {
	case meta.Sequence.Stream != cp.MsgSeq:
		cp.Redeliveries += int(d - 1)
	case d > cp.Deliveries:
		cp.Redeliveries += int(d - cp.Deliveries)
	}
	cp.MsgSeq, cp.Deliveries = meta.Sequence.Stream, d
}

// linkedEnvelope is the envelope this message re-runs the chunk for: its
// Salvage-Replay-Of (byHand: an operator published it) or its
// Salvage-Recovery-Of header.
func (r *run) linkedEnvelope() (id string, byHand bool) {
	h := r.m.Headers()
	if id := h.Get(streams.HeaderReplayOf); streams.ValidateToken("envelope", id) == nil {
		return id, true
	}
	if id := h.Get(streams.HeaderRecoveryOf); streams.ValidateToken("envelope", id) == nil {
		return id, false
	}
	return "", false
}

// freshFrom says a replay runs the chunk fresh, leaving epoch from.
type freshFrom struct {
	ok   bool
	from int
}

// checkLinked checks the envelope a message says it re-runs the chunk for
// against the records: it must be this chunk's (else the message is
// rejected as bad-replay), and a replay published by hand must be one
// Salvage may run (else it is refused, noted on the envelope). It returns
// whether the chunk runs fresh, leaving epoch (the checkpoint's, as read
// for this message); a message it rejected or refused sets r.outcome and
// is gone.
func (r *run) checkLinked(ctx context.Context, id string, byHand bool, epoch int) (freshFrom, error) {
	if id == "" {
		return freshFrom{}, nil
	}
	if !byHand {
		rec, _, err := r.w.stores.Envelopes.Get(ctx, id)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return freshFrom{}, err
		}
		if err != nil || rec.Job != r.chunk.Job || rec.Chunk != r.chunk.Chunk {
			r.reject(ctx, streams.RejectBadReplay, fmt.Errorf("%s: %s is not an envelope of chunk %d of job %s", streams.HeaderRecoveryOf, id, r.chunk.Chunk, r.chunk.Job))
		}
		return freshFrom{}, nil
	}
	_, fresh, err := byHandReplay(ctx, r.w.stores, id, r.chunk)
	switch {
	case errors.Is(err, errForged):
		r.reject(ctx, streams.RejectBadReplay, fmt.Errorf("%s: %w", streams.HeaderReplayOf, err))
		return freshFrom{}, nil
	case errors.Is(err, ErrReplayRefused):
		r.refuseReplay(ctx, id, err)
		return freshFrom{}, nil
	case err != nil:
		return freshFrom{}, err
	}
	if !fresh {
		return freshFrom{}, nil
	}
	return freshFrom{ok: true, from: epoch}, nil
}

// refuseReplay removes a replay published by hand that Salvage will not
// run: the envelope notes why, a rejection event says so, the chunk stays
// as it was.
func (r *run) refuseReplay(ctx context.Context, id string, why error) {
	_, err := r.w.stores.Envelopes.Mutate(ctx, id, func(rec *kv.EnvelopeRecord) error {
		rec.Notes = append(rec.Notes, streams.Clip(fmt.Sprintf("replay by hand (%s message %d) refused: %v", r.meta.Stream, r.meta.Sequence.Stream, why), 1024))
		return nil
	})
	if err != nil {
		r.log.Warn().Err(err).Str("envelope_id", id).Msg("note the refused replay on its envelope")
	}
	r.reject(ctx, streams.RejectReplayRefused, why)
}

// reject removes a chunk message its records deny, with a bounded event
// on salvage.events.rejected.<reason>, and runs nothing. An event that
// cannot be published leaves the message for a redelivery.
func (r *run) reject(ctx context.Context, reason string, why error) {
	ev := streams.NewRejection(reason, why, r.m.Subject(), r.meta.Sequence.Stream, r.m.Data())
	ev.JobID = r.chunk.Job
	h := nats.Header{}
	h.Set(streams.HeaderReason, reason)
	h.Set(streams.HeaderMsgID, fmt.Sprintf("rejected.chunk.%d", r.meta.Sequence.Stream))
	if err := publishJSON(ctx, r.w.js, streams.RejectedSubject(reason), ev, h); err != nil {
		r.log.Warn().Err(err).Msg("publish a chunk message's rejection; it stays for a redelivery")
		r.outcome = reason
		return
	}
	r.log.Warn().Str("reason", reason).Err(why).Uint64("stream_seq", r.meta.Sequence.Stream).Msg("chunk message rejected")
	r.outcome = reason
	if err := r.m.TermWithReason(reason); err != nil {
		r.log.Warn().Err(err).Msg("term rejected chunk message")
	}
}

// approval is the approval the message carries (Salvage-Approved-By and
// Salvage-Approved-Stage, set by Operator.Approve when it releases a
// parked chunk).
func (r *run) approval() (kv.Approval, bool) {
	h := r.m.Headers()
	by := h.Get(streams.HeaderApprovedBy)
	stage, err := strconv.Atoi(h.Get(streams.HeaderApprovedStage))
	if by == "" || err != nil || stage < 1 {
		return kv.Approval{}, false
	}
	return kv.Approval{Stage: stage, By: streams.Clip(by, 256), Note: streams.Clip(h.Get(streams.HeaderApprovalNote), streams.ErrorTextMax), At: time.Now().UTC()}, true
}

// replayedByHand records on its envelope that an operator re-ran the
// chunk by publishing it with Salvage-Replay-Of: the envelope is
// recovering until the chunk ends, which resolves or supersedes it. A
// replay through the API was recorded already.
func (r *run) replayedByHand(ctx context.Context, id string, fresh bool) {
	_, err := r.w.stores.Envelopes.Mutate(ctx, id, func(rec *kv.EnvelopeRecord) error {
		if rec.Requeued || rec.Status == kv.EnvelopeResolved || rec.Status == kv.EnvelopeSuperseded {
			return kv.ErrNoChange
		}
		rec.Replays++
		rec.Status, rec.Requeued, rec.Human, rec.RecoveringBy, rec.LeaseUntil = kv.EnvelopeRecovering, true, true, "", time.Time{}
		note := fmt.Sprintf("replayed by hand (%s on %s message %d)", streams.HeaderReplayOf, r.meta.Stream, r.meta.Sequence.Stream)
		if fresh {
			note += ", fresh in a new epoch: its effects were compensated"
		}
		rec.Notes = append(rec.Notes, note)
		return nil
	})
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		r.log.Warn().Err(err).Str("envelope_id", id).Msg("record the replay on its envelope")
	}
}

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
			case errors.Is(cause, errStale):
				log.Warn().Msg("claim lost mid-chunk; stopping without ack")
				return nil
			case errors.Is(cause, recovery.ErrJobCancelled) || errors.Is(err, recovery.ErrJobCancelled):
				return r.cancelled(ctx, cp, fence, s)
			case errors.Is(cause, errDraining):
				return r.release(ctx, cp, fence, "worker shut down mid-chunk")
			case st.Optional:
				log.Warn().Err(err).Msg("optional stage failed; continuing without it")
				cp.Gaps = append(cp.Gaps, st.Name)
			case errors.Is(err, recovery.ErrBreakerOpen):
				system, _ := recovery.BreakerSystem(err)
				return r.hold(ctx, cp, fence, system, err)
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
	setTally(cp, r.past.Plus(r.replay.Tally(r.w.cfg.Prices)))
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
func (r *run) snapshot(ctx context.Context, st recovery.Stage, cp *kv.Checkpoint) error {
	if cp.Snapshots == nil {
		cp.Snapshots = map[string]kv.SnapshotRef{}
	}
	for _, a := range st.Agents {
		state := r.states[a.Name]
		if _, had := cp.Snapshots[a.Name]; state == nil || (state.Derivable() && !had) {
			// Nothing the journal does not rebuild on resume.
			continue
		}
		ref, err := recovery.SaveSnapshot(ctx, r.w.stores.Snapshots, r.chunk.Job, r.chunk.Chunk, cp.Epoch, a.Name, state)
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
	h.Set(streams.HeaderMsgID, fmt.Sprintf("%s.%d.result.%d", r.chunk.Job, r.chunk.Chunk, cp.Epoch))
	h.Set(streams.HeaderJob, r.chunk.Job)
	h.Set(streams.HeaderChunk, strconv.Itoa(r.chunk.Chunk))
	if r.chunk.TraceID != "" {
		h.Set(streams.HeaderTraceParent, streams.TraceParent(r.chunk.TraceID, streams.DeriveSpanID(h.Get(streams.HeaderMsgID))))
	}
	if _, err := publish(ctx, w.js, &nats.Msg{Subject: streams.ResultSubject(r.chunk.Job, r.chunk.Chunk), Data: result, Header: h}); err != nil {
		return err
	}
	cp.Status = kv.StatusDone
	cp.Stage = len(p.Stages)
	cp.Record(kv.ChunkEvent{Kind: kv.EventDone, Worker: w.cfg.ID, Stage: cp.Stage})
	d := cp.Recount()
	if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
		return r.fencedOr(err)
	}
	if w.afterDone != nil {
		w.afterDone()
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
	r.outcome = cp.Status
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
	_, err := r.w.tracker.apply(ctx, r.chunk.Job, r.chunk.Chunk, cp.Status, d)
	if serr := settleEnvelope(ctx, r.w.stores, cp, r.w.cfg.ID); serr != nil {
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
	if rows := r.replay.Rows(); len(standingEffects(rows)) > 0 {
		cp.Stage = stage
		// What this delivery counted (calls, tokens) is kept first,
		// while the fence is still ours.
		if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
			return r.fencedOr(err)
		}
		job := kv.Job{ID: r.chunk.Job, Pipeline: r.chunk.Pipeline, TraceID: r.chunk.TraceID, CancelReason: r.w.cancels.reason(r.chunk.Job)}
		if _, err := sendStopped(ctx, r.w.tracker, job, cp, rows, r.chunk, r.letterOf()); err != nil {
			return err // the message stays: its redelivery settles it
		}
		return r.stoppedWithEffects(ctx, stage)
	}
	cp.Status = kv.CancelledAtStage(stage)
	cp.Stage = stage
	cp.Reason = r.w.cancels.reason(r.chunk.Job)
	cp.Record(kv.ChunkEvent{Kind: kv.EventCancelled, Worker: r.w.cfg.ID, Stage: stage})
	d := cp.Recount()
	if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
		return r.fencedOr(err)
	}
	r.log.Info().Int("stage", stage).Msg("chunk cancelled")
	r.outcome = cp.Status
	if err := r.ack(ctx); err != nil {
		r.log.Warn().Err(err).Msg("ack cancelled chunk")
	}
	r.releaseClaim(ctx)
	return r.ended(ctx, cp, d)
}

// stoppedWithEffects acks a chunk whose cancellation an envelope settles.
func (r *run) stoppedWithEffects(ctx context.Context, stage int) error {
	r.log.Info().Int("stage", stage).Msg("chunk cancelled with effects that may stand; an envelope settles them")
	r.outcome = kv.CancelledAtStage(stage)
	if err := r.ack(ctx); err != nil {
		r.log.Warn().Err(err).Msg("ack cancelled chunk")
	}
	r.releaseClaim(ctx)
	return nil
}

// letterOf is a letter for this delivery's message.
func (r *run) letterOf() letter {
	return letter{Seq: r.meta.Sequence.Stream, Subject: r.m.Subject(), Data: r.m.Data(), Deliveries: r.meta.NumDelivered}
}

// cancelUnclaimed records the cancellation of a chunk nobody runs; effects
// an earlier delivery left standing are settled by an envelope.
func (r *run) cancelUnclaimed(ctx context.Context, job kv.Job, cp kv.Checkpoint) error {
	stage, reason := max(cp.Stage, 1), job.StopReason()
	settled, err := settleStopped(ctx, r.w.tracker, job, cp, r.chunk, r.letterOf())
	if err != nil {
		return err
	}
	if settled {
		return r.stoppedWithEffects(ctx, stage)
	}
	// A worker that died in it made calls nobody counted yet.
	tally, err := chunkTally(ctx, r.part, cp, r.w.cfg.Prices)
	if err != nil {
		return err
	}
	var d kv.Delta
	cp, err = r.part.Checkpoints.Mutate(ctx, r.chunk.Job, r.chunk.Chunk, func(cp *kv.Checkpoint) error {
		d = kv.Delta{}
		if cp.Terminal() && cp.Status != kv.StatusDeadLettered {
			return kv.ErrNoChange
		}
		cp.Status, cp.Stage, cp.Reason = kv.CancelledAtStage(stage), stage, reason
		setTally(cp, tally)
		d = cp.Recount()
		return nil
	})
	if err != nil {
		return err
	}
	r.log.Info().Int("stage", stage).Msg("chunk cancelled before it ran")
	r.outcome = cp.Status
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
	r.outcome = outcomeRetry
	if delay == 0 {
		return r.m.Nak()
	}
	return r.m.NakWithDelay(delay)
}

// recordError keeps in the checkpoint why the chunk failed and who failed,
// for the envelope the dead-letterer may write later.
func recordError(cp *kv.Checkpoint, cause error) {
	cp.ClearLastError()
	cp.LastError = streams.Clip(cause.Error(), streams.ErrorTextMax)
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
	cp.LastError, cp.LastErrorClass = why, recovery.ClassTransient.String()
	if err := r.part.Checkpoints.Write(ctx, fence, cp); err != nil {
		return r.fencedOr(err)
	}
	r.releaseClaim(ctx)
	r.log.Info().Int("stage", cp.Stage).Msg("chunk released on drain")
	r.outcome = outcomeReleased
	return r.m.Nak()
}

// permanent dead-letters the chunk for a failure retrying cannot fix.
func (r *run) permanent(ctx context.Context, cause error) error {
	class := recovery.ClassOf(cause)
	if !class.Permanent() {
		class = recovery.ClassPermanent
	}
	return r.deadLetter(ctx, recovery.Failure{Class: class, Status: recovery.StatusOf(cause)}, cause)
}

// deadLetter stores the chunk's envelope, then terms the message: a termed
// message leaves the work queue at once, so the envelope must exist first.
func (r *run) deadLetter(ctx context.Context, f recovery.Failure, cause error) error {
	l := letter{
		Seq: r.meta.Sequence.Stream, Subject: r.m.Subject(), Data: r.m.Data(), Chunk: r.chunk,
		Deliveries: r.meta.NumDelivered, Failure: f, Err: cause.Error(),
	}
	var ae *recovery.AgentError
	if errors.As(cause, &ae) {
		l.FailedAgent, l.FailedTool, l.FailedCall = ae.Agent, ae.Tool, ae.Call
	}
	id, err := r.w.letter.send(ctx, l)
	if errors.Is(err, errStaleMessage) {
		r.releaseClaim(ctx)
		return r.dropStale("a newer message of the chunk has run it")
	}
	if err != nil {
		// Without an envelope the message must stay: JetStream redelivers.
		return errors.Join(cause, err)
	}
	r.releaseClaim(ctx)
	r.outcome = kv.StatusDeadLettered
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
// (WorkerConfig.Alive): one whose holder has no record is taken at once.
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
			cancel(errStale)
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
		if err == nil && (cp.Status == kv.StatusDone || kv.IsCancelled(cp.Status)) {
			r.log.Info().Str("status", cp.Status).Msg("holder finished the chunk; acking this delivery")
			return kv.Lease{}, false, r.ack(ctx)
		}
		if err == nil && cp.Status == kv.StatusDeadLettered {
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
