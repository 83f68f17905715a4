package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Job statuses. A job's status is derived from its chunks (see Derive);
// only cancellation is set from outside.
const (
	JobRunning    = "running"
	JobDone       = "done"
	JobPartial    = "partial"
	JobIncomplete = "incomplete"
	JobCancelled  = "cancelled"
)

// Budget caps what a job may spend.
type Budget struct {
	Tokens int64   `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
}

// Job is the value of a salvage_jobs key.
type Job struct {
	ID       string         `json:"job_id"`
	Pipeline string         `json:"pipeline"`
	Status   string         `json:"status"`
	Chunks   int            `json:"chunks"`
	TraceID  string         `json:"trace_id"`
	Budget   *Budget        `json:"budget,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
	// SourceSeq is the SALVAGE_JOBS sequence of the message that created
	// the job; a redelivery of that message finds its own job.
	SourceSeq   uint64     `json:"source_seq,omitempty"`
	Summary     Summary    `json:"summary"`
	Explanation []string   `json:"explanation,omitempty"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// Finished reports whether every chunk reached a terminal state.
func (j Job) Finished() bool { return j.Status != JobRunning }

// Summary counts a job's chunks by outcome.
type Summary struct {
	Done         int `json:"done"`
	Cancelled    int `json:"cancelled"`
	DeadLettered int `json:"dead_lettered"`
	Running      int `json:"running"`
	Pending      int `json:"pending"`
	Parked       int `json:"parked"`
	Degraded     int `json:"degraded"`
	// Tier1Retries and Redeliveries add up the chunks' counts, so a
	// finished job's record answers for them without its checkpoints.
	Tier1Retries int `json:"tier1_retries"`
	Redeliveries int `json:"redeliveries"`
}

// Derive computes a job's status from its chunks' checkpoints: running while
// any chunk is not terminal; then cancelled if the job was cancelled, done
// if every chunk is done with no gaps, partial if every chunk is done but
// some skipped optional steps, and incomplete if any chunk ended in an
// envelope. The explanation names the chunks, stages and envelopes behind
// a status other than done.
func Derive(cancelled bool, cps []Checkpoint) (string, Summary, []string) {
	var s Summary
	var why []string
	for _, cp := range cps {
		s.Tier1Retries += cp.Tier1Retries
		s.Redeliveries += int(max(cp.Deliveries, 1) - 1)
		switch {
		case cp.Status == StatusDone:
			s.Done++
			if len(cp.Gaps) > 0 {
				s.Degraded++
				why = append(why, fmt.Sprintf("chunk %d done without %v", cp.Chunk, cp.Gaps))
			}
		case IsCancelled(cp.Status):
			s.Cancelled++
		case cp.Status == StatusDeadLettered:
			s.DeadLettered++
			why = append(why, fmt.Sprintf("chunk %d failed at stage %d: envelope %s", cp.Chunk, cp.Stage, cp.Envelope))
		case cp.Status == StatusHeld || cp.Status == StatusAwaitingApproval:
			s.Parked++
		case cp.Status == StatusRunning:
			s.Running++
		default:
			s.Pending++
		}
	}
	switch {
	case s.Running+s.Pending+s.Parked > 0:
		return JobRunning, s, nil
	case cancelled:
		return JobCancelled, s, nil
	case s.DeadLettered > 0:
		return JobIncomplete, s, why
	case s.Degraded > 0:
		return JobPartial, s, why
	default:
		return JobDone, s, nil
	}
}

// Jobs is the salvage_jobs store.
type Jobs struct {
	b   jetstream.KeyValue
	now func() time.Time
}

// Create stores a new job record. It returns ErrJobExists when the id is
// taken, which a redelivered job message hits by design.
func (s *Jobs) Create(ctx context.Context, j Job) error {
	now := s.now()
	j.CreatedAt, j.UpdatedAt = now, now
	if j.Status == "" {
		j.Status = JobRunning
	}
	_, err := createJSON(ctx, s.b, j.ID, j)
	if isConflict(err) {
		return fmt.Errorf("%w: %s", ErrJobExists, j.ID)
	}
	if err != nil {
		return fmt.Errorf("kv: create job %s: %w", j.ID, err)
	}
	return nil
}

// Get returns a job record, or ErrNotFound.
func (s *Jobs) Get(ctx context.Context, id string) (Job, error) {
	j, _, err := getJSON[Job](ctx, s.b, id)
	return j, err
}

// Cancel marks a job cancelled. It is idempotent; it returns ErrNotFound
// for an unknown job and the job as it now stands.
func (s *Jobs) Cancel(ctx context.Context, id string) (Job, error) {
	j, _, err := mutateJSON(ctx, s.b, id, func(j *Job, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: job %s", ErrNotFound, id)
		}
		if j.CancelledAt != nil {
			return ErrNoChange
		}
		now := s.now()
		j.CancelledAt = &now
		j.UpdatedAt = now
		return nil
	})
	return j, err
}

// Refresh re-derives a job's status from cps and stores it when it
// changed. It returns the job and whether this call moved it to a finished
// status (so exactly one caller publishes the finished event).
func (s *Jobs) Refresh(ctx context.Context, id string, cps []Checkpoint) (Job, bool, error) {
	var finishedNow bool
	j, _, err := mutateJSON(ctx, s.b, id, func(j *Job, exists bool) error {
		finishedNow = false
		if !exists {
			return fmt.Errorf("%w: job %s", ErrNotFound, id)
		}
		status, sum, why := Derive(j.CancelledAt != nil, cps)
		if status == j.Status && sum == j.Summary && slices.Equal(why, j.Explanation) {
			return ErrNoChange
		}
		now := s.now()
		if j.Status == JobRunning && status != JobRunning {
			finishedNow = true
			j.FinishedAt = &now
		}
		j.Status, j.Summary, j.Explanation, j.UpdatedAt = status, sum, why, now
		return nil
	})
	return j, finishedNow, err
}

// List returns every job record, newest first (job ids are ULIDs).
func (s *Jobs) List(ctx context.Context) ([]Job, error) {
	keys, err := s.b.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv: list jobs: %w", err)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	out := make([]Job, 0, len(keys))
	for _, k := range keys {
		j, err := s.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// WatchCancelled calls fn with the id of every job that is or becomes
// cancelled, until ctx ends or the watch fails. It blocks.
func (s *Jobs) WatchCancelled(ctx context.Context, fn func(job string)) error {
	w, err := s.b.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("kv: watch jobs: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("kv: job watch closed")
			}
			if e == nil {
				continue
			}
			var j Job
			if json.Unmarshal(e.Value(), &j) == nil && j.CancelledAt != nil {
				fn(e.Key())
			}
		}
	}
}
