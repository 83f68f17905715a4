package flow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// stoppedListMax bounds the chunks a BUDGET_EXCEEDED envelope lists (its
// error says how many stopped), so the envelope stays far below the
// server's max_payload whatever a pipeline's MaxChunks.
const stoppedListMax = 10_000

// stopForBudget stops a job whose counted spend passed its budget: its
// record says so (BudgetExceededAt, cancelled for "budget exceeded"), so
// running chunks stop at their next stage as cancelled-at-stage-N and the
// rest are cancelled as by Cancel. What is done stays done. The one
// BUDGET_EXCEEDED envelope follows once the job has settled
// (budgetEnvelope). It returns the job as it then stands; a crash part-way
// is finished by the sweeper, as a cancel is.
func (t Tracker) stopForBudget(ctx context.Context, job kv.Job) (kv.Job, error) {
	j, changed, err := t.Stores.Jobs.ExceedBudget(ctx, job.ID)
	if err != nil || !changed {
		return j, err
	}
	return t.CancelRest(ctx, j, salvagetype.CancelReasonBudget)
}

// BudgetEnvelope writes the one BUDGET_EXCEEDED envelope of a job its
// budget stopped, once the job has settled: it lists the chunks that were
// cancelled (StoppedChunks) and escalates to a person. Its id is recorded
// in the job first (the guard), the DLQ message is published under that
// id (a repeat is deduplicated), then its record is written: each step
// repeat-safe, so the sweeper that calls it again after a crash finishes
// the same envelope. A job with nothing left to stop gets none.
func (t Tracker) BudgetEnvelope(ctx context.Context, job kv.Job) error {
	if job.BudgetExceededAt == nil || job.BudgetEnvelope == "-" || job.Status == salvagetype.JobRunning {
		return nil
	}
	if job.BudgetEnvelope != "" {
		if _, _, err := t.Stores.Envelopes.Get(ctx, job.BudgetEnvelope); err == nil {
			return nil
		} else if !errors.Is(err, kv.ErrNotFound) {
			return err
		}
	}
	part, err := t.Stores.PartOf(ctx, job)
	if err != nil {
		return err
	}
	cps, err := part.Checkpoints.ForJob(ctx, job.ID, job.Chunks)
	if err != nil {
		return err
	}
	var stopped []int
	var first kv.Checkpoint
	n := 0
	for _, cp := range job.View(cps) {
		if !cp.Status.IsCancelled() {
			continue
		}
		if n == 0 {
			first = cp
		}
		n++
		if len(stopped) < stoppedListMax {
			stopped = append(stopped, cp.Chunk)
		}
	}
	if n == 0 {
		_, err := t.Stores.Jobs.SetBudgetEnvelope(ctx, job.ID, "-")
		return err
	}
	id, err := t.Stores.Jobs.SetBudgetEnvelope(ctx, job.ID, cmp.Or(job.BudgetEnvelope, ulid.Make().String()))
	if err != nil {
		return err
	}
	if _, _, err := t.Stores.Envelopes.Get(ctx, id); err == nil {
		return nil
	} else if !errors.Is(err, kv.ErrNotFound) {
		return err
	}
	spent := fmt.Sprintf("%d tokens", job.Summary.PromptTokens+job.Summary.CompletionTokens)
	if job.Summary.CostMicros > 0 {
		spent += fmt.Sprintf(", cost %.6f", float64(job.Summary.CostMicros)/1e6)
	}
	limit := ""
	if b := job.Budget; b != nil {
		limit = fmt.Sprintf(" (budget: %d tokens, cost %g)", b.Tokens, b.Cost)
	}
	subject := job.Ref().Chunk(first.Chunk).Subject()
	data, _ := json.Marshal(salvagetype.ChunkMsg{Job: job.ID, Chunk: first.Chunk, Pipeline: job.Pipeline, Epoch: first.Epoch, TraceID: job.TraceID, Partition: job.Partition})
	env := salvagetype.Envelope{
		ID: id, Job: job.ID, Chunk: first.Chunk, Pipeline: job.Pipeline, TraceID: job.TraceID,
		Category: salvagetype.CategoryBudgetExceeded, Strategy: salvagetype.StrategyEscalate,
		Error:         fmt.Sprintf("budget exceeded: spent %s%s; %d chunks stopped", spent, limit, n),
		StoppedChunks: stopped, FailedStage: max(first.Stage, 1), Recoveries: first.Recoveries,
		CompletedEntries: []string{}, InFlightEntries: []string{}, PendingCompensations: []string{},
		Checkpoint: salvagetype.EnvelopeCheckpoint{Stage: max(first.Stage, 1), Status: first.Status, Epoch: first.Epoch},
		Original:   salvagetype.OriginalMessage{Stream: streams.ChunksStream(job.Partition), Subject: subject, Data: data},
		CreatedAt:  time.Now().UTC(),
	}
	ack, err := publishEnvelope(ctx, t.JS, t.Stores, env)
	if err != nil {
		return err
	}
	return t.Stores.Envelopes.Put(ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: id, Job: job.ID, Chunk: first.Chunk, Category: env.Category, Strategy: env.Strategy, Status: salvagetype.EnvelopeOpen, Subject: subject, DLQSeq: ack.Sequence, TraceID: job.TraceID}})
}
