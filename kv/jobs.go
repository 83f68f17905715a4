package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Job is the value of a salvage_jobs key. It exists only once every chunk
// of the job is published (to SALVAGE_CHUNKS, or SALVAGE_BACKLOG beyond
// the job's window).
type Job struct {
	// Job is the record as users see it (salvage.Job): id, pipeline,
	// status, counts, tenant, window, partition, budget, cancel and
	// retention. Its JSON fields are the record's own, flattened.
	salvagetype.Job
	// SourceSeq is the SALVAGE_JOBS sequence of the message that created
	// the job; a redelivery of that message finds its own job. The
	// job's InputHash (streams.InputHash of its pipeline and input) says
	// what the id stands for: a later submission under the id with the
	// same hash is the same job, with another it is refused.
	SourceSeq uint64 `json:"source_seq,omitempty"`
	// Finishes counts the times the job finished: a recovery that
	// re-runs a dead-lettered chunk makes it run, and finish, again.
	Finishes int `json:"finishes,omitempty"`
	// Unannounced is the finish (a value of Finishes) whose announcement
	// is still owed: the finished event retention works from, the job's
	// span, the purge of what is left of its backlog. The write that
	// finishes a job sets it and the announcement clears it; set on a
	// job idle for a while, a crash came in between, and the
	// dead-letterer's repair sweep makes the announcement.
	Unannounced int `json:"unannounced,omitempty"`
	// IndexSeq is the sequence of the job's entry in the job index.
	IndexSeq uint64 `json:"index_seq,omitempty"`
	// TenantIndexSeq is the sequence of its entry in its tenant's job
	// index (indexTenantJobs), for a job with a Tenant.
	TenantIndexSeq uint64 `json:"tenant_index_seq,omitempty"`
	// MetaIndexSeqs are the sequences of its entries in the indexes of
	// its searchable metadata pairs (salvagetype.SearchableMeta), in
	// that order.
	MetaIndexSeqs []uint64 `json:"meta_index_seqs,omitempty"`
	// AttentionIndexed is set on a job created since chunks needing
	// attention are indexed (attention.go): its failing chunks are read
	// from the index, an older job's from every checkpoint.
	AttentionIndexed bool `json:"attention_indexed,omitempty"`
}

// Finished reports whether every chunk reached a terminal state.
func (j Job) Finished() bool { return j.Status != salvagetype.JobRunning }

// AnnouncementOwed reports whether the job's current finish is not yet
// announced (see Unannounced).
func (j Job) AnnouncementOwed() bool {
	return j.Finished() && j.Unannounced > 0 && j.Unannounced == j.Finishes
}

// View returns cps (the job's checkpoints) as operators see them: without
// agent outputs and snapshots, and, when the job was cancelled, its
// pending chunks (never started; their messages were purged) reading
// cancelled-at-stage-0.
func (j Job) View(cps []Checkpoint) []Checkpoint {
	for i := range cps {
		cps[i].Outputs, cps[i].Snapshots = nil, nil
		if j.CancelledAt != nil && cps[i].Status == salvagetype.ChunkPending {
			cps[i].Status = salvagetype.CancelledAtStage(0)
		}
	}
	return cps
}

// explanationMax bounds Job.Explanation; explanationReasonMax the
// reason each failure's line quotes.
const (
	explanationMax       = 20
	explanationReasonMax = 200
)

// explainer builds a job's explanation: failures first, then cancelled
// chunks that settled effects, then one line per set of skipped optional
// steps (a thousand chunks done without the same step are one line, not
// a thousand), at most explanationMax lines with "and N more" for the
// rest. It keeps at most explanationMax lines of each kind and a few
// chunk numbers per set, whatever the job's size.
type explainer struct {
	failed, cancelled []string
	dropped           int
	gaps              []gapSet
}

// gapSet is the chunks done without one set of optional steps.
type gapSet struct {
	gaps   string
	count  int
	chunks []int
}

// gapChunksShown is how many chunk numbers one gap line names.
const gapChunksShown = 8

func (e *explainer) add(list *[]string, line string) {
	if len(*list) < explanationMax {
		*list = append(*list, line)
		return
	}
	e.dropped++
}

