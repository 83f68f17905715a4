package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// ReplayEnvelope reads the envelope of rec as published and checks its
// chunk message can be sent again.
func ReplayEnvelope(ctx context.Context, js jetstream.JetStream, st *kv.Stores, rec kv.EnvelopeRecord) (salvagetype.Envelope, error) {
	env, err := ReadEnvelope(ctx, js, st, rec)
	if err != nil {
		return env, err
	}
	if err := json.Unmarshal(env.Original.Data, new(salvagetype.ChunkMsg)); err != nil {
		return env, fmt.Errorf("envelope %s: original chunk unreadable: %w", rec.ID, err)
	}
	return env, nil
}

// FinishReplay completes a replay marked on rec (Requeued) whose chunk is
// still dead-lettered under it: the process that marked it died before it
// sent the chunk back. A chunk already on its way is left alone. Replay
// calls it when asked again; the sweeper calls it for one nobody asks.
func FinishReplay(ctx context.Context, js jetstream.JetStream, st *kv.Stores, rec kv.EnvelopeRecord) error {
	part, err := RecordPart(ctx, st, rec)
	if err != nil {
		return err
	}
	cp, _, err := part.Checkpoints.Get(ctx, rec.Job, rec.Chunk)
	if err != nil || cp.Envelope != rec.ID || cp.Status != salvagetype.ChunkDeadLettered {
		return nil // on its way (or gone): nothing was lost
	}
	env, err := ReplayEnvelope(ctx, js, st, rec)
	if err != nil {
		return err
	}
	fresh, err := ReplayPlan(ctx, st, rec, env.Checkpoint.Epoch, time.Now(), true)
	if err != nil {
		return err
	}
	return SendReplay(ctx, js, st, rec, env, fresh)
}

// SendReplay sends the chunk of rec, whose envelope is marked replayed,
// back to work: its checkpoint pending under the envelope (in a new epoch
// when fresh), counted unfinished in its job, its message published under
// an id derived from the replay's number, so sending it twice publishes
// it once. A crash before the checkpoint is repaired by finishReplay, one
// before the publish by the sweeper's requeueLost.
func SendReplay(ctx context.Context, js jetstream.JetStream, st *kv.Stores, rec kv.EnvelopeRecord, env salvagetype.Envelope, fresh bool) error {
	part, err := RecordPart(ctx, st, rec)
	if err != nil {
		return err
	}
	var delta kv.Delta
	cp, err := part.Checkpoints.Mutate(ctx, rec.Job, rec.Chunk, func(cp *kv.Checkpoint) error {
		cp.Status, cp.ClaimedBy, cp.Envelope = salvagetype.ChunkPending, "", rec.ID
		cp.ClearLastError()
		if fresh && cp.Epoch == env.Checkpoint.Epoch {
			cp.FreshEpoch()
		}
		delta = cp.Recount()
		return nil
	})
	if err != nil {
		return err
	}
	t := Tracker{JS: js, Stores: st}
	if _, err := t.Apply(ctx, rec.Job, rec.Chunk, cp.Status, delta); err != nil && !errors.Is(err, kv.ErrNotFound) {
		return err
	}
	_, err = Requeue(ctx, js, env, cp.Epoch, rec.ID+".replay."+strconv.Itoa(rec.Replays), salvagetype.HeaderReplayOf)
	return err
}

// Replayable refuses a replay the record alone rules out: settling a
// cancelled chunk, superseded, or under a live recovery lease; and, when
// final is set (a replay asked of Salvage, not published by hand),
// resolved (ErrAlreadyResolved) or superseded (ErrSuperseded).
func Replayable(r kv.EnvelopeRecord, now time.Time, final bool) error {
	switch {
	case final && r.Status == salvagetype.EnvelopeResolved:
		return fmt.Errorf("%w: %s", salvagetype.ErrAlreadyResolved, r.ID)
	case final && r.Status == salvagetype.EnvelopeSuperseded:
		return fmt.Errorf("%w: %s by %s", salvagetype.ErrSuperseded, r.ID, r.SupersededBy)
	case r.Status == salvagetype.EnvelopeSuperseded:
		// By hand too: the chunk failed again since, and the envelope
		// that superseded this one carries it (its recovery may be
		// running); a replay of this one would run beside it.
		return fmt.Errorf("%w: envelope %s was superseded by %s (the chunk failed again since): replay that one", salvagetype.ErrReplayRefused, r.ID, r.SupersededBy)
	case r.Stopped != "":
		return fmt.Errorf("%w: envelope %s settles the effects of a chunk whose job was cancelled; it never runs again", salvagetype.ErrReplayRefused, r.ID)
	case r.Status == salvagetype.EnvelopeRecovering && !r.Requeued && r.RecoveringBy != "" && now.Before(r.LeaseUntil):
		return fmt.Errorf("%w: orchestrator %s is running %s on envelope %s until %s; replay after it ends", salvagetype.ErrReplayRefused,
			r.RecoveringBy, r.Strategy, r.ID, r.LeaseUntil.UTC().Format(time.RFC3339))
	}
	return nil
}

