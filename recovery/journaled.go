package recovery

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// JournalStore is where journal rows are written; kv's journal store
// (kv.Part.Journal) implements it.
type JournalStore interface {
	// Put stores row if its key's last sequence is still expect (0: new)
	// and returns the new sequence.
	Put(ctx context.Context, row kv.JournalRow, expect uint64) (uint64, error)
	// PutAsync queues the same write and returns a function that waits
	// for its result.
	PutAsync(row kv.JournalRow, expect uint64) (func(context.Context) (uint64, error), error)
}

// Replay is one chunk epoch's journal, loaded once when a worker takes the
// chunk. A call whose row already SUCCEEDED returns the recorded output
// without running: resume and redelivery replay an agent against its
// journal at no cost per call. It is safe for concurrent use by the agents
// of a stage.
type Replay struct {
	store   JournalStore
	mu      sync.Mutex
	rows    map[string]kv.StoredRow
	pending []pendingRow
}

// pendingRow is a row written without waiting: its key and status (the
// row itself is in Replay.rows), and what waits for its write.
type pendingRow struct {
	key    string
	status salvagetype.CallStatus
	wait   func(context.Context) (uint64, error)
	// prev is the key's row before this one (none: Key empty), what the
	// journal holds if this write fails.
	prev kv.StoredRow
}

// NewReplay wraps rows (from kv.Part.Journal.Load) for a chunk run.
func NewReplay(store JournalStore, rows map[string]kv.StoredRow) *Replay {
	if rows == nil {
		rows = map[string]kv.StoredRow{}
	}
	return &Replay{store: store, rows: rows}
}

// Rows returns a copy of the epoch's rows as this run knows them: those
// loaded, and those written since (a row written without waiting is
// included once it is queued; Flush makes it durable).
func (r *Replay) Rows() map[string]kv.StoredRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]kv.StoredRow, len(r.rows))
	for k, v := range r.rows {
		out[k] = v
	}
	return out
}

func (r *Replay) get(key string) (kv.StoredRow, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.rows[key]
	return row, ok
}

// rowWriteTimeout bounds one journal write that a cancellation does not
// interrupt.
const rowWriteTimeout = 10 * time.Second

// put writes row expecting the sequence last seen for its key. A job's
// cancel does not interrupt the write: abandoned half-way, the row could
// stand in the journal unknown to this run (an INITIATED row nobody
// settles, a call nobody counts); written, the run's cancel settles it.
func (r *Replay) put(ctx context.Context, row kv.JournalRow) (kv.StoredRow, error) {
	r.mu.Lock()
	expect := r.rows[row.Key].Seq
	r.mu.Unlock()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rowWriteTimeout)
	defer cancel()
	seq, err := r.store.Put(wctx, row, expect)
	if err != nil {
		return kv.StoredRow{}, err
	}
	stored := kv.StoredRow{JournalRow: row, Seq: seq}
	r.mu.Lock()
	r.rows[row.Key] = stored
	r.mu.Unlock()
	return stored, nil
}

// putLater queues row's write and returns without waiting; Flush waits.
func (r *Replay) putLater(row kv.JournalRow) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.rows[row.Key]
	wait, err := r.store.PutAsync(row, prev.Seq)
	if err != nil {
		return err
	}
	r.pending = append(r.pending, pendingRow{key: row.Key, status: row.Status, wait: wait, prev: prev})
	// Later reads of the key in this run see the row it will hold.
	r.rows[row.Key] = kv.StoredRow{JournalRow: row, Seq: prev.Seq}
	return nil
}