func (e *explainer) degraded(chunk int, gaps string) {
	for i := range e.gaps {
		if g := &e.gaps[i]; g.gaps == gaps {
			g.count++
			if len(g.chunks) < gapChunksShown {
				g.chunks = append(g.chunks, chunk)
			}
			return
		}
	}
	if len(e.gaps) >= explanationMax {
		e.dropped++
		return
	}
	e.gaps = append(e.gaps, gapSet{gaps: gaps, count: 1, chunks: []int{chunk}})
}

func (e *explainer) lines() []string {
	all := make([]string, 0, len(e.failed)+len(e.cancelled)+len(e.gaps))
	all = append(all, e.failed...)
	all = append(all, e.cancelled...)
	for _, g := range e.gaps {
		if g.count == 1 {
			all = append(all, fmt.Sprintf("chunk %d done without %s", g.chunks[0], g.gaps))
			continue
		}
		nums := strings.Trim(fmt.Sprint(g.chunks), "[]")
		nums = strings.ReplaceAll(nums, " ", ", ")
		if g.count > len(g.chunks) {
			nums += ", …"
		}
		all = append(all, fmt.Sprintf("%d chunks done without %s: %s", g.count, g.gaps, nums))
	}
	more := e.dropped
	if len(all) > explanationMax {
		more += len(all) - explanationMax
		all = all[:explanationMax]
	}
	if more > 0 {
		all = append(all, fmt.Sprintf("and %d more", more))
	}
	if len(all) == 0 {
		return nil
	}
	return all
}

// applyDelta adds one chunk's transition to s. Counts never go below
// zero: a transition whose earlier half a crash lost is repaired by
// derive.
func applyDelta(s *salvagetype.Summary, d Delta) {
	countOutcome(s, d.From, -1)
	countOutcome(s, d.To, 1)
	s.Degraded = max(s.Degraded+d.Degraded, 0)
	s.DeadLetters += d.DeadLetters
	s.Tier1Retries += d.Tier1
	s.Redeliveries += d.Redeliveries
	s.PromptTokens += d.PromptTokens
	s.CompletionTokens += d.CompletionTokens
	s.CostMicros += d.CostMicros
}

func countOutcome(s *salvagetype.Summary, outcome salvagetype.ChunkStatus, n int) {
	switch outcome {
	case salvagetype.ChunkDone:
		s.Done = max(s.Done+n, 0)
	case salvagetype.OutcomeCancelled:
		s.Cancelled = max(s.Cancelled+n, 0)
	case salvagetype.ChunkDeadLettered:
		s.DeadLettered = max(s.DeadLettered+n, 0)
	}
}

// derive computes a job's status and counts from every chunk's checkpoint
// (chunk i at cps[i-1]; a missing one is StatusPending): running while any
// chunk is not terminal; then cancelled if the job was cancelled, done if
// every chunk is done with no gaps, partial if every chunk is done but
// some skipped optional steps, and incomplete if any chunk ended in an
// envelope. A cancelled job's pending chunks count as cancelled at stage
// 0: their messages were purged. The explanation (at most ExplanationMax
// lines) names the chunks, stages and envelopes behind a status other than
// done. It reads no store: it is the repair path's arithmetic, run once
// per job and when a crash may have lost an update, never per chunk.
func derive(cancelled bool, cps []Checkpoint) (salvagetype.JobStatus, salvagetype.Summary, []string) {
	d := derivation{cancelled: cancelled}
	d.add(cps)
	return d.result()
}

// derivation is derive over checkpoints given a page at a time: its state
// is bounded (counts, and an explainer of at most explanationMax lines of
// each kind), so a job's checkpoints need not be in memory at once.
type derivation struct {
	cancelled  bool
	s          salvagetype.Summary
	ex         explainer
	unfinished int
}

// Derivation is derive for both answers to "was the job cancelled?",
// over checkpoints added a page at a time (Add): Settle picks the one its
// job record says, so 10,000 checkpoints are read a thousand at a time
// and never held together.
type Derivation struct {
	as [2]derivation
	// last is the newest UpdatedAt of the checkpoints added.
	last time.Time
}

