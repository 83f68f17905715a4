package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// The checks a delivery passes before its chunk runs: its job record, the
// envelope a replay links, the approval it carries.

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
	raw, err := flow.GetMsg(ctx, r.w.js, streams.Jobs, r.chunk.SourceSeq)
	if err != nil {
		return false, err
	}
	return raw != nil && flow.IntakeJobID(raw) == r.chunk.Job, nil
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
	if id := h.Get(salvagetype.HeaderReplayOf); salvagetype.ValidateToken("envelope", id) == nil {
		return id, true
	}
	if id := h.Get(salvagetype.HeaderRecoveryOf); salvagetype.ValidateToken("envelope", id) == nil {
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
			r.reject(ctx, salvagetype.RejectBadReplay, fmt.Errorf("%s: %s is not an envelope of chunk %d of job %s", salvagetype.HeaderRecoveryOf, id, r.chunk.Chunk, r.chunk.Job))
		}
		return freshFrom{}, nil
	}
	_, fresh, err := flow.ByHandReplay(ctx, r.w.stores, id, r.chunk)
	switch {
	case errors.Is(err, flow.ErrForged):
		r.reject(ctx, salvagetype.RejectBadReplay, fmt.Errorf("%s: %w", salvagetype.HeaderReplayOf, err))
		return freshFrom{}, nil
	case errors.Is(err, salvagetype.ErrReplayRefused):
		r.auditByHand(ctx, id, err)
		r.refuseReplay(ctx, id, err)
		return freshFrom{}, nil
	case err != nil:
		return freshFrom{}, err
	}
	r.auditByHand(ctx, id, nil)
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
	r.reject(ctx, salvagetype.RejectReplayRefused, why)
}

// reject removes a chunk message its records deny, with a bounded event
// on salvage.events.rejected.<reason>, and runs nothing. An event that
// cannot be published leaves the message for a redelivery.
func (r *run) reject(ctx context.Context, reason salvagetype.RejectReason, why error) {
	ev := streams.NewRejection(reason, why, r.m.Subject(), r.meta.Sequence.Stream, r.m.Data())
	ev.JobID = r.chunk.Job
	h := nats.Header{}
	h.Set(salvagetype.HeaderReason, string(reason))
	h.Set(salvagetype.HeaderMsgID, fmt.Sprintf("rejected.chunk.%d", r.meta.Sequence.Stream))
	if err := flow.PublishJSON(ctx, r.w.js, streams.RejectedSubject(reason), ev, h); err != nil {
		r.log.Warn().Err(err).Msg("publish a chunk message's rejection; it stays for a redelivery")
		r.outcome = string(reason)
		return
	}
	r.log.Warn().Str("reason", string(reason)).Err(why).Uint64("stream_seq", r.meta.Sequence.Stream).Msg("chunk message rejected")
	r.outcome = string(reason)
	if err := r.m.TermWithReason(string(reason)); err != nil {
		r.log.Warn().Err(err).Msg("term rejected chunk message")
	}
}

// approval is the approval the message carries (Salvage-Approved-By and
// Salvage-Approved-Stage, set by Operator.Approve when it releases a
// parked chunk).
func (r *run) approval() (salvagetype.Approval, bool) {
	h := r.m.Headers()
	by := h.Get(salvagetype.HeaderApprovedBy)
	stage, err := strconv.Atoi(h.Get(salvagetype.HeaderApprovedStage))
	if by == "" || err != nil || stage < 1 {
		return salvagetype.Approval{}, false
	}
	return salvagetype.Approval{Stage: stage, By: streams.Clip(by, 256), Note: streams.Clip(h.Get(salvagetype.HeaderApprovalNote), salvagetype.ErrorTextMax), At: time.Now().UTC()}, true
}

// replayedByHand records on its envelope that an operator re-ran the
// chunk by publishing it with Salvage-Replay-Of: the envelope is
// recovering until the chunk ends, which resolves or supersedes it. A
// replay through the API was recorded already.
func (r *run) replayedByHand(ctx context.Context, id string, fresh bool) {
	_, err := r.w.stores.Envelopes.Mutate(ctx, id, func(rec *kv.EnvelopeRecord) error {
		if rec.Requeued || rec.Status == salvagetype.EnvelopeResolved || rec.Status == salvagetype.EnvelopeSuperseded {
			return kv.ErrNoChange
		}
		rec.Replays++
		rec.Status, rec.Requeued, rec.Human, rec.RecoveringBy, rec.LeaseUntil = salvagetype.EnvelopeRecovering, true, true, "", time.Time{}
		note := fmt.Sprintf("replayed by hand (%s on %s message %d)", salvagetype.HeaderReplayOf, r.meta.Stream, r.meta.Sequence.Stream)
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

// auditByHand puts a replay published by hand on record in SALVAGE_AUDIT
// once the worker took it or refused it: it came through no operator
// API, so no one else can. Who published it the message does not say
// (via "nats", unverified). The entry's id names the message, so a
// redelivery rewrites the same entry. A write that fails is logged: the
// replay stands or falls by the records, not by its entry.
func (r *run) auditByHand(ctx context.Context, id string, refused error) {
	if strings.HasPrefix(r.m.Headers().Get(salvagetype.HeaderMsgID), id+".replay.") {
		// Salvage's own replay (SendReplay's message id): the operator
		// action that sent it is on record already.
		return
	}
	e := salvagetype.AuditEntry{
		ID: fmt.Sprintf("hand-%d-%d", r.chunk.Partition, r.meta.Sequence.Stream), At: r.meta.Timestamp.UTC(),
		Actor:  salvagetype.Actor{Name: "unknown (published by hand)", Via: "nats"},
		Action: salvagetype.AuditReplay, Job: r.chunk.Job, Chunk: r.chunk.Chunk, Envelope: id,
		Detail:  fmt.Sprintf("%s message %d with %s", r.meta.Stream, r.meta.Sequence.Stream, salvagetype.HeaderReplayOf),
		Outcome: salvagetype.AuditOK, DoneAt: time.Now().UTC(),
	}
	if refused != nil {
		e.Outcome, e.Error = salvagetype.AuditRefused, streams.Clip(refused.Error(), 1024)
	}
	subject := streams.AuditSubject(streams.AuditScopeJob, r.chunk.Job, string(e.Action), e.ID)
	if err := r.w.stores.Audit.Write(ctx, subject, e); err != nil {
		r.log.Warn().Err(err).Str("envelope_id", id).Msg("put the replay by hand on record")
	}
}