// ReplayPlan decides how a replay of rec's chunk runs, from the records:
// fresh (a new epoch) when the epoch it failed in was compensated and
// nothing of it stands, from its checkpoint when nothing was compensated,
// and refused (ErrReplayRefused) when its job was cancelled or compensated
// effects sit beside effects that still stand. epoch is the envelope's
// epoch; -1 takes the checkpoint's. It reads the job, the checkpoint and,
// when something was compensated, the epoch's journal: O(1) records and
// one chunk's rows. final refuses a resolved or superseded envelope (see
// replayable).
func ReplayPlan(ctx context.Context, st *kv.Stores, rec kv.EnvelopeRecord, epoch int, now time.Time, final bool) (bool, error) {
	if err := Replayable(rec, now, final); err != nil {
		return false, err
	}
	job, err := st.Jobs.Get(ctx, rec.Job)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return false, err
	}
	if job.CancelledAt != nil {
		return false, fmt.Errorf("%w: job %s was cancelled (%s); its chunks do not run again", salvagetype.ErrReplayRefused, rec.Job, job.StopReason())
	}
	part, err := RecordPart(ctx, st, rec)
	if err != nil {
		return false, err
	}
	cp, _, err := part.Checkpoints.Get(ctx, rec.Job, rec.Chunk)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return false, err
	}
	if epoch < 0 {
		epoch = cp.Epoch
	}
	if cp.Epoch != epoch {
		// The chunk already moved to a later epoch: it resumes there.
		return false, nil
	}
	rows, err := part.Journal.Load(ctx, rec.Job, rec.Chunk, epoch)
	if err != nil {
		return false, err
	}
	undone := 0
	for _, r := range rows {
		if r.Status == salvagetype.CallCompensated {
			undone++
		}
	}
	if undone == 0 && !cp.Compensated {
		return false, nil
	}
	if left := recovery.Rows(rows).Standing(); len(left) > 0 {
		if undone == 0 {
			// A compensation began (the checkpoint says so before the
			// first) and undid nothing it could confirm.
			return false, fmt.Errorf("%w: a compensation of chunk %d of job %s began and undid nothing it could confirm, so whether its %d effects stand (%s) is for a person to check: resuming could finish on an undone effect, a fresh run would repeat them; resolve it by hand",
				salvagetype.ErrReplayRefused, rec.Chunk, rec.Job, len(left), left[0])
		}
		return false, fmt.Errorf("%w: chunk %d of job %s had %d effects compensated while %d stand (%s): resuming would finish on undone effects and a fresh run would repeat these; resolve it by hand",
			salvagetype.ErrReplayRefused, rec.Chunk, rec.Job, undone, len(left), left[0])
	}
	return true, nil
}

// ByHandReplay checks a replay an operator published by hand
// (Salvage-Replay-Of on a chunk message) against the records: the
// envelope must be this chunk's, and the plan must allow it. It returns
// the envelope's record, whether the chunk runs fresh, and why it may not
// run (ErrReplayRefused, or errForged for an envelope of another chunk).
func ByHandReplay(ctx context.Context, st *kv.Stores, id string, chunk salvagetype.ChunkMsg) (kv.EnvelopeRecord, bool, error) {
	rec, _, err := st.Envelopes.Get(ctx, id)
	if errors.Is(err, kv.ErrNotFound) {
		return rec, false, fmt.Errorf("%w: no envelope %s", ErrForged, id)
	}
	if err != nil {
		return rec, false, err
	}
	if rec.Job != chunk.Job || rec.Chunk != chunk.Chunk {
		return rec, false, fmt.Errorf("%w: envelope %s belongs to chunk %d of job %s, not chunk %d of job %s", ErrForged, id, rec.Chunk, rec.Job, chunk.Chunk, chunk.Job)
	}
	if rec.Requeued {
		// Replayed through the API, or a recorded replay's chunk coming
		// back from a hold: planned already.
		return rec, false, nil
	}
	// Published by hand: what the records allow decides, whatever became
	// of the envelope since (a person may resolve it while its chunk is
	// parked, and the chunk still finishes).
	fresh, err := ReplayPlan(ctx, st, rec, -1, time.Now(), false)
	return rec, fresh, err
}

// ErrForged marks a chunk message whose replay or recovery header names
// an envelope that is not its chunk's.
var ErrForged = errors.New("envelope of another chunk")
