package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// verify settles every call left in flight by asking its external system,
// records the answers in the journal, and reclassifies the envelope. A
// verification that fails leaves its call unknown and fails the step: it
// is tried again within the strategy's attempts, then escalated naming the
// call (invariant 9).
func (o *Orchestrator) verify(ctx context.Context, env salvagetype.Envelope, rec kv.EnvelopeRecord, p *recovery.Plan, cp kv.Checkpoint, log zerolog.Logger) (salvagetype.Category, salvagetype.Strategy, error) {
	rows, err := flow.EpochRows(ctx, o.stores, env)
	if err != nil {
		return "", "", err
	}
	var stats recovery.Stats
	for key, row := range rows {
		if row.Status != salvagetype.CallInitiated && row.Status != salvagetype.CallUnknown {
			continue
		}
		tool, err := p.Tools.Get(row.Tool)
		if err != nil || tool.Effect == nil {
			// A pure read: resuming simply calls it again.
			continue
		}
		var v salvagetype.Verification
		if err := o.exec.Do(ctx, &stats, tool.Name+".verify", func(ctx context.Context) error {
			var err error
			v, err = recovery.VerifyEffect(ctx, tool, row.IdempotencyKey)
			return err
		}); err != nil {
			return "", "", fmt.Errorf("verify %s: %w", key, err)
		}
		next := recovery.Settle(tool, row.JournalRow, v, time.Now().UTC())
		part, err := flow.EnvelopePart(ctx, o.stores, env)
		if err != nil {
			return "", "", err
		}
		if _, err := part.Journal.Put(ctx, next, row.Seq); err != nil {
			return "", "", fmt.Errorf("record verification of %s: %w", key, err)
		}
		rows[key] = kv.StoredRow{JournalRow: next, Seq: row.Seq}
		log.Info().Str("journal_key", key).Bool("applied", v.Applied).Msg("unknown outcome verified")
	}
	// Every outcome is known now: classify as if nothing were in flight.
	f := o.failureOf(cp, rec)
	if f.Class == salvagetype.ClassTimeout {
		f.Class = salvagetype.ClassTransient
	}
	f.FromJournal(rows)
	f.InFlight = false
	category, strategy := f.Classify(o.cfg.Limits)
	return category, strategy, nil
}

// inFlight reports whether a side effect of p that the envelope's epoch
// made has an unknown outcome in the journal as it is now: one verify
// would settle.
func (o *Orchestrator) inFlight(ctx context.Context, env salvagetype.Envelope, p *recovery.Plan) (bool, error) {
	rows, err := flow.EpochRows(ctx, o.stores, env)
	if err != nil {
		return false, err
	}
	for _, r := range rows {
		if r.Status != salvagetype.CallInitiated && r.Status != salvagetype.CallUnknown {
			continue
		}
		if tool, err := p.Tools.Get(r.Tool); err == nil && tool.Effect != nil {
			return true, nil
		}
	}
	return false, nil
}

// failureOf is what the checkpoint and the envelope record say of a
// chunk's failure, before the journal's facts are added.
func (o *Orchestrator) failureOf(cp kv.Checkpoint, rec kv.EnvelopeRecord) recovery.Failure {
	return recovery.Failure{Class: flow.ClassFromCheckpoint(cp), Status: cp.LastErrorStatus, Exhausted: true, Recoveries: cp.Recoveries,
		Cancelled: rec.Stopped == salvagetype.StoppedCancelled}
}

// stopByCancel turns the envelope of a chunk whose job was cancelled into
// the settlement of its effects: the chunk never runs again, so instead of
// resuming it, what it did is verified, compensated or escalated as a
// cancelled chunk's effects are. It returns the new category and strategy.
func (o *Orchestrator) stopByCancel(ctx context.Context, env salvagetype.Envelope, rec kv.EnvelopeRecord, cp kv.Checkpoint) (kv.EnvelopeRecord, error) {
	rows, err := flow.EpochRows(ctx, o.stores, env)
	if err != nil {
		return rec, err
	}
	rec.Stopped = salvagetype.StoppedCancelled
	f := o.failureOf(cp, rec)
	f.FromJournal(rows)
	category, strategy := f.Classify(o.cfg.Limits)
	return o.stores.Envelopes.Mutate(ctx, env.ID, func(r *kv.EnvelopeRecord) error {
		r.Category, r.Strategy, r.Stopped = category, strategy, salvagetype.StoppedCancelled
		r.Notes = append(r.Notes, fmt.Sprintf("job cancelled: the chunk will not run again; its effects are settled (%s/%s)", category, strategy))
		return nil
	})
}