// LastWrite is when the newest of the checkpoints added was written (by
// its writer's clock). A chunk's count change rides in its checkpoint's
// write and reaches the job record just after it: a repair that settles
// a job whose checkpoints moved since it went quiet would count a change
// its writer is about to apply, twice.
func (d *Derivation) LastWrite() time.Time { return d.last }

// newDerivation returns an empty derivation.
func newDerivation() *Derivation {
	return &Derivation{as: [2]derivation{{cancelled: false}, {cancelled: true}}}
}

// Add counts cps, the next chunks' checkpoints.
func (d *Derivation) Add(cps []Checkpoint) {
	for _, cp := range cps {
		if cp.UpdatedAt.After(d.last) {
			d.last = cp.UpdatedAt
		}
	}
	d.as[0].add(cps)
	d.as[1].add(cps)
}

// Result is derive's answer for a job cancelled or not.
func (d *Derivation) Result(cancelled bool) (salvagetype.JobStatus, salvagetype.Summary, []string) {
	if cancelled {
		return d.as[1].result()
	}
	return d.as[0].result()
}

func (d *derivation) add(cps []Checkpoint) {
	cancelled, s, ex := d.cancelled, &d.s, &d.ex
	for _, cp := range cps {
		// A chunk that has not reached an outcome adds only what the job
		// already counted of it (its last Recount): the rest comes with
		// its outcome's Recount, and must not be counted twice.
		if cp.Status.Outcome() == "" {
			cp.Tier1Retries, cp.Redeliveries = cp.CountedTier1, cp.CountedRedeliveries
			cp.PromptTokens, cp.CompletionTokens = cp.CountedPromptTokens, cp.CountedCompletionTokens
			cp.CostMicros = cp.CountedCostMicros
		}
		s.Tier1Retries += cp.Tier1Retries
		s.PromptTokens += cp.PromptTokens
		s.CompletionTokens += cp.CompletionTokens
		s.CostMicros += cp.CostMicros
		s.Redeliveries += cp.Redeliveries
		s.DeadLetters += cp.DeadLetters
		if cancelled && cp.Status == salvagetype.ChunkPending {
			cp.Status = salvagetype.CancelledAtStage(0)
		}
		switch cp.Status.Outcome() {
		case salvagetype.ChunkDone:
			s.Done++
			if len(cp.Gaps) > 0 {
				s.Degraded++
				ex.degraded(cp.Chunk, fmt.Sprint(cp.Gaps))
			}
		case salvagetype.OutcomeCancelled:
			s.Cancelled++
			if cp.Envelope != "" && cp.Stage > 0 && cp.Status.IsCancelled() {
				ex.add(&ex.cancelled, fmt.Sprintf("chunk %d cancelled at stage %d: envelope %s", cp.Chunk, cp.Stage, cp.Envelope))
			}
		case salvagetype.ChunkDeadLettered:
			s.DeadLettered++
			line := fmt.Sprintf("chunk %d failed at stage %d: envelope %s", cp.Chunk, cp.Stage, cp.Envelope)
			if cp.Reason != "" {
				// Why, in its first line: a panic's stack stays in the
				// envelope.
				why, _, _ := strings.Cut(cp.Reason, "\n")
				line += " (" + streams.Clip(why, explanationReasonMax) + ")"
			}
			ex.add(&ex.failed, line)
		default:
			d.unfinished++
		}
	}
}

func (d *derivation) result() (salvagetype.JobStatus, salvagetype.Summary, []string) {
	cancelled, s := d.cancelled, d.s
	why := d.ex.lines()
	switch {
	case d.unfinished > 0:
		return salvagetype.JobRunning, s, nil
	case cancelled && s.Cancelled > 0:
		// A cancel that came after every chunk had ended stopped
		// nothing: the job is what its chunks made it.
		return salvagetype.JobCancelled, s, why
	case s.DeadLettered > 0:
		return salvagetype.JobIncomplete, s, why
	case s.Degraded > 0:
		return salvagetype.JobPartial, s, why
	default:
		return salvagetype.JobDone, s, nil
	}
}

// Jobs is the salvage_jobs store.
type Jobs struct {
	b   jetstream.KeyValue
	js  jetstream.JetStream
	now func() time.Time
	idx *indexWriter
}