// Flush waits for every row written without waiting and returns the first
// error (kv.ErrJournalConflict when another writer got there: the caller
// is stale). RunStage flushes before it returns, so a stage's rows are
// durable before its checkpoint is written.
func (r *Replay) Flush(ctx context.Context) error {
	r.mu.Lock()
	pending := r.pending
	r.pending = nil
	r.mu.Unlock()
	var first error
	for _, p := range pending {
		seq, err := p.wait(ctx)
		if err != nil {
			first = cmp.Or(first, fmt.Errorf("journal %s: %w", p.key, err))
			r.mu.Lock()
			// The journal does not hold the row: neither may this run,
			// which counts its calls from its rows (a call counted here
			// and missing from the journal is a disagreement).
			if cur := r.rows[p.key]; cur.Status == p.status && cur.Seq == p.prev.Seq {
				if p.prev.Key != "" {
					r.rows[p.key] = p.prev
				} else {
					delete(r.rows, p.key)
				}
			}
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		// The next write of the key expects this one, unless a later row
		// of another status replaced it meanwhile.
		if cur := r.rows[p.key]; cur.Status == p.status {
			cur.Seq = seq
			r.rows[p.key] = cur
		}
		r.mu.Unlock()
	}
	return first
}

// Tool calls a registered tool through the journal, under the
// deterministic key of invariant 2: a tool with a side effect has its row
// written INITIATED before the call, and every call's row says SUCCEEDED
// or FAILED after it. A row that already SUCCEEDED returns
// its output without a call; a row left INITIATED by a crash is an unknown
// outcome, settled by the tool's Verify before anything else runs. input
// must marshal to JSON. It blocks for the INITIATED row (side effects
// only) and the call; the row recording the result is written without
// holding the agent up and is durable before the stage's checkpoint
// (Replay.Flush).
func (t *turn) Tool(ctx context.Context, name string, input any) (json.RawMessage, error) {
	before := t.seq
	out, err := t.call(ctx, name, input, false)
	t.noteFailure(name, before, err)
	return out, err
}

// ToolWithFallback calls the first tool of names that answers, and
// returns its output and name: a premium model, then a cheaper one,
// possibly at another provider. Each link is a call of its own (its own
// sequence number, key and journal row, a model's row naming the model
// that answered). A link that is rate-limited or overloaded (class
// rate-limited), or whose system's breaker is open, passes on to the next
// at once, without waiting out tier 1; any other failure is the call's.
// The last link is called like Tool. On a resume the journal decides: a
// link whose row failed with one of those classes is passed over without
// being asked again, and a link refused by its breaker gets a row saying
// so, so a resumed agent makes the same calls under the same keys.
func (t *turn) ToolWithFallback(ctx context.Context, names []string, input any) (json.RawMessage, string, error) {
	if len(names) == 0 {
		return nil, "", salvagetype.Permanent(0, fmt.Errorf("%w: an empty fallback chain", errUnknownTool))
	}
	for i, name := range names {
		last := i == len(names)-1
		before := t.seq
		if !last {
			key := kv.JournalKey(t.Job, t.Chunk, t.Epoch, t.Stage, t.Agent, t.seq+1)
			if prev, ok := t.replay.get(key); ok && prev.Tool == name && prev.Status == salvagetype.CallFailed && passesOver(prev.ErrorClass) {
				t.seq++
				continue
			}
		}
		out, err := t.call(ctx, name, input, !last)
		if err == nil || last || !passesOverErr(err) {
			t.noteFailure(name, before, err)
			return out, name, err
		}
	}
	panic("unreachable")
}

// passesOverErr reports whether a failed link passes on to the next.
func passesOverErr(err error) bool {
	c := ClassOf(err)
	return c == salvagetype.ClassRateLimited || c == salvagetype.ClassBreakerOpen
}

// passesOver is passesOverErr for a journal row's error class.
func passesOver(class string) bool {
	return class == salvagetype.ClassRateLimited.String() || class == salvagetype.ClassBreakerOpen.String()
}

// noteFailure remembers the call an agent's failure is about.
func (t *turn) noteFailure(name string, before int, err error) {
	if err != nil && ClassOf(err) != salvagetype.ClassCancelled {
		// The call the agent's failure is about, for AgentError (no key
		// when the call never got one: an unknown tool, bad input).
		t.failedTool, t.failedKey = name, ""
		if t.seq > before {
			t.failedKey = kv.JournalKey(t.Job, t.Chunk, t.Epoch, t.Stage, t.Agent, t.seq)
		}
	}
}

// call makes one journaled call. A link of a fallback chain (link true)
// stops at a rate limit instead of retrying, and records a refusal by its
// breaker in a row of its own.
func (t *turn) call(ctx context.Context, name string, input any, link bool) (_ json.RawMessage, err error) {
	tool, err := t.tools.Get(name)
	if err != nil {
		return nil, salvagetype.Permanent(0, err)
	}
	in, err := json.Marshal(input)
	if err != nil {
		return nil, salvagetype.Permanent(0, fmt.Errorf("tool %s input: %w", name, err))
	}
	t.seq++
	key := kv.JournalKey(t.Job, t.Chunk, t.Epoch, t.Stage, t.Agent, t.seq)
	ctx, span := t.startCall(ctx, tool, key)
	var (
		rowp     *kv.JournalRow
		replayed bool
	)
	defer func() {
		var r kv.JournalRow
		if rowp != nil {
			r = *rowp
		}
		endCall(span, r, replayed, err)
	}()
	if ctx.Err() != nil {
		// Stopped before the call began: nothing ran, nothing to record.
		return nil, fmt.Errorf("%s: %w", name, context.Cause(ctx))
	}
	row := kv.JournalRow{Call: salvagetype.Call{Key: key, Job: t.Job, Chunk: t.Chunk, Epoch: t.Epoch, Stage: t.Stage, Agent: t.Agent, Seq: t.seq, Tool: name, System: tool.System, InputHash: hashInput(in), Status: salvagetype.CallInitiated, IdempotencyKey: kv.IdempotencyKey(t.Job, t.Chunk, t.Epoch, t.Stage, t.Agent, t.seq), TraceID: t.TraceID}}
	rowp = &row
	prev, seen := t.replay.get(key)
	if seen {
		if out, done, err := t.fromJournal(ctx, &row, prev); done {
			replayed = err == nil
			return out, err
		}
	}
	// From here on the system is asked: an open breaker refuses at once,
	// before any row is written — except for a link of a fallback chain,
	// whose refusal a resume must see to pass it over again.
	if err := t.allow(ctx, tool); err != nil {
		if link && (tool.Effect == nil || !seen || prev.Status == salvagetype.CallFailed) {
			return nil, t.refused(row, prev, seen, err)
		}
		return nil, err
	}
	if seen {
		if prev.Status == salvagetype.CallInitiated || prev.Status == salvagetype.CallUnknown {
			if out, done, err := t.settle(ctx, tool, prev); err != nil || done {
				return out, err
			}
		}
		row.Attempts = prev.Attempts
		row.CarryHistory(prev.JournalRow)
	}
	if err := t.begin(ctx, tool, &row, seen && prev.Status == salvagetype.CallInitiated); err != nil {
		return nil, err
	}
	at, err := t.attempts(ctx, tool, in, row.IdempotencyKey, link)
	row.Attempts += at.attempts
	row.Verified = row.Verified || at.verified
	row.FinishedAt = time.Now().UTC()
	if at.waited >= time.Millisecond {
		row.LimitWaitMS = float64(at.waited.Microseconds()) / 1000
	}
	row.LatencyMS = float64(row.FinishedAt.Sub(row.StartedAt).Microseconds()) / 1000
	if err != nil && ClassOf(err) == salvagetype.ClassCancelled {
		return nil, t.stopped(row, at.attempts, tool, err)
	}
	t.outcome(&row, tool, at, err)
	if werr := t.replay.putLater(row); werr != nil {
		return nil, errors.Join(err, fmt.Errorf("journal %s: %w", key, werr))
	}
	if err == nil {
		t.state.Completed = append(t.state.Completed, key)
	}
	return at.res.Output, err
}

// begin readies row for its call of tool: its start, a snapshot of the
// agent's state before an effect nothing undoes, and, for a call with a
// side effect, its row written before it runs (unless an earlier attempt's
// INITIATED row, written, stands): a crash mid-call then leaves
// INITIATED, an unknown outcome to verify. A pure call that dies in
// flight is simply made again; its one row is its outcome, written
// without holding the agent up.
func (t *turn) begin(ctx context.Context, tool *salvagetype.Tool, row *kv.JournalRow, initiated bool) error {
	row.StartedAt = time.Now().UTC()
	if tool.Effect != nil && !tool.Effect.Reversible && t.snaps != nil {
		// Nothing undoes what comes next: keep what the agent knew.
		if err := t.snaps.PutState(ctx, t.Job, t.Chunk, t.Epoch, t.Agent, t.state); err != nil {
			return err
		}
		t.stats.Snapshots.Add(1)
	}
	if tool.Effect != nil && !initiated {
		if _, err := t.replay.put(ctx, *row); err != nil {
			return fmt.Errorf("journal %s: %w", row.Key, err)
		}
	}
	return nil
}

// fromJournal answers a call the journal has seen (prev) when it may:
// done with its output when it succeeded (nothing is called again), done
// with an error when it was compensated or the agent diverged from its
// journal (another tool or input under the key). Otherwise the call goes
// on.
func (t *turn) fromJournal(ctx context.Context, row *kv.JournalRow, prev kv.StoredRow) (out json.RawMessage, done bool, err error) {
	if prev.Tool != row.Tool || prev.InputHash != row.InputHash {
		return nil, true, t.diverged(ctx, prev, row.Tool, row.InputHash)
	}
	switch prev.Status {
	case salvagetype.CallCompensated:
		return nil, true, salvagetype.Permanent(0, fmt.Errorf("%s was compensated; only a fresh epoch may call it again", row.Key))
	case salvagetype.CallSucceeded:
		row.Attempts, row.Usage = prev.Attempts, prev.Usage
		t.stats.Cached.Add(1)
		t.state.Completed = appendOnce(t.state.Completed, row.Key)
		return prev.Output, true, nil
	}
	return nil, false, nil
}

// refused records, in a row of its own, a link of a fallback chain its
// breaker refused (err), so that a resume passes it over again; it
// returns err, with the journal's error if the row could not be written.
func (t *turn) refused(row kv.JournalRow, prev kv.StoredRow, seen bool, err error) error {
	row.Status, row.Error, row.ErrorClass = salvagetype.CallFailed, streams.Clip(err.Error(), salvagetype.ErrorTextMax), salvagetype.ClassBreakerOpen.String()
	row.StartedAt, row.FinishedAt = time.Now().UTC(), time.Now().UTC()
	if seen {
		row.Attempts = prev.Attempts
		row.CarryHistory(prev.JournalRow)
	}
	if werr := t.replay.putLater(row); werr != nil {
		return errors.Join(err, fmt.Errorf("journal %s: %w", row.Key, werr))
	}
	return err
}

// attempted is what the attempts at one call came to.
type attempted struct {
	res salvagetype.ToolResult
	// attempts counts them (Stats is shared by the stage's agents).
	attempts int
	// unsure is set while the last attempt of a side effect may have
	// taken effect without saying so (no answer, a 5xx, …): the next
	// attempt, or the next run, asks the system first (invariant 9).
	unsure bool
	// verified says the outcome was learned by asking the system.
	verified bool
	// waited adds up the time the requests waited for a rate limit's
	// budget.
	waited time.Duration
}

// attempts makes the call of tool with input in (its idempotency key
// idemKey): tier-1 retries, each attempt asking the breaker again and,
// after one whose outcome is unknown, asking the system whether it took
// effect before trying again. A link of a fallback chain stops at a rate
// limit.
func (t *turn) attempts(ctx context.Context, tool *salvagetype.Tool, in json.RawMessage, idemKey string, link bool) (attempted, error) {
	var at attempted
	var estimate int64
	if t.limiter != nil {
		estimate = estimateTokens(in)
	}
	var stop func(error) bool
	if link {
		stop = func(err error) bool { return ClassOf(err) == salvagetype.ClassRateLimited }
	}
	err := t.exec.DoUnless(ctx, t.stats, tool.Name, stop, func(ctx context.Context) error {
		if at.attempts > 0 {
			// The breaker may have opened while this call waited.
			if err := t.allow(ctx, tool); err != nil {
				return err
			}
		}
		at.attempts++
		if at.unsure {
			var v salvagetype.Verification
			err := t.guarded(ctx, tool, 0, false, &at.waited, func() (Spent, error) {
				var err error
				v, err = VerifyEffect(ctx, tool, idemKey)
				return Spent{}, err
			})
			if err != nil {
				// Still unknown: the row says so, whatever ends the call.
				return err
			}
			if v.Applied {
				t.stats.Verified.Add(1)
				at.verified = true
				at.res = salvagetype.ToolResult{Output: v.Output, ResourceID: v.ResourceID}
				return nil
			}
			at.unsure = false
		}
		err := t.guarded(ctx, tool, estimate, link, &at.waited, func() (Spent, error) {
			var err error
			at.res, err = Invoke(ctx, tool, salvagetype.ToolCall{Job: t.Job, Chunk: t.Chunk, Stage: t.Stage, Epoch: t.Epoch, Agent: t.Agent, Seq: t.seq,
				IdempotencyKey: idemKey, Input: in, TraceID: t.TraceID})
			if err == nil {
				err = checkResult(tool.Name, at.res)
			}
			return spentBy(at.res), err
		})
		at.unsure = err != nil && tool.Effect != nil && OutcomeUnknown(err)
		return err
	})
	return at, err
}

// outcome records in row how the call ended: failed (unknown while a side
// effect may have taken effect), or succeeded, with its output, usage (and
// cost) and the fingerprint of its effect.
func (t *turn) outcome(row *kv.JournalRow, tool *salvagetype.Tool, at attempted, err error) {
	if err != nil {
		row.Status, row.Error, row.ErrorClass = salvagetype.CallFailed, streams.Clip(err.Error(), salvagetype.ErrorTextMax), ClassOf(err).String()
		if at.unsure {
			// It may have taken effect: the next run verifies first.
			row.Status = salvagetype.CallUnknown
		}
		row.ErrorStatus = StatusOf(err)
		row.RetryableAfterCompensation = tool.RetryableAfterCompensation
		return
	}
	row.Status, row.Output, row.Usage = salvagetype.CallSucceeded, at.res.Output, at.res.Usage
	if u := at.res.Usage; u != nil {
		t.stats.PromptTokens.Add(u.PromptTokens)
		t.stats.CompletionTokens.Add(u.CompletionTokens)
		t.stats.CostMicros.Add(t.prices.CostMicros(u))
	}
	row.Fingerprint = fingerprint(tool, row.IdempotencyKey, at.res.ResourceID)
}

// stopped records a call Salvage stopped. Stopped because the job was
// cancelled or a sibling agent failed, the row says CANCELLED under the
// call's own key and cause — or UNKNOWN when a side effect was already
// under way, so the next run verifies it. Any other stop (a stale or
// draining worker) writes nothing: a stale worker must not touch rows
// another worker may own, and the INITIATED row already tells the next
// run to verify or repeat the call.
func (t *turn) stopped(row kv.JournalRow, attempts int, tool *salvagetype.Tool, err error) error {
	if !errors.Is(err, errSiblingFailed) && !errors.Is(err, ErrJobCancelled) {
		return err
	}
	row.Status, row.Error, row.ErrorClass = salvagetype.CallCancelled, streams.Clip(err.Error(), salvagetype.ErrorTextMax), salvagetype.ClassCancelled.String()
	if attempts > 0 && tool.Effect != nil {
		row.Status = salvagetype.CallUnknown
	}
	if werr := t.replay.putLater(row); werr != nil {
		return errors.Join(err, fmt.Errorf("journal %s: %w", row.Key, werr))
	}
	return err
}

// diverged handles an agent that makes another call at a key whose row
// records a different one. The old row is never overwritten: if its call
// may have taken effect it is verified now and recorded — SUCCEEDED and
// marked orphan, so the envelope lists it for compensation or escalation
// — and the agent fails permanently.
func (t *turn) diverged(ctx context.Context, prev kv.StoredRow, name, inputHash string) error {
	err := salvagetype.Permanent(0, fmt.Errorf("%w: %s holds %s(%s), now %s(%s)", ErrDiverged, prev.Key, prev.Tool, prev.InputHash, name, inputHash))
	old, terr := t.tools.Get(prev.Tool)
	if terr != nil || old.Effect == nil {
		return err
	}
	row := prev.JournalRow
	row.Orphan = true
	if prev.Status == salvagetype.CallInitiated || prev.Status == salvagetype.CallUnknown {
		v, verr := VerifyEffect(ctx, old, prev.IdempotencyKey)
		if verr != nil {
			return errors.Join(err, fmt.Errorf("verify orphan %s: %w", prev.Key, verr))
		}
		row = Settle(old, row, v, time.Now().UTC())
	}
	if _, werr := t.replay.put(ctx, row); werr != nil {
		return errors.Join(err, fmt.Errorf("record orphan %s: %w", prev.Key, werr))
	}
	return err
}

// settle decides an unknown outcome: a side effect is verified with the
// external system; if it took effect the row becomes SUCCEEDED (verified)
// and done is true. A pure read is simply called again.
func (t *turn) settle(ctx context.Context, tool *salvagetype.Tool, prev kv.StoredRow) (json.RawMessage, bool, error) {
	if tool.Effect == nil {
		return nil, false, nil
	}
	var v salvagetype.Verification
	tries := 0
	err := t.exec.Do(ctx, t.stats, tool.Name+".verify", func(ctx context.Context) error {
		if tries++; tries > 1 {
			if err := t.allow(ctx, tool); err != nil {
				return err
			}
		}
		return t.guarded(ctx, tool, 0, false, nil, func() (Spent, error) {
			var err error
			v, err = VerifyEffect(ctx, tool, prev.IdempotencyKey)
			return Spent{}, err
		})
	})
	if err != nil {
		return nil, false, fmt.Errorf("verify %s: %w", prev.Key, err)
	}
	if !v.Applied {
		return nil, false, nil
	}
	row := Settle(tool, prev.JournalRow, v, time.Now().UTC())
	if _, err := t.replay.put(ctx, row); err != nil {
		return nil, false, fmt.Errorf("journal %s: %w", prev.Key, err)
	}
	t.stats.Verified.Add(1)
	t.state.Completed = appendOnce(t.state.Completed, prev.Key)
	return v.Output, true, nil
}

// allow asks the gate whether the chunk may call tool's system now: nil,
// or an error wrapping ErrBreakerOpen. A tool without a System, or a turn
// without a gate, is always allowed.
func (t *turn) allow(ctx context.Context, tool *salvagetype.Tool) error {
	if t.gate == nil || tool.System == "" {
		return nil
	}
	if err := t.gate.Allow(ctx, tool.System, kv.ChunkKey(t.Job, t.Chunk)); err != nil {
		return fmt.Errorf("%s: %w", tool.Name, err)
	}
	return nil
}

// guarded runs one request to tool's system, paced by the limiter (tokens:
// what it is estimated to spend; fn returns what it spent), and tells the
// limiter and the gate how it went.
func (t *turn) guarded(ctx context.Context, tool *salvagetype.Tool, tokens int64, link bool, waited *time.Duration, fn func() (Spent, error)) error {
	var done func(Spent, error)
	if t.limiter != nil {
		var maxWait time.Duration
		if link {
			maxWait = t.fallbackAfter
		}
		var err error
		var w time.Duration
		done, w, err = t.limiter.Acquire(ctx, tool, tokens, maxWait)
		if waited != nil {
			*waited += w
		}
		if err != nil {
			return err
		}
	}
	spent, err := fn()
	if done != nil {
		done(spent, err)
	}
	if t.gate != nil && tool.System != "" && ctx.Err() == nil {
		t.gate.Done(ctx, tool.System, kv.ChunkKey(t.Job, t.Chunk), err)
	}
	return err
}

func fingerprint(tool *salvagetype.Tool, key, resourceID string) *salvagetype.Fingerprint {
	if tool.Effect == nil {
		return nil
	}
	fp := &salvagetype.Fingerprint{System: tool.System, ResourceID: resourceID, Reversible: tool.Effect.Reversible}
	if tool.Effect.Reversible {
		fp.Compensation = tool.Effect.Compensation
		fp.CompensationKey = compensationKey(key)
	}
	return fp
}

// compensationKey is the deterministic idempotency key of the call that
// undoes the effect made under key, so a repeated compensation never
// refunds twice.
func compensationKey(key string) string { return hashInput([]byte("compensate:" + key)) }

// Sorted returns the rows in the order they were first written (stream
// sequence of their latest write breaks ties the same way for all).
func (rows Rows) Sorted() []kv.StoredRow {
	out := make([]kv.StoredRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.StartedAt.Equal(b.StartedAt) {
			return a.StartedAt.Before(b.StartedAt)
		}
		return a.Seq < b.Seq
	})
	return out
}

func appendOnce(keys []string, key string) []string {
	for _, k := range keys {
		if k == key {
			return keys
		}
	}
	return append(keys, key)
}

// hashInput is the input hash recorded in a journal row: the first 16
// bytes of the input's SHA-256, in hex.
func hashInput(input []byte) string {
	h := sha256.Sum256(input)
	return hex.EncodeToString(h[:16])
}
