package consumers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/streams"
)

// verify settles every call left in flight by asking its external system,
// records the answers in the journal, and reclassifies the envelope.
func (o *Orchestrator) verify(ctx context.Context, env recovery.Envelope, p *recovery.Pipeline, cp kv.Checkpoint, log zerolog.Logger) (string, string, error) {
	rows, err := o.stores.Journal.Load(ctx, env.Job, env.Chunk, env.Checkpoint.Epoch)
	if err != nil {
		return "", "", err
	}
	var stats recovery.Stats
	for key, row := range rows {
		if row.Status != kv.CallInitiated && row.Status != kv.CallUnknown {
			continue
		}
		tool, err := p.Tools.Get(row.Tool)
		if err != nil || tool.Effect == nil {
			// A pure read: resuming simply calls it again.
			continue
		}
		var v recovery.Verification
		if err := o.exec.Do(ctx, &stats, tool.Name+".verify", func(ctx context.Context) error {
			var err error
			v, err = tool.VerifyEffect(ctx, row.IdempotencyKey)
			return err
		}); err != nil {
			return "", "", fmt.Errorf("verify %s: %w", key, err)
		}
		next := row.JournalRow
		next.Verified, next.FinishedAt = true, time.Now().UTC()
		if v.Applied {
			next.Status, next.Output = kv.CallSucceeded, v.Output
			next.Fingerprint = tool.Fingerprint(row.IdempotencyKey, v.ResourceID)
		} else {
			next.Status, next.Error, next.ErrorClass = kv.CallFailed, "verified: the call did not take effect", recovery.ClassTimeout.String()
		}
		if _, err := o.stores.Journal.Put(ctx, next, row.Seq); err != nil {
			return "", "", fmt.Errorf("record verification of %s: %w", key, err)
		}
		rows[key] = kv.StoredRow{JournalRow: next, Seq: row.Seq}
		log.Info().Str("journal_key", key).Bool("applied", v.Applied).Msg("unknown outcome verified")
	}
	// Every outcome is known now: classify as if nothing were in flight.
	f := recovery.Failure{Class: classFromCheckpoint(cp), Status: cp.LastErrorStatus, Exhausted: true, Recoveries: cp.Recoveries}
	if f.Class == recovery.ClassTimeout {
		f.Class = recovery.ClassTransient
	}
	f.FromJournal(rows)
	f.InFlight = false
	category, strategy := recovery.Classify(f, o.cfg.Limits)
	return category, strategy, nil
}

