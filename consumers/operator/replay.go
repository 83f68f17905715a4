package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// Replay puts an envelope's chunk back on SALVAGE_CHUNKS, as an operator
// would by hand (`nats pub <original.subject> '<original.data>' -H
// Salvage-Replay-Of:<id>`). The chunk resumes from its journal, so no side
// effect repeats; the envelope is resolved when the chunk finishes. A
// replay already in flight is not published again. A chunk whose effects
// were all compensated runs fresh in a new epoch (new idempotency keys,
// every stage again). A replay that cannot be honoured is refused with
// ErrReplayRefused (see there), nothing changed.
func (o *Operator) Replay(ctx context.Context, id, by string) (kv.EnvelopeRecord, error) {
	rec, err := o.record(ctx, id)
	if err != nil {
		return rec, err
	}
	if rec.Requeued && rec.Status == salvagetype.EnvelopeRecovering {
		// A replay or recovery is already running it — or a replay died
		// between marking the envelope and sending the chunk: finished.
		return rec, flow.FinishReplay(ctx, o.js, o.stores, rec)
	}
	env, err := flow.ReplayEnvelope(ctx, o.js, o.stores, rec)
	if err != nil {
		return rec, err
	}
	fresh, err := flow.ReplayPlan(ctx, o.stores, rec, env.Checkpoint.Epoch, time.Now(), true)
	if err != nil {
		return rec, err
	}
	rec, err = o.stores.Envelopes.Mutate(ctx, id, func(r *kv.EnvelopeRecord) error {
		if err := flow.Replayable(*r, time.Now(), true); err != nil {
			return err
		}
		if r.Requeued {
			return kv.ErrNoChange
		}
		r.Replays++
		r.Status, r.Requeued, r.Human = salvagetype.EnvelopeRecovering, true, true
		how := "from its checkpoint"
		if fresh {
			how = "fresh in a new epoch: its effects were compensated"
		}
		r.Notes = append(r.Notes, fmt.Sprintf("replayed by %s (replay %d), %s", by, r.Replays, how))
		return nil
	})
	if err != nil {
		return rec, err
	}
	return rec, flow.SendReplay(ctx, o.js, o.stores, rec, env, fresh)
}

// CheckReplay reports whether envelope id would be replayed, without
// changing anything: nil, or the error Replay would return
// (ErrAlreadyResolved, ErrSuperseded, ErrReplayRefused, …). A bulk dry run
// counts by it.
func (o *Operator) CheckReplay(ctx context.Context, id string) error {
	_, err := o.PlanReplay(ctx, id)
	return err
}

// PlanReplay is how a replay of envelope id would run, without changing
// anything: fresh (a new epoch, whose side effects run again) or from
// its checkpoint; or the error Replay would return.
func (o *Operator) PlanReplay(ctx context.Context, id string) (fresh bool, err error) {
	rec, err := o.record(ctx, id)
	if err != nil {
		return false, err
	}
	return flow.ReplayPlan(ctx, o.stores, rec, -1, time.Now(), true)
}