// Create stores a new job record, after its entry in the job index. It
// returns ErrJobExists when the id is taken, which a redelivered job
// message hits by design.
func (s *Jobs) Create(ctx context.Context, j Job) error {
	now := s.now()
	j.CreatedAt, j.UpdatedAt = now, now
	if j.Status == "" {
		j.Status = salvagetype.JobRunning
	}
	j.AttentionIndexed = true
	if err := s.index(ctx, &j); err != nil {
		return err
	}
	_, err := createJSON(ctx, s.b, j.ID, j)
	if isConflict(err) {
		// The job stands, with its own entry.
		err := errors.Join(fmt.Errorf("%w: %s", ErrJobExists, j.ID), s.idx.remove(ctx, j.IndexSeq))
		if j.TenantIndexSeq != 0 {
			err = errors.Join(err, s.idx.remove(ctx, j.TenantIndexSeq))
		}
		for _, seq := range j.MetaIndexSeqs {
			err = errors.Join(err, s.idx.remove(ctx, seq))
		}
		return err
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

// update writes j if its record is still at rev. A job that runs again
// is live, and loses the expiry retention gave it; a finished one keeps
// it (see keptUpdate).
func (s *Jobs) update(ctx context.Context, key string, j Job, rev uint64) (uint64, error) {
	if j.Status == salvagetype.JobRunning {
		j.KeptUntil = nil
	}
	return keptUpdate(ctx, s.js, s.b, key, j, rev, j.KeptUntil, s.now())
}

// GetRev returns a job record and its revision, or ErrNotFound.
func (s *Jobs) GetRev(ctx context.Context, id string) (Job, uint64, error) {
	return getJSON[Job](ctx, s.b, id)
}

// Retain makes j, read at rev, the record's only revision, expiring
// after ttl (KeptUntil says when). ErrConflict when the record changed
// since: the job is live again.
func (s *Jobs) Retain(ctx context.Context, j Job, rev uint64, ttl time.Duration) (Job, error) {
	until := s.now().Add(ttl).UTC()
	j.KeptUntil = &until
	if _, err := retainJSON(ctx, s.js, BucketJobs, j.ID, j, rev, ttl); err != nil {
		return j, err
	}
	return j, nil
}

// Cancel marks a job cancelled. It is idempotent; it returns ErrNotFound
// for an unknown job and the job as it now stands.
func (s *Jobs) Cancel(ctx context.Context, id string) (Job, error) {
	j, _, err := mutateJSONWith(ctx, s.b, id, s.update, func(j *Job, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: job %s", ErrNotFound, id)
		}
		if j.CancelledAt != nil {
			return ErrNoChange
		}
		if j.Finished() {
			// Cancelling would change nothing that runs, and forbid every
			// replay of its envelopes from then on.
			return fmt.Errorf("%w: job %s is %s", ErrJobFinished, id, j.Status)
		}
		now := s.now()
		j.CancelledAt = &now
		j.UpdatedAt = now
		return nil
	})
	return j, err
}

// StopReason is why the job's chunks were cancelled: its CancelReason,
// else "job cancelled".
func (j Job) StopReason() string {
	if j.CancelReason != "" {
		return j.CancelReason
	}
	return "job cancelled"
}

// ExceedBudget records that the job's spend passed its budget and cancels
// it for that reason, by CAS: changed is false when it was recorded
// already (or the job was cancelled before, which it leaves as it was).
func (s *Jobs) ExceedBudget(ctx context.Context, id string) (Job, bool, error) {
	changed := false
	j, _, err := mutateJSONWith(ctx, s.b, id, s.update, func(j *Job, exists bool) error {
		changed = false
		if !exists {
			return fmt.Errorf("%w: job %s", ErrNotFound, id)
		}
		if j.BudgetExceededAt != nil {
			return ErrNoChange
		}
		now := s.now()
		j.BudgetExceededAt, j.UpdatedAt = &now, now
		if j.CancelledAt == nil {
			j.CancelledAt, j.CancelReason = &now, salvagetype.CancelReasonBudget
		}
		changed = true
		return nil
	})
	return j, changed, err
}

// SetBudgetEnvelope records the job's BUDGET_EXCEEDED envelope id once:
// it returns the id already recorded, if any.
func (s *Jobs) SetBudgetEnvelope(ctx context.Context, id, envelope string) (string, error) {
	j, _, err := mutateJSONWith(ctx, s.b, id, s.update, func(j *Job, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: job %s", ErrNotFound, id)
		}
		if j.BudgetEnvelope != "" {
			return ErrNoChange
		}
		j.BudgetEnvelope, j.UpdatedAt = envelope, s.now()
		return nil
	})
	return j.BudgetEnvelope, err
}

