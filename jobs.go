package salvage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Job is a job's record: its status and the counts of its chunks'
// outcomes, kept current in O(1) per outcome.
type Job = salvagetype.Job

// Summary counts a job's chunks by outcome. Done, Cancelled, DeadLettered
// and Degraded are current; DeadLetters, Tier1Retries and Redeliveries
// count events and only grow (the machinery's own record type).
type Summary = salvagetype.Summary

// Budget caps what a job may spend; a zero field is no cap. The usage
// its model calls report (ToolResult.Usage) is counted as each chunk
// ends, priced by Config.Prices; once the job's count passes the budget,
// its remaining chunks stop (cancelled-at-stage-N, reason "budget
// exceeded": a chunk in flight stops at its next stage, so the spend can
// pass the budget by what the chunks in flight spend) and one
// BUDGET_EXCEEDED envelope lists them and escalates. What is done stays
// done.
type Budget = salvagetype.Budget

// Chunk is one chunk's checkpoint as an operator sees it.
type Chunk = salvagetype.Chunk

// Approval is a person's yes to one stage of one chunk.
type Approval = salvagetype.Approval

// ChunkPage is a job and one page of its chunks.
type ChunkPage struct {
	Job Job `json:"job"`
	// Chunks are the page's checkpoints, in chunk order.
	Chunks []Chunk `json:"chunks"`
	// Offset is the page's first chunk less one; NextOffset the next
	// page's, absent on the last.
	Offset     int `json:"offset"`
	NextOffset int `json:"next_offset,omitempty"`
}

// Page selects part of a long answer.
type Page struct {
	// Offset is how many items to skip.
	Offset int `json:"offset,omitempty"`
	// Limit defaults to PageDefault and is capped at PageMax.
	Limit int `json:"limit,omitempty"`
}

// Page bounds.
const (
	PageDefault = 100
	PageMax     = 1000
)

// Bounds is the slice [from, to) of n items p selects; a nil Page
// selects the first PageDefault.
func (p *Page) Bounds(n int) (from, to int) {
	offset, limit := p.window()
	from = min(offset, n)
	return from, min(from+limit, n)
}

// window is the offset and limit p selects (nil: the first PageDefault).
func (p *Page) window() (offset, limit int) {
	var q Page
	if p != nil {
		q = *p
	}
	limit = q.Limit
	if limit <= 0 {
		limit = PageDefault
	}
	return max(q.Offset, 0), min(limit, PageMax)
}

// ValidateBudget returns an error wrapping ErrInvalidJob unless b (nil:
// no budget) is a cap: counts and costs not negative, a cost that is a
// finite number, each within its bound (1e12 tokens, 1e9 in cost).
func ValidateBudget(b *Budget) error { return b.Validate() }

// SubmitOpts are a submission's options; nil takes every default.
type SubmitOpts struct {
	// JobID names the job (a token, not rejected, accepted, progress or
	// finished). Default a new ULID.
	JobID string
	// TraceParent is a W3C traceparent to carry; default a new one.
	TraceParent string
	// Budget caps what the job may spend.
	Budget *Budget
	// Metadata is kept in the job's record.
	Metadata map[string]any
	// Tenant names whose job it is (a token): its chunks and calls count
	// against the limit of tenant.<Tenant> (Limit.Chunks caps its chunks
	// in flight across the fleet). Empty takes the pipeline's
	// TenantFrom field of Metadata, if any.
	Tenant string
}

