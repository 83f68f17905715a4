package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// repairer settles, once per sweep, what a process killed between two
// writes left behind. Every path that sees a finished chunk settles it
// already; the repairer covers the chunks nobody will see again. It keeps
// the running jobs and the unfinished envelopes in memory, current through
// watches, so a sweep reads only what looks stuck.
type repairer struct {
	js      jetstream.JetStream
	stores  *kv.Stores
	tracker flow.Tracker
	log     zerolog.Logger
	idle    time.Duration

	now func() time.Time

	mu   sync.Mutex
	jobs map[string]kv.Job
	// backoff spaces out the repairs of a job found with nothing to
	// repair: a job waiting for hours (held at a breaker, parked for an
	// approval) is not re-derived every sweep, O(its chunks) each time.
	backoff map[string]jobBackoff
	envs    map[string]kv.EnvelopeRecord
	// budgets are settled jobs their budget stopped whose
	// BUDGET_EXCEEDED envelope may not be written yet.
	budgets map[string]kv.Job
	// unannounced are finished jobs whose finish is not announced yet
	// (kv.Job's Unannounced): announced by the sweep once idle, when a
	// crash took the call that finished them.
	unannounced map[string]kv.Job
}

// jobBackoff is when a job found with nothing to repair is looked at
// next: next, after waiting wait, unless its record changes (seen is the
// UpdatedAt it had).
type jobBackoff struct {
	next time.Time
	wait time.Duration
	seen time.Time
}

// repairBackoffMax bounds a job's backoff, in idle periods: a job idle
// for long is re-derived at least every 16 idle periods (4 minutes with
// the default 15-s sweep), so a crash while it waits is repaired that
// late at most.
const repairBackoffMax = 16

func newRepairer(js jetstream.JetStream, stores *kv.Stores, idle time.Duration, log zerolog.Logger) *repairer {
	return &repairer{js: js, stores: stores, tracker: flow.Tracker{JS: js, Stores: stores}, log: log, idle: idle, now: time.Now,
		jobs: map[string]kv.Job{}, backoff: map[string]jobBackoff{}, envs: map[string]kv.EnvelopeRecord{}, budgets: map[string]kv.Job{},
		unannounced: map[string]kv.Job{}}
}

// backOff spaces out j's next repair after one that found nothing to do:
// twice the last wait, from one idle period up to repairBackoffMax.
func (r *repairer) backOff(j kv.Job, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, running := r.jobs[j.ID]; !running {
		return
	}
	b := r.backoff[j.ID]
	if !b.seen.Equal(j.UpdatedAt) {
		b.wait = 0
	}
	b.wait = min(max(2*b.wait, r.idle), repairBackoffMax*r.idle)
	b.next, b.seen = now.Add(b.wait), j.UpdatedAt
	r.backoff[j.ID] = b
}

// follow keeps the indexes current until ctx ends. It blocks.
func (r *repairer) follow(ctx context.Context) {
	restart := func(bucket string) func(error) error {
		return func(err error) error {
			r.log.Debug().Err(err).Str("bucket", bucket).Msg("watch ended; restarting")
			return nil
		}
	}
	go kv.Follow(ctx, r.js, kv.BucketJobs, jetstream.AllKeys, r.updateJob, restart(kv.BucketJobs))
	_ = kv.Follow(ctx, r.js, kv.BucketEnvelopes, jetstream.AllKeys, r.updateEnvelope, restart(kv.BucketEnvelopes))
}

func (r *repairer) updateJob(e jetstream.KeyValueEntry) {
	if e == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var j kv.Job
	ok := e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &j) == nil
	if ok && j.BudgetExceededAt != nil && j.BudgetEnvelope != "-" && j.Status != salvagetype.JobRunning {
		r.budgets[e.Key()] = j
	}
	if ok && j.AnnouncementOwed() {
		r.unannounced[e.Key()] = j
	} else {
		delete(r.unannounced, e.Key())
	}
	if ok && j.Status == salvagetype.JobRunning {
		r.jobs[e.Key()] = j
		return
	}
	delete(r.jobs, e.Key())
	delete(r.backoff, e.Key())
}

func (r *repairer) updateEnvelope(e jetstream.KeyValueEntry) {
	if e == nil || strings.Contains(e.Key(), ".") { // a guard key
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var rec kv.EnvelopeRecord
	if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &rec) == nil && !rec.Final() {
		r.envs[e.Key()] = rec
		return
	}
	delete(r.envs, e.Key())
}