// Apply adds one chunk's transition to the job's counts by CAS: O(1), no
// checkpoint read. A job that was finished and now has a chunk running
// again (a replay, a recovery) is running again. It returns the job and
// whether the caller must settle it with Settle, which checks the counts
// against the checkpoints: when they say every chunk is terminal, and
// when an outcome arrives for a job already finished (a count that raced
// a Settle and may now be counted twice).
func (s *Jobs) Apply(ctx context.Context, id string, d Delta) (Job, bool, error) {
	jr, settle, err := s.ApplyAll(ctx, id, []Delta{d}, JobRev{})
	return jr.Job, settle, err
}

// JobRev is a job record at the revision it was read or written at.
type JobRev struct {
	Job Job
	Rev uint64
}

// ApplyAll is Apply for the transitions of several chunks at once, in one
// compare-and-swap: a process counts the chunks that end together with
// one write. When last holds a revision, the write is first tried on it
// without reading the record (a process whose last write is still the
// latest pays one round trip); a lost race reads and tries again. It
// returns the record as written, or as read when there was nothing to
// count.
func (s *Jobs) ApplyAll(ctx context.Context, id string, ds []Delta, last JobRev) (JobRev, bool, error) {
	var wasFinished, recounted, moved bool
	apply := func(j *Job) error {
		wasFinished, recounted, moved = false, false, false
		next := j.Summary
		for _, d := range ds {
			if d.Empty() {
				continue
			}
			applyDelta(&next, d)
			moved = moved || d.From != d.To
		}
		if next == j.Summary {
			return ErrNoChange
		}
		wasFinished = j.Status != salvagetype.JobRunning
		if wasFinished && next.Terminal() > j.Chunks {
			// A Settle already counted this chunk from its checkpoint (a
			// pending chunk of a cancelled job a worker then picked up):
			// the counts stay whole and the caller settles again.
			recounted = true
			return ErrNoChange
		}
		j.Summary = next
		j.UpdatedAt = s.now()
		if j.Summary.Terminal() < j.Chunks && j.Status != salvagetype.JobRunning {
			j.Status, j.FinishedAt, j.Explanation = salvagetype.JobRunning, nil, nil
		}
		return nil
	}
	cur := last
	for attempt := range countAttempts {
		if attempt > 0 && last.Rev == 0 || attempt > 1 {
			// The first retry after a write on a stale revision (last)
			// goes at once: that was no race lost to a writer now.
			if err := casBackoff(ctx, attempt); err != nil {
				return JobRev{}, false, err
			}
		}
		if cur.Rev == 0 {
			j, rev, err := getJSON[Job](ctx, s.b, id)
			if err != nil {
				return JobRev{}, false, err
			}
			cur = JobRev{Job: j, Rev: rev}
		}
		j := cur.Job
		if err := apply(&j); errors.Is(err, ErrNoChange) {
			return cur, recounted || j.Summary.Terminal() >= j.Chunks && j.Status == salvagetype.JobRunning, nil
		}
		rev, err := s.update(ctx, id, j, cur.Rev)
		if err == nil {
			settle := recounted || j.Summary.Terminal() >= j.Chunks && (j.Status == salvagetype.JobRunning || (wasFinished && moved))
			return JobRev{Job: j, Rev: rev}, settle, nil
		}
		if !isConflict(err) {
			return JobRev{}, false, fmt.Errorf("kv: write %s/%s: %w", s.b.Bucket(), id, err)
		}
		cur = JobRev{}
	}
	return JobRev{}, false, fmt.Errorf("%w: %s/%s after %d attempts", errContention, s.b.Bucket(), id, countAttempts)
}