// requeue publishes the chunk again so a worker resumes it from its
// checkpoint (or, after compensation, runs it fresh in a new epoch). The
// envelope stays recovering until the chunk finishes.
func (o *Orchestrator) requeue(ctx context.Context, env salvagetype.Envelope, rec kv.EnvelopeRecord, freshEpoch bool, log zerolog.Logger) (outcome, error) {
	if err := json.Unmarshal(env.Original.Data, new(salvagetype.ChunkMsg)); err != nil {
		return o.finish(ctx, env, rec, salvagetype.EnvelopeEscalated, "original chunk message unreadable: "+err.Error(), nil, log)
	}
	trace.SpanFromContext(ctx).SetAttributes(recovery.AttrStatus.String(string(salvagetype.EnvelopeRecovering)))
	part, err := flow.EnvelopePart(ctx, o.stores, env)
	if err != nil {
		return outcome{delay: retryStrategyDelay}, err
	}
	var delta kv.Delta
	cp, err := part.Checkpoints.Mutate(ctx, env.Job, env.Chunk, func(cp *kv.Checkpoint) error {
		cp.Recoveries++
		cp.Status, cp.ClaimedBy, cp.Envelope = salvagetype.ChunkPending, "", env.ID
		cp.ClearLastError()
		if freshEpoch {
			cp.FreshEpoch()
		}
		delta = cp.Recount()
		return nil
	})
	if err != nil {
		return o.failed(ctx, env, rec, err, log)
	}
	// The chunk is unfinished again: its job is running until it ends.
	if _, err := o.tracker.Apply(ctx, env.Job, env.Chunk, cp.Status, delta); err != nil && !errors.Is(err, kv.ErrNotFound) {
		return o.failed(ctx, env, rec, err, log)
	}
	ack, err := flow.Requeue(ctx, o.js, env, cp.Epoch, env.ID+".recovery."+strconv.Itoa(cp.Recoveries), salvagetype.HeaderRecoveryOf)
	if err != nil {
		return o.failed(ctx, env, rec, err, log)
	}
	if ack.Duplicate {
		// An earlier attempt published it and died before recording so.
		log.Info().Msg("requeue was already published")
	}
	if _, err := o.stores.Envelopes.Mutate(ctx, env.ID, func(r *kv.EnvelopeRecord) error {
		r.Status, r.Requeued, r.RecoveringBy, r.LeaseUntil = salvagetype.EnvelopeRecovering, true, "", time.Time{}
		how := "resumed from its checkpoint"
		if freshEpoch {
			how = fmt.Sprintf("effects compensated; running fresh as epoch %d", cp.Epoch)
		}
		r.Notes = append(r.Notes, fmt.Sprintf("recovery %d: chunk requeued, %s", cp.Recoveries, how))
		return nil
	}); err != nil {
		return outcome{delay: retryStrategyDelay}, err
	}
	log.Info().Int("recoveries", cp.Recoveries).Int("epoch", cp.Epoch).Bool("fresh_epoch", freshEpoch).Msg("chunk requeued")
	return outcome{ack: true}, nil
}