// stuck returns the running jobs and unfinished envelopes nobody has
// touched for the idle time.
func (r *repairer) stuck(now time.Time) ([]kv.Job, []kv.EnvelopeRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var jobs []kv.Job
	for id, j := range r.jobs {
		if b, ok := r.backoff[id]; ok && b.seen.Equal(j.UpdatedAt) && now.Before(b.next) {
			continue
		}
		if now.Sub(j.UpdatedAt) >= r.idle {
			jobs = append(jobs, j)
		}
	}
	var envs []kv.EnvelopeRecord
	for _, e := range r.envs {
		if now.Sub(e.UpdatedAt) >= r.idle {
			envs = append(envs, e)
		}
	}
	return jobs, envs
}

// announceAfter is how long at least a finish stays unannounced before
// the sweep announces it: the call that finished the job is given that
// long to do it, so that only a crash, not a slow machine, makes two
// announcements (the job's span is the one part a second one repeats).
const announceAfter = 10 * time.Second

// owed returns the finished jobs whose announcement nobody has made for
// the idle time, and at least announceAfter.
func (r *repairer) owed(now time.Time) []kv.Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	var jobs []kv.Job
	for _, j := range r.unannounced {
		if now.Sub(j.UpdatedAt) >= max(r.idle, announceAfter) {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// repair runs one pass and returns how many jobs and envelopes it changed.
func (r *repairer) repair(ctx context.Context) (int, error) {
	now := r.now()
	jobs, envs := r.stuck(now)
	n := 0
	var errs []error
	r.mu.Lock()
	budgets := make([]kv.Job, 0, len(r.budgets))
	for _, j := range r.budgets {
		budgets = append(budgets, j)
	}
	r.mu.Unlock()
	for _, j := range budgets {
		if err := r.tracker.BudgetEnvelope(ctx, j); err != nil {
			errs = append(errs, err)
			continue
		}
		r.mu.Lock()
		if cur, ok := r.budgets[j.ID]; ok && cur.UpdatedAt.Equal(j.UpdatedAt) {
			delete(r.budgets, j.ID)
		}
		r.mu.Unlock()
	}
	for _, j := range r.owed(now) {
		after, announced, err := r.tracker.AnnounceOwed(ctx, j.ID)
		if errors.Is(err, kv.ErrNotFound) {
			continue // retained and expired since
		}
		if announced {
			n++
			r.log.Info().Str("job_id", j.ID).Str("trace_id", j.TraceID).Str("status", string(after.Status)).
				Msg("announced a finish a crash left unannounced")
		}
		errs = append(errs, err)
	}
	for _, j := range jobs {
		changed, err := r.repairJob(ctx, j, now)
		if changed {
			n++
		}
		if !changed && err == nil {
			r.backOff(j, now)
		}
		errs = append(errs, err)
	}
	for _, e := range envs {
		changed, err := r.repairEnvelope(ctx, e)
		if changed {
			n++
		}
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// repairJob settles a running job nobody updated for a while: its counts
// against its checkpoints, a cancel that stopped part-way, a backlog
// whose admissions a crash lost. The watch's copy only nominates the job:
// the record, read now, decides, so a job whose worker is counting it
// this moment (the copy lagging its writes) is left to that worker, and
// so is one a chunk's checkpoint moved in since (its count write follows).
func (r *repairer) repairJob(ctx context.Context, j kv.Job, now time.Time) (bool, error) {
	cur, err := r.stores.Jobs.Get(ctx, j.ID)
	if errors.Is(err, kv.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if cur.Status != salvagetype.JobRunning || now.Sub(cur.UpdatedAt) < r.idle {
		return false, nil // finished or moving since: the watch brings the change
	}
	var after kv.Job
	if cur.CancelledAt != nil {
		after, err = r.tracker.CancelRest(ctx, cur, "cancel")
	} else {
		var d *kv.Derivation
		var part *kv.Part
		if part, err = r.stores.PartOf(ctx, cur); err != nil {
			return false, err
		}
		if d, err = part.Checkpoints.Derive(ctx, cur.ID, cur.Chunks); err != nil {
			return false, err
		}
		if now.Sub(d.LastWrite()) < r.idle {
			// A chunk moved while the record sat still: its writer is
			// about to count it (a count settled now would be counted
			// again), or a later sweep finds the job quiet.
			return false, nil
		}
		after, err = r.tracker.SettleDerived(ctx, cur, d)
	}
	if errors.Is(err, kv.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	changed := after.Status != cur.Status || after.Summary != cur.Summary
	if after.Status == salvagetype.JobRunning && after.Window > 0 && after.CancelledAt == nil {
		admitted, err := r.restartBacklog(ctx, after)
		if err != nil {
			return changed, err
		}
		changed = changed || admitted > 0
	}
	if changed {
		r.log.Info().Str("job_id", j.ID).Str("status", string(after.Status)).Int("done", after.Summary.Done).Msg("repaired a stuck job")
	}
	return changed, nil
}

// restartBacklog admits up to a window of a job's backlog when none of its
// chunks is left in its partition's chunk stream: the admissions that
// should have let them in were lost.
func (r *repairer) restartBacklog(ctx context.Context, j kv.Job) (int, error) {
	s, err := r.js.Stream(ctx, streams.ChunksStream(j.Partition))
	if err != nil {
		return 0, err
	}
	if _, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(j.Ref().Chunks())); !errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, err // queued chunks will admit the rest, or an error
	}
	hold, err := r.js.Stream(ctx, streams.Hold)
	if err != nil {
		return 0, err
	}
	if _, err := hold.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(j.Ref().Held())); !errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, err // held chunks come back and admit the rest, or an error
	}
	n := 0
	for range j.Window {
		ok, err := flow.Admit(ctx, r.js, j, j.Ref().Backlog(), func(n int) string {
			return j.Ref().Chunk(n).Subject()
		})
		if err != nil || !ok {
			return n, err
		}
		n++
	}
	return n, nil
}

// repairEnvelope settles an open or recovering envelope nobody updated for
// a while whose chunk ended: resolved when it finished, superseded when it
// failed again under a newer envelope. A requeued envelope whose chunk is
// pending with no message queued lost its requeue to a crash between
// marking it and publishing it: the chunk is published again.
func (r *repairer) repairEnvelope(ctx context.Context, e kv.EnvelopeRecord) (bool, error) {
	part, err := flow.RecordPart(ctx, r.stores, e)
	if err != nil {
		return false, err
	}
	cp, _, err := part.Checkpoints.Get(ctx, e.Job, e.Chunk)
	if errors.Is(err, kv.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	switch {
	case cp.Envelope != "" && cp.Envelope != e.ID && cp.Status == salvagetype.ChunkDeadLettered:
		newer, _, err := r.stores.Envelopes.Get(ctx, cp.Envelope)
		if err != nil || !newer.CreatedAt.After(e.CreatedAt) {
			return false, nil
		}
		return true, flow.Supersede(ctx, r.stores, e.ID, cp.Envelope)
	case e.Stopped != "" && cp.Status.IsCancelled():
		// It settles the cancelled chunk's effects: the orchestrator's.
		return false, nil
	case cp.Status == salvagetype.ChunkDone || cp.Status.IsCancelled():
		cp.Envelope = e.ID
		return true, flow.SettleEnvelope(ctx, r.stores, cp, "sweeper")
	case e.Requeued && cp.Status == salvagetype.ChunkPending && cp.Envelope == e.ID:
		return r.requeueLost(ctx, e, cp)
	case e.Requeued && e.Status == salvagetype.EnvelopeRecovering && cp.Status == salvagetype.ChunkDeadLettered && cp.Envelope == e.ID:
		// A replay marked the envelope and died before it sent the chunk.
		return true, flow.FinishReplay(ctx, r.js, r.stores, e)
	}
	return false, nil
}

// requeueLost publishes the chunk of a requeued envelope again when no
// message of it is queued. Its id is derived from the envelope's state,
// so two sweepers repairing at once publish one message.
func (r *repairer) requeueLost(ctx context.Context, e kv.EnvelopeRecord, cp kv.Checkpoint) (bool, error) {
	ref, err := streams.ParseChunkSubject(e.Subject)
	if err != nil {
		return false, err
	}
	s, err := r.js.Stream(ctx, streams.ChunksStream(ref.Partition))
	if err != nil {
		return false, err
	}
	if _, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(e.Subject)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, err // queued (or an error): nothing lost
	}
	env, err := flow.ReadEnvelope(ctx, r.js, r.stores, e)
	if err != nil {
		return false, err
	}
	id := fmt.Sprintf("%s.repair.%d.%d.%d", e.ID, e.Replays, cp.Recoveries, cp.Epoch)
	if _, err := flow.Requeue(ctx, r.js, env, cp.Epoch, id, salvagetype.HeaderRecoveryOf); err != nil {
		return false, err
	}
	r.log.Info().Str("envelope_id", e.ID).Str("job_id", e.Job).Int("chunk", e.Chunk).Msg("requeued a chunk whose requeue was lost")
	return true, nil
}