// JobSubmit publishes a job for pipeline with input (anything that marshals
// to JSON) and returns its id. The job is split by whichever worker's
// splitter runs the pipeline; a job it cannot run is rejected, which Wait
// reports. It fails at once on a bad pipeline name or job id, an input
// that does not marshal, a budget that is not a cap, or a message past
// Config.MaxPayload. A job id names one input: submitting again under an
// existing id with the same pipeline and input returns the id and
// publishes nothing; with another input it returns an error wrapping
// ErrJobExists (and when the first is not recorded yet, the splitter
// refuses the second, which Wait reports).
func (c *Client) JobSubmit(ctx context.Context, pipeline string, input any, opts *SubmitOpts) (string, error) {
	if err := salvagetype.ValidateToken("pipeline", pipeline); err != nil {
		return "", err
	}
	if opts == nil {
		opts = &SubmitOpts{}
	}
	in, err := json.Marshal(input)
	if err != nil {
		return "", fmt.Errorf("%w: input: %v", salvagetype.ErrInvalidJob, err)
	}
	msg := map[string]json.RawMessage{"input": in}
	if opts.JobID != "" {
		msg["job_id"], _ = json.Marshal(opts.JobID)
	}
	if opts.Budget != nil {
		if err := ValidateBudget(opts.Budget); err != nil {
			return "", err
		}
		if msg["budget"], err = json.Marshal(opts.Budget); err != nil {
			return "", err
		}
	}
	if opts.Metadata != nil {
		if msg["metadata"], err = json.Marshal(opts.Metadata); err != nil {
			return "", fmt.Errorf("%w: metadata: %v", salvagetype.ErrInvalidJob, err)
		}
	}
	if opts.Tenant != "" {
		if err := salvagetype.ValidateToken("tenant", opts.Tenant); err != nil {
			return "", err
		}
		msg["tenant"], _ = json.Marshal(opts.Tenant)
	}
	id, body, err := streams.PrepareJob(msg)
	if err != nil {
		return "", err
	}
	if len(body) > c.cfg.MaxPayload {
		return "", fmt.Errorf("%w: the job message is %d bytes, the limit is %d", salvagetype.ErrInvalidJob, len(body), c.cfg.MaxPayload)
	}
	hash := streams.InputHash(pipeline, in)
	if opts.JobID != "" {
		// A job already recorded under the id decides at once.
		if same, err := c.sameJob(ctx, id, hash); err != nil || same {
			return id, err
		}
	}
	ack, err := c.js.PublishMsg(ctx, streams.JobMessage(pipeline, id, hash, body, opts.TraceParent))
	if err != nil {
		return "", fmt.Errorf("salvage: submit %s: %w", id, err)
	}
	// A duplicate's ack names the first message, which is this job too.
	c.submitted.add(id, submission{seq: ack.Sequence, hash: hash})
	return id, nil
}

// sameJob reports whether job id is recorded with the input that hashes
// to hash (true), not recorded (false), or recorded with another input (an
// error wrapping ErrJobExists).
func (c *Client) sameJob(ctx context.Context, id, hash string) (bool, error) {
	jobs, err := c.jobsFor(ctx)
	if err != nil {
		return false, err
	}
	j, err := jobs.Get(ctx, id)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case j.InputHash != hash:
		return false, fmt.Errorf("%w: job %s was submitted with another input (pipeline %s)", ErrJobExists, id, j.Pipeline)
	}
	return true, nil
}