// compensate undoes the reversible effects of the envelope's epoch, as
// the journal has them now, newest first, each
// under its deterministic compensation key, marking each journal row
// COMPENSATED — and, before the first, the checkpoint Compensated. It
// stops at the first failure; permanent says the failure will not go away
// by retrying.
func (o *Orchestrator) compensate(ctx context.Context, env salvagetype.Envelope, p *recovery.Plan, log zerolog.Logger) (bool, error) {
	rows, err := flow.EpochRows(ctx, o.stores, env)
	if err != nil {
		return false, err
	}
	var stats recovery.Stats
	marked := false
	// The journal decides, not the envelope's list: a call in flight when
	// the envelope was written may have been verified applied since.
	_, _, pending, _ := recovery.Rows(rows).Entries()
	for _, key := range pending {
		row, ok := rows[key]
		if !ok || row.Status == salvagetype.CallCompensated || row.Fingerprint == nil {
			continue
		}
		if !marked {
			// Before anything is undone: this epoch can never resume.
			if err := markCompensated(ctx, o.stores, env, env.Job, env.Chunk, env.Checkpoint.Epoch); err != nil {
				return false, err
			}
			marked = true
		}
		tool, err := p.Tools.Get(row.Tool)
		if err == nil && (tool.Effect == nil || !tool.Effect.Reversible) {
			err = fmt.Errorf("%s is not reversible", row.Tool)
		}
		var undo *salvagetype.Tool
		if err == nil {
			undo, err = p.Tools.Get(tool.Effect.Compensation)
		}
		if err != nil {
			return true, err
		}
		in, _ := json.Marshal(salvagetype.CompensationInput{Key: row.IdempotencyKey, Output: row.Output})
		err = o.exec.Do(ctx, &stats, undo.Name, func(ctx context.Context) error {
			_, err := recovery.Invoke(ctx, undo, salvagetype.ToolCall{Job: row.Job, Chunk: row.Chunk, Stage: row.Stage, Epoch: row.Epoch, Agent: row.Agent, Seq: row.JournalRow.Seq,
				IdempotencyKey: row.Fingerprint.CompensationKey, Input: in, TraceID: env.TraceID})
			return err
		})
		if err != nil {
			log.Warn().Err(err).Str("journal_key", key).Str("tool", undo.Name).Msg("compensation failed")
			return recovery.ClassOf(err).Permanent(), fmt.Errorf("%s of %s: %w", undo.Name, key, err)
		}
		next := row.JournalRow
		next.Status = salvagetype.CallCompensated
		part, err := flow.EnvelopePart(ctx, o.stores, env)
		if err != nil {
			return false, err
		}
		if _, err := part.Journal.Put(ctx, next, row.Seq); err != nil {
			return false, fmt.Errorf("record compensation of %s: %w", key, err)
		}
		if _, err := o.stores.Envelopes.Mutate(ctx, env.ID, func(r *kv.EnvelopeRecord) error {
			r.Notes = append(r.Notes, fmt.Sprintf("compensated %s %s with %s", row.Tool, row.Fingerprint.ResourceID, undo.Name))
			return nil
		}); err != nil {
			return false, err
		}
		// The chunk's timeline shows it too; losing this line to a crash
		// loses no state (the journal row says COMPENSATED). A chunk a
		// worker holds, or one in a later epoch, is left alone: any write
		// would fence its holder out.
		if _, err := part.Checkpoints.Mutate(ctx, env.Job, env.Chunk, func(cp *kv.Checkpoint) error {
			if cp.ClaimedBy != "" || cp.Epoch != env.Checkpoint.Epoch {
				return kv.ErrNoChange
			}
			cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventCompensated, Stage: row.Stage,
				Detail: strings.TrimSpace(fmt.Sprintf("%s undid %s %s", undo.Name, row.Tool, row.Fingerprint.ResourceID))})
			return nil
		}); err != nil {
			log.Warn().Err(err).Str("journal_key", key).Msg("record the compensation in the chunk's timeline")
		}
		log.Info().Str("journal_key", key).Str("tool", undo.Name).Str("resource_id", row.Fingerprint.ResourceID).Msg("effect compensated")
	}
	return false, nil
}

// markCompensated records, before anything of epoch is undone, that the
// chunk can no longer resume in it. A chunk already in a later epoch is
// left alone.
func markCompensated(ctx context.Context, st *kv.Stores, env salvagetype.Envelope, job string, chunk, epoch int) error {
	part, err := flow.EnvelopePart(ctx, st, env)
	if err != nil {
		return err
	}
	_, err = part.Checkpoints.Mutate(ctx, job, chunk, func(cp *kv.Checkpoint) error {
		if cp.Compensated || cp.Epoch != epoch {
			return kv.ErrNoChange
		}
		cp.Compensated = true
		return nil
	})
	return err
}

// standing lists every effect of the envelope's epoch that may stand: the
// side effects that took place and were not compensated, and those whose
// outcome nobody knows (in flight, unverified). An escalation names each
// of them, so a person sees what is left (invariant 9).
func (o *Orchestrator) standing(ctx context.Context, env salvagetype.Envelope) []salvagetype.LeftEffect {
	rows, err := flow.EpochRows(ctx, o.stores, env)
	if err != nil {
		return []salvagetype.LeftEffect{{Tool: "journal unreadable: " + err.Error(), Unknown: true}}
	}
	return recovery.Rows(rows).Standing()
}