// countAttempts caps ApplyAll's compare-and-swap: more than other
// records get, because every process running a job's chunks counts into
// its one record (64 single-slot processes ran out of 16 attempts 6 to
// 47 times in a job of 2,000 chunks, each time leaving the count to the
// chunk's redelivery). With casBackoff the 32 take up to about 1.5 s.
const countAttempts = 32

// Settle rewrites a job's counts and status from every chunk's checkpoint
// (see derive) and returns the job and whether this call moved it to a
// finished status, so exactly one caller publishes the finished event. It
// is the repair path: called once when the counts say the job is over,
// and whenever a crash may have lost a count.
func (s *Jobs) Settle(ctx context.Context, id string, cps []Checkpoint) (Job, bool, error) {
	d := newDerivation()
	d.Add(cps)
	return s.SettleDerived(ctx, id, d)
}

// SettleDerived is Settle from a derivation of every chunk's checkpoint
// (Checkpoints.Derive reads one a page at a time).
func (s *Jobs) SettleDerived(ctx context.Context, id string, d *Derivation) (Job, bool, error) {
	var finishedNow bool
	// mine is when this call's finishing write, if it made one, says the
	// job finished: a write whose answer was lost is tried again, meets
	// its own first attempt and sees nothing to change — still this
	// call's finish.
	var mine *time.Time
	j, _, err := mutateJSONWith(ctx, s.b, id, s.update, func(j *Job, exists bool) error {
		finishedNow = false
		if !exists {
			return fmt.Errorf("%w: job %s", ErrNotFound, id)
		}
		status, sum, why := d.Result(j.CancelledAt != nil)
		if j.BudgetExceededAt != nil && status != salvagetype.JobRunning && status != salvagetype.JobCancelled {
			// Its last chunks passed the budget as they finished: what
			// they did stands, and nothing was left to stop.
			why = append(why, "budget exceeded by the last chunks to finish; no chunk was stopped")
		}
		// Event counts only grow, whatever the checkpoints say now.
		sum.DeadLetters = max(sum.DeadLetters, j.Summary.DeadLetters)
		sum.Tier1Retries = max(sum.Tier1Retries, j.Summary.Tier1Retries)
		sum.PromptTokens = max(sum.PromptTokens, j.Summary.PromptTokens)
		sum.CompletionTokens = max(sum.CompletionTokens, j.Summary.CompletionTokens)
		sum.CostMicros = max(sum.CostMicros, j.Summary.CostMicros)
		sum.Redeliveries = max(sum.Redeliveries, j.Summary.Redeliveries)
		if status == j.Status && sum == j.Summary && slices.Equal(why, j.Explanation) {
			finishedNow = mine != nil && j.FinishedAt != nil && j.FinishedAt.Equal(*mine) && j.AnnouncementOwed()
			return ErrNoChange
		}
		now := s.now()
		if j.Status == salvagetype.JobRunning && status != salvagetype.JobRunning {
			finishedNow, mine = true, &now
			j.FinishedAt = &now
			j.Finishes++
			j.Unannounced = j.Finishes
		}
		if status == salvagetype.JobRunning {
			// Running again: its next finish is the one to announce.
			j.FinishedAt, j.Unannounced = nil, 0
		}
		j.Status, j.Summary, j.Explanation, j.UpdatedAt = status, sum, why, now
		return nil
	})
	return j, finishedNow, err
}

// MarkAnnounced records that the announcement of the job's finish number
// finish was made, and reports whether this call cleared the debt (false:
// another announcer did, or the job finished again and keeps its own).
func (s *Jobs) MarkAnnounced(ctx context.Context, id string, finish int) (Job, bool, error) {
	cleared := false
	j, _, err := mutateJSONWith(ctx, s.b, id, s.update, func(j *Job, exists bool) error {
		cleared = false
		if !exists {
			return fmt.Errorf("%w: job %s", ErrNotFound, id)
		}
		if j.Unannounced != finish {
			return ErrNoChange
		}
		j.Unannounced, cleared = 0, true
		return nil
	})
	return j, cleared, err
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

// Ref names the job as its subjects do.
func (j Job) Ref() streams.JobRef {
	return streams.JobRef{Partition: j.Partition, Pipeline: j.Pipeline, Job: j.ID}
}