// JobWait blocks until job id has finished (done, partial, incomplete or
// cancelled) and its envelopes reached the state they will be listed in,
// and returns it: an envelope a recovery process has yet to take up
// (open), or whose strategy is running, is waited for — a recovery that
// sends its chunk back to work makes the job run, and JobWait waits for it to
// finish again — unless no live process recovers the job's pipeline, or
// this client's user may not read envelope records (a submitter). It
// returns an error wrapping ErrRejected when the job was rejected instead,
// and ctx's error when ctx ends first. A job not recorded yet (being
// split) is waited for.
func (c *Client) JobWait(ctx context.Context, id string) (*Job, error) {
	if err := streams.ValidateJobID(id); err != nil {
		return nil, err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// A watch ends when the server restarts or a leader moves; a new
	// one delivers the record as it then stands.
	for {
		j, err := c.waitOnce(ctx, id, tick.C)
		if err != nil {
			return j, err
		}
		if j == nil {
			// The watch ended or never started: the record says where the
			// job stands meanwhile.
			if j, err = c.lookJob(ctx, id); err != nil {
				return j, err
			}
		}
		if j != nil {
			settling, err := c.settling(ctx, j)
			if err != nil || !settling {
				return j, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("salvage: wait for %s: %w", id, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// settling reports whether finished job j has an envelope a live recovery
// process is yet to decide: open, or recovering with its strategy running
// (not requeued: a requeued chunk makes the job run again). A user who may
// not read envelope records (a submitter) is not kept waiting: it is told
// false at once.
func (c *Client) settling(ctx context.Context, j *Job) (bool, error) {
	if j.Summary.DeadLetters == 0 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, waitEnvelopesLook)
	defer cancel()
	op, err := c.operator(ctx)
	if err != nil {
		return false, nil
	}
	pg, err := op.Page(ctx, operator.EnvelopeFilter{Job: j.ID}, 0, waitEnvelopesMax, false)
	if err != nil {
		return false, nil
	}
	undecided := false
	for _, r := range pg.Records {
		undecided = undecided || r.Status == salvagetype.EnvelopeOpen || (r.Status == salvagetype.EnvelopeRecovering && !r.Requeued)
	}
	if !undecided {
		return false, nil
	}
	workers, err := c.WorkerList(ctx)
	if err != nil {
		return false, nil
	}
	for _, w := range workers {
		if slices.Contains(w.Recovers, j.Pipeline) {
			return true, nil
		}
	}
	return false, nil
}

// waitEnvelopesMax bounds the envelopes of a job Wait looks at;
// waitEnvelopesLook how long one look may take.
const (
	waitEnvelopesMax  = 1000
	waitEnvelopesLook = 2 * time.Second
)

// waitOnce watches job id's record, and reads it every tick, until it
// finishes, the job is rejected, or the watch ends (nil, nil).
func (c *Client) waitOnce(ctx context.Context, id string, tick <-chan time.Time) (*Job, error) {
	// The watch lives until waitOnce returns; setting it up is one bounded
	// ask, so a request a restarting server never answers is asked again
	// instead of holding Wait until ctx ends.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := c.watchJob(wctx, id)
	if err != nil {
		return nil, c.waitError(ctx, id, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("salvage: wait for %s: %w", id, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var j Job
			if err := json.Unmarshal(e.Value(), &j); err != nil {
				return nil, fmt.Errorf("salvage: job %s: %w", id, err)
			}
			if err := c.notMine(j); err != nil {
				return nil, err
			}
			if j.Status.Finished() {
				return &j, nil
			}
		case <-tick:
			// A watch can stall for a while after a server restart before
			// its consumer is recreated: the record is read as well.
			if j, err := c.lookJob(ctx, id); j != nil || err != nil {
				return j, err
			}
		}
	}
}

// waitAsk bounds one request Wait makes. A request sent while the server
// restarts can go unanswered; it is asked again, not waited on until the
// caller's deadline.
const waitAsk = 5 * time.Second

// errAskUnanswered is a request of Wait's that waitAsk passed without an
// answer; Wait asks again.
var errAskUnanswered = errors.New("salvage: no answer in time")

// watchJob starts a watch of job id's record that lasts until ctx ends,
// or fails after waitAsk. An unanswered watch is stopped when ctx ends.
func (c *Client) watchJob(ctx context.Context, id string) (jetstream.KeyWatcher, error) {
	actx, cancel := context.WithTimeout(ctx, waitAsk)
	defer cancel()
	b, err := c.js.KeyValue(actx, kv.BucketJobs)
	if err != nil {
		return nil, err
	}
	type started struct {
		w   jetstream.KeyWatcher
		err error
	}
	ch := make(chan started, 1)
	go func() {
		w, err := b.Watch(ctx, id)
		ch <- started{w, err}
	}()
	select {
	case s := <-ch:
		return s.w, s.err
	case <-actx.Done():
		go func() {
			if s := <-ch; s.w != nil {
				_ = s.w.Stop()
			}
		}()
		return nil, errAskUnanswered
	}
}

// lookJob reads job id's record and rejection, each ask bounded by
// waitAsk: the job when it is finished, an error when it is not this
// client's or was rejected, and nil, nil otherwise (not finished, or no
// answer: the next look asks again).
func (c *Client) lookJob(ctx context.Context, id string) (*Job, error) {
	actx, cancel := context.WithTimeout(ctx, waitAsk)
	defer cancel()
	if j, err := c.JobGet(actx, id); err == nil {
		if err := c.notMine(*j); err != nil {
			return nil, err
		}
		if j.Status.Finished() {
			return j, nil
		}
	}
	return nil, c.rejected(actx, id)
}

// notMine returns an error wrapping ErrJobExists when j, recorded under
// the id of a job this client submitted, stands for another input: the
// client's own message is refused, and j is somebody else's job.
func (c *Client) notMine(j Job) error {
	if sub, mine := c.submitted.get(j.ID); mine && j.InputHash != "" && j.InputHash != sub.hash {
		return fmt.Errorf("%w (%s): %w: job %s was submitted with another input", ErrRejected, salvagetype.RejectDuplicateJob, ErrJobExists, j.ID)
	}
	return nil
}

// waitError is nil for an error a retry may cure (the server is
// restarting), so Wait tries again; ctx's end and a deployment without
// the jobs bucket are final.
func (c *Client) waitError(ctx context.Context, id string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("salvage: wait for %s: %w", id, ctx.Err())
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return fmt.Errorf("salvage: wait for %s: %w (is Salvage provisioned here? Start does it)", id, err)
	}
	return nil
}

// JobWaitAccepted blocks until a splitter has taken job id: nil once it is
// accepted (its chunks are queued), an error wrapping ErrRejected (and
// ErrUnknownPipeline when that is why) once it is refused, or ctx's
// error when neither happened in time (no splitter is running). For a job
// this client submitted it goes by that very message: an older rejection
// under the same id is not its own, and a job recorded under the id with
// another input makes it fail with ErrJobExists. For any other job it
// reads the job's accepted and rejected events.
func (c *Client) JobWaitAccepted(ctx context.Context, id string) error {
	if err := streams.ValidateJobID(id); err != nil {
		return err
	}
	sub, mine := c.submitted.get(id)
	poll := 20 * time.Millisecond
	for {
		if err := c.rejected(ctx, id); err != nil {
			return err
		}
		if mine {
			if jobs, err := c.jobsFor(ctx); err == nil {
				if j, err := jobs.Get(ctx, id); err == nil {
					if j.SourceSeq == sub.seq || j.InputHash == sub.hash {
						return nil
					}
					return c.notMine(Job{ID: id, InputHash: j.InputHash})
				}
			}
		} else if s, err := c.js.Stream(ctx, streams.Events); err == nil {
			if _, err := s.GetLastMsgForSubject(ctx, streams.JobRef{Job: id}.Event(streams.EventAccepted)); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("salvage: job %s not taken by a splitter yet: %w", id, ctx.Err())
		case <-time.After(poll):
		}
		poll = min(poll*2, 500*time.Millisecond)
	}
}

// rejected returns an error wrapping ErrRejected when job id was rejected.
// For a job this client submitted only the rejection of its own message
// counts; for another, a rejection counts while no job of that id is
// recorded (a later submission under the id may have run).
func (c *Client) rejected(ctx context.Context, id string) error {
	s, err := c.js.Stream(ctx, streams.Events)
	if err != nil {
		return nil
	}
	m, err := s.GetLastMsgForSubject(ctx, streams.JobRef{Job: id}.Event(streams.EventRejected))
	if err != nil {
		return nil
	}
	var r salvagetype.Rejection
	_ = json.Unmarshal(m.Data, &r)
	if sub, mine := c.submitted.get(id); mine {
		if r.StreamSeq != sub.seq {
			return nil
		}
	} else if jobs, err := c.jobsFor(ctx); err == nil {
		if _, err := jobs.Get(ctx, id); err == nil {
			return nil
		}
	}
	err = fmt.Errorf("%w (%s): %s", ErrRejected, r.Reason, r.Error)
	switch r.Reason {
	case salvagetype.RejectUnknownPipeline:
		err = errors.Join(err, ErrUnknownPipeline)
	case salvagetype.RejectDuplicateJob:
		err = errors.Join(err, ErrJobExists)
	}
	return err
}

// job reads job id's record, or returns an error wrapping ErrUnknownJob
// (or ErrInvalidToken for a malformed id).
func (c *Client) job(ctx context.Context, id string) (kv.Job, *kv.Stores, error) {
	if err := streams.ValidateJobID(id); err != nil {
		return kv.Job{}, nil, err
	}
	st, err := c.storesFor(ctx)
	if err != nil {
		return kv.Job{}, nil, err
	}
	j, err := st.Jobs.Get(ctx, id)
	if errors.Is(err, kv.ErrNotFound) {
		return j, st, fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	return j, st, err
}

// jobOrWhy is job, its ErrUnknownJob saying why when the job waits to be
// split.
func (c *Client) jobOrWhy(ctx context.Context, id string) (kv.Job, *kv.Stores, error) {
	j, st, err := c.job(ctx, id)
	if errors.Is(err, ErrUnknownJob) {
		// No record: the job may wait to be split, its pipeline's
		// workers all stopped.
		if why := c.notSplit(ctx, st, id); why != "" {
			return j, st, fmt.Errorf("%w: %s", ErrUnknownJob, why)
		}
	}
	return j, st, err
}

// JobGet returns job id's record, or an error wrapping ErrUnknownJob.
func (c *Client) JobGet(ctx context.Context, id string) (*Job, error) {
	if err := streams.ValidateJobID(id); err != nil {
		return nil, err
	}
	jobs, err := c.jobsFor(ctx)
	if err != nil {
		return nil, err
	}
	j, err := jobs.Get(ctx, id)
	if errors.Is(err, kv.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	if err != nil {
		return nil, err
	}
	out := jobOf(j)
	return &out, nil
}

// ChunkList returns job id and one page of its chunks (page nil: the first
// PageDefault). A cancelled job's chunks that never started read
// cancelled-at-stage-0. It costs one read per 1,000 chunks of the page.
func (c *Client) ChunkList(ctx context.Context, id string, page *Page) (*ChunkPage, error) {
	j, st, err := c.jobOrWhy(ctx, id)
	if err != nil {
		return nil, err
	}
	from, to := page.Bounds(j.Chunks)
	part, err := st.PartOf(ctx, j)
	if err != nil {
		return nil, err
	}
	cps, err := part.Checkpoints.ForJobRange(ctx, id, from+1, to)
	if err != nil {
		return nil, err
	}
	out := &ChunkPage{Offset: from}
	if to < j.Chunks {
		out.NextOffset = to
	}
	out.Job = jobOf(j)
	out.Chunks = make([]Chunk, 0, len(cps))
	for _, cp := range j.View(cps) {
		out.Chunks = append(out.Chunks, chunkOf(cp))
	}
	return out, nil
}

// JobResults returns the findings of job id's finished chunks, by chunk
// number, read from SALVAGE_RESULTS (kept 7 days).
func (c *Client) JobResults(ctx context.Context, id string) (map[int]json.RawMessage, error) {
	if err := streams.ValidateJobID(id); err != nil {
		return nil, err
	}
	cons, err := c.js.OrderedConsumer(ctx, streams.Results, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{streams.JobRef{Job: id}.Results()},
	})
	if err != nil {
		return nil, fmt.Errorf("salvage: results of %s: %w", id, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("salvage: results of %s: %w", id, err)
	}
	out := map[int]json.RawMessage{}
	for left := info.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("salvage: results of %s: %w", id, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if chunk, err := strconv.Atoi(m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]); err == nil {
				out[chunk] = m.Data()
			}
		}
		if n == 0 {
			break
		}
		left -= uint64(n)
	}
	return out, nil
}

// JobCancel cancels job id: its queued chunks leave the work queue at once
// and count as cancelled at stage 0, running ones stop at their next
// stage, envelopes of its chunks still being recovered are resolved. by
// names who cancels it, for the envelopes' notes. A job submitted a moment
// ago is waited for, up to 5s. It returns the job as it then stands, or an
// error wrapping ErrUnknownJob.
func (c *Client) JobCancel(ctx context.Context, id, by string) (*Job, error) {
	if err := streams.ValidateJobID(id); err != nil {
		return nil, err
	}
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	var j kv.Job
	e := AuditEntry{Action: AuditCancel, Job: id}
	err = c.audited(ctx, &e, streams.AuditScopeJob, id, by, "", func(by string) (err error) {
		j, err = op.Cancel(ctx, id, by)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := jobOf(j)
	return &out, nil
}

// JobList returns one page (nil: the first PageDefault) of the job
// records, newest first, from the job index: O(log n + page) whatever the
// bucket holds. A job is listed while its record is kept, and at most
// the job index's extra listing time longer than its pipeline's records retention after it
// was submitted (found by id after that); a page can be shorter than its
// limit by the records that expired.
func (c *Client) JobList(ctx context.Context, page *Page) ([]Job, error) {
	st, err := c.storesFor(ctx)
	if err != nil {
		return nil, err
	}
	offset, limit := page.window()
	pg, err := st.Jobs.Page(ctx, offset, limit)
	if err != nil {
		return nil, err
	}
	return jobsOf(pg.Jobs), nil
}

// jobsOf is the public view of each record.
func jobsOf(records []kv.Job) []Job {
	out := make([]Job, 0, len(records))
	for _, j := range records {
		out = append(out, jobOf(j))
	}
	return out
}

// notSplit says why job id has no record when its message still waits in
// SALVAGE_JOBS (the first thousand of them are looked at): its
// pipeline, and how many processes run it now. "" when it does not wait
// there.
func (c *Client) notSplit(ctx context.Context, st *kv.Stores, id string) string {
	w, ok := streams.FindWaitingJob(ctx, c.js, id)
	if !ok {
		return ""
	}
	workers := 0
	if ws, err := st.Workers.List(ctx); err == nil {
		for _, wk := range ws {
			if wk.Runs(w.Pipeline) {
				workers++
			}
		}
	}
	return fmt.Sprintf("job %s is not split yet: its message waits in %s (sequence %d) for a worker of pipeline %s; %d running", id, streams.Jobs, w.Seq, w.Pipeline, workers)
}