// requeue publishes the chunk again so a worker resumes it from its
// checkpoint (or, after compensation, runs it fresh in a new epoch). The
// envelope stays recovering until the chunk finishes.
func (o *Orchestrator) requeue(ctx context.Context, env recovery.Envelope, rec kv.EnvelopeRecord, freshEpoch bool, log zerolog.Logger) (outcome, error) {
	if err := json.Unmarshal(env.Original.Data, new(streams.ChunkMsg)); err != nil {
		return o.finish(ctx, env, rec, kv.EnvelopeEscalated, "original chunk message unreadable: "+err.Error(), nil, log)
	}
	trace.SpanFromContext(ctx).SetAttributes(recovery.AttrStatus.String(kv.EnvelopeRecovering))
	var delta kv.Delta
	cp, err := o.stores.Checkpoints.Mutate(ctx, env.Job, env.Chunk, func(cp *kv.Checkpoint) error {
		cp.Recoveries++
		cp.Status, cp.ClaimedBy, cp.Envelope = kv.StatusPending, "", env.ID
		cp.ClearLastError()
		if freshEpoch {
			cp.Epoch++
			cp.Stage, cp.Outputs, cp.Gaps, cp.Snapshots, cp.Approvals = 1, nil, nil, nil, nil
		}
		delta = cp.Recount()
		return nil
	})
	if err != nil {
		return o.failed(ctx, env, rec, err, log)
	}
	// The chunk is unfinished again: its job is running until it ends.
	if _, err := o.tracker.apply(ctx, env.Job, env.Chunk, cp.Status, delta); err != nil && !errors.Is(err, kv.ErrNotFound) {
		return o.failed(ctx, env, rec, err, log)
	}
	ack, err := requeue(ctx, o.js, env, cp.Epoch, env.ID+".recovery."+strconv.Itoa(cp.Recoveries), streams.HeaderRecoveryOf)
	if err != nil {
		return o.failed(ctx, env, rec, err, log)
	}
	if ack.Duplicate {
		// An earlier attempt published it and died before recording so.
		log.Info().Msg("requeue was already published")
	}
	if _, err := o.stores.Envelopes.Mutate(ctx, env.ID, func(r *kv.EnvelopeRecord) error {
		r.Status, r.Requeued, r.RecoveringBy, r.LeaseUntil = kv.EnvelopeRecovering, true, "", time.Time{}
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

// compensate undoes the envelope's reversible effects, newest first, each
// under its deterministic compensation key, marking each journal row
// COMPENSATED. It stops at the first failure and returns the effects still
// standing; permanent says the failure will not go away by retrying.
func (o *Orchestrator) compensate(ctx context.Context, env recovery.Envelope, p *recovery.Pipeline, log zerolog.Logger) ([]kv.LeftEffect, bool, error) {
	rows, err := o.stores.Journal.Load(ctx, env.Job, env.Chunk, env.Checkpoint.Epoch)
	if err != nil {
		return nil, false, err
	}
	var stats recovery.Stats
	for i, key := range env.PendingCompensations {
		row, ok := rows[key]
		if !ok || row.Status == kv.CallCompensated || row.Fingerprint == nil {
			continue
		}
		tool, err := p.Tools.Get(row.Tool)
		if err == nil && (tool.Effect == nil || !tool.Effect.Reversible) {
			err = fmt.Errorf("%s is not reversible", row.Tool)
		}
		var undo *recovery.Tool
		if err == nil {
			undo, err = p.Tools.Get(tool.Effect.Compensation)
		}
		if err != nil {
			return describe(rows, env.PendingCompensations[i:]), true, err
		}
		in, _ := json.Marshal(recovery.CompensationInput{Key: row.IdempotencyKey, Output: row.Output})
		err = o.exec.Do(ctx, &stats, undo.Name, func(ctx context.Context) error {
			_, err := undo.Invoke(ctx, recovery.ToolCall{Job: row.Job, Chunk: row.Chunk, Stage: row.Stage, Epoch: row.Epoch, Agent: row.Agent, Seq: row.JournalRow.Seq,
				IdempotencyKey: row.Fingerprint.CompensationKey, Input: in, TraceID: env.TraceID})
			return err
		})
		if err != nil {
			log.Warn().Err(err).Str("journal_key", key).Str("tool", undo.Name).Msg("compensation failed")
			return describe(rows, env.PendingCompensations[i:]), recovery.ClassOf(err).Permanent(), fmt.Errorf("%s of %s: %w", undo.Name, key, err)
		}
		next := row.JournalRow
		next.Status = kv.CallCompensated
		if _, err := o.stores.Journal.Put(ctx, next, row.Seq); err != nil {
			return describe(rows, env.PendingCompensations[i:]), false, fmt.Errorf("record compensation of %s: %w", key, err)
		}
		if _, err := o.stores.Envelopes.Mutate(ctx, env.ID, func(r *kv.EnvelopeRecord) error {
			r.Notes = append(r.Notes, fmt.Sprintf("compensated %s %s with %s", row.Tool, row.Fingerprint.ResourceID, undo.Name))
			return nil
		}); err != nil {
			return describe(rows, env.PendingCompensations[i+1:]), false, err
		}
		log.Info().Str("journal_key", key).Str("tool", undo.Name).Str("resource_id", row.Fingerprint.ResourceID).Msg("effect compensated")
	}
	return nil, false, nil
}

// irreversible lists the effects of the envelope's epoch nobody can undo.
func (o *Orchestrator) irreversible(ctx context.Context, env recovery.Envelope) []kv.LeftEffect {
	rows, err := o.stores.Journal.Load(ctx, env.Job, env.Chunk, env.Checkpoint.Epoch)
	if err != nil {
		return []kv.LeftEffect{{Tool: "journal unreadable: " + err.Error()}}
	}
	var keys []string
	for _, r := range recovery.SortedRows(rows) {
		if r.Status == kv.CallSucceeded && r.Fingerprint != nil && !r.Fingerprint.Reversible {
			keys = append(keys, r.Key)
		}
	}
	return describe(rows, keys)
}

// describe names effects for a human: tool, system, resource, journal key.
func describe(rows map[string]kv.StoredRow, keys []string) []kv.LeftEffect {
	out := make([]kv.LeftEffect, 0, len(keys))
	for _, k := range keys {
		r := rows[k]
		l := kv.LeftEffect{Tool: r.Tool, System: r.System, JournalKey: k}
		if r.Fingerprint != nil {
			l.ResourceID = r.Fingerprint.ResourceID
		}
		out = append(out, l)
	}
	return out
}
