package salvage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// The tests in this file hold Salvage to its promise at the operator's
// edges — cancel, replay, verification that fails, a service that answers
// late, a job id used twice, budgets, a reply too large — against a
// ledger that counts every effect by idempotency key: never lost, never
// repeated, never left standing without a record.

// effect is one call the ledger took: where it ran and with which key.
type effect struct {
	key   string
	chunk int
	epoch int
	tool  string
}

// ledger is the external systems of the "orders" pipeline: a payment
// provider (charge, undone by refund) and a mail server (email, which
// nothing undoes). It applies whatever reaches it — a request already on
// the wire lands even if the caller stops waiting — and records each
// application, so a test can count effects per key.
type ledger struct {
	mu sync.Mutex
	// applied lists every application, in order; a key twice is a
	// duplicate.
	applied []effect
	// refunds counts compensations per idempotency key of the charge.
	refunds map[string]int
	// inflight counts charges being processed.
	inflight int
	// chargeTook is how long a charge takes; the provider ignores the
	// caller giving up (the request was sent).
	chargeTook time.Duration
	// holdAfter, when above 0, makes every charge that starts once
	// holdAfter charges have landed wait for its caller to give up (at
	// most holdMax) before it lands: a charge sure to be on the wire when
	// the worker sees its job cancelled, however slow the machine.
	holdAfter int
	// chargeAnswer, when set, is what a charge answers after it applied.
	chargeAnswer error
	// verifyErr, when set, is what verification answers.
	verifyErr error
	// emailBroken refuses every email, permanently.
	emailBroken bool
}

// holdMax bounds a held charge's wait for its caller to give up, so that a
// worker that never does fails the test's checks instead of hanging it.
const holdMax = 30 * time.Second

func newLedger() *ledger { return &ledger{refunds: map[string]int{}} }

func (l *ledger) set(f func(l *ledger)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// has reports whether key was applied, and its effect.
func (l *ledger) has(key string) (effect, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.applied {
		if e.key == key {
			return e, true
		}
	}
	return effect{}, false
}

func (l *ledger) count(tool string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.applied {
		if e.tool == tool {
			n++
		}
	}
	return n
}

func (l *ledger) charge(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
	l.mu.Lock()
	l.inflight++
	took, answer := l.chargeTook, l.chargeAnswer
	hold := l.holdAfter > 0 && len(l.applied) >= l.holdAfter
	l.mu.Unlock()
	if hold {
		select {
		case <-ctx.Done():
		case <-time.After(holdMax):
		}
	}
	select {
	case <-time.After(took):
	case <-ctx.Done():
		// The caller gave up; the request is on the wire and lands.
		<-time.After(took)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	l.applied = append(l.applied, effect{key: c.IdempotencyKey, chunk: c.Chunk, epoch: c.Epoch, tool: "charge"})
	if ctx.Err() != nil {
		return salvage.ToolResult{}, ctx.Err()
	}
	if answer != nil {
		return salvage.ToolResult{}, answer
	}
	return salvage.ToolResult{Output: json.RawMessage(fmt.Sprintf(`"ch_%d_%d"`, c.Chunk, c.Epoch)), ResourceID: fmt.Sprintf("ch_%d_%d", c.Chunk, c.Epoch)}, nil
}

func (l *ledger) verify(tool string) func(context.Context, string) (salvage.Verification, error) {
	return func(_ context.Context, key string) (salvage.Verification, error) {
		l.mu.Lock()
		err := l.verifyErr
		l.mu.Unlock()
		if err != nil {
			return salvage.Verification{}, err
		}
		e, ok := l.has(key)
		if !ok || e.tool != tool {
			return salvage.Verification{}, nil
		}
		id := fmt.Sprintf("ch_%d_%d", e.chunk, e.epoch)
		return salvage.Verification{Applied: true, ResourceID: id, Output: json.RawMessage(`"` + id + `"`)}, nil
	}
}

// pipeline is "orders": stage 1 charges the card, stage 2 emails the
// customer. A chunk is one order, a number.
func (l *ledger) pipeline() *salvage.Pipeline {
	step := func(tool string) func(context.Context, *salvage.Turn) (any, error) {
		return func(ctx context.Context, t *salvage.Turn) (any, error) {
			return t.Tool(ctx, tool, t.Input)
		}
	}
	return &salvage.Pipeline{
		Name: "orders",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var n int
			if err := json.Unmarshal(in, &n); err != nil || n < 1 {
				return nil, fmt.Errorf("%w: want a count of orders", salvage.ErrBadInput)
			}
			out := make([]json.RawMessage, n)
			for i := range out {
				out[i] = json.RawMessage(fmt.Sprint(i + 1))
			}
			return out, nil
		},
		Stages: []salvage.Stage{
			{Name: "pay", Agents: []salvage.Agent{{Name: "cashier", Run: step("charge")}}},
			{Name: "notify", Agents: []salvage.Agent{{Name: "mailer", Run: step("email")}}},
		},
		Tools: []salvage.Tool{
			{Name: "charge", System: "payments", Call: l.charge, Effect: &salvage.SideEffect{Reversible: true, Compensation: "refund", Verify: l.verify("charge")}},
			{Name: "refund", System: "payments", Call: func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
				var in salvage.CompensationInput
				if err := json.Unmarshal(c.Input, &in); err != nil {
					return salvage.ToolResult{}, salvage.Permanent(400, err)
				}
				l.mu.Lock()
				defer l.mu.Unlock()
				l.refunds[in.Key]++
				return salvage.ToolResult{Output: json.RawMessage(`"refunded"`)}, nil
			}},
			{Name: "email", System: "mail", Effect: &salvage.SideEffect{Verify: l.verify("email")}, Call: func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
				l.mu.Lock()
				defer l.mu.Unlock()
				if l.emailBroken {
					return salvage.ToolResult{}, salvage.Permanent(422, errors.New("mailbox refused"))
				}
				l.applied = append(l.applied, effect{key: c.IdempotencyKey, chunk: c.Chunk, epoch: c.Epoch, tool: "email"})
				return salvage.ToolResult{Output: json.RawMessage(`"sent"`), ResourceID: fmt.Sprintf("mail_%d_%d", c.Chunk, c.Epoch)}, nil
			}},
		},
	}
}

// natsMsg is a message to subject with data and one header.
func natsMsg(subject string, data []byte, header, value string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(header, value)
	return m
}

// envelopes returns every envelope of job.
func envelopes(t *testing.T, c *salvage.Client, job string) []salvage.EnvelopeRecord {
	t.Helper()
	var out []salvage.EnvelopeRecord
	for page := (&salvage.Page{Limit: salvage.PageMax}); ; {
		list, err := c.EnvelopeList(context.Background(), salvage.EnvelopeFilter{Job: job}, page)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, list.Envelopes...)
		if list.NextOffset == 0 {
			return out
		}
		page = &salvage.Page{Offset: list.NextOffset, Limit: salvage.PageMax}
	}
}

// settled waits until job settled (salvagetest.Settled: its record
// finished, each of its envelopes at an outcome) and returns its
// envelopes as the client lists them. Every caller expects at least one.
func settled(t *testing.T, srv *salvagetest.Server, c *salvage.Client, job string, timeout time.Duration) []salvage.EnvelopeRecord {
	t.Helper()
	salvagetest.Settled(t, srv.JS, job, timeout, func(s salvagetest.Settlement) bool { return len(s.Envelopes) > 0 })
	return envelopes(t, c, job)
}

// chunks returns every chunk of job by number.
func chunks(t *testing.T, c *salvage.Client, job string) map[int]salvage.Chunk {
	t.Helper()
	out := map[int]salvage.Chunk{}
	for page := (&salvage.Page{Limit: salvage.PageMax}); ; {
		st, err := c.ChunkList(context.Background(), job, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range st.Chunks {
			out[ch.Chunk] = ch
		}
		if st.NextOffset == 0 {
			return out
		}
		page = &salvage.Page{Offset: st.NextOffset, Limit: salvage.PageMax}
	}
}

// accountFor checks the ledger against what Salvage recorded of job: no
// key applied twice, and every charge either belongs to the epoch of a
// chunk that finished (it stands by design), was refunded exactly once,
// or is named — by idempotency key — in the left list of an escalated
// envelope. It returns how many charges were refunded and left named.
func accountFor(t *testing.T, c *salvage.Client, l *ledger, job string, envs []salvage.EnvelopeRecord) (refunded, named int) {
	t.Helper()
	cs := chunks(t, c, job)
	left := map[string]bool{} // idempotency keys escalations name
	for _, e := range envs {
		if e.Status == salvage.EnvelopeEscalated {
			for _, le := range e.Left {
				left[le.IdempotencyKey] = true
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, e := range l.applied {
		if seen[e.key] {
			t.Errorf("%s %s applied twice (chunk %d epoch %d)", e.tool, e.key, e.chunk, e.epoch)
		}
		seen[e.key] = true
		ch := cs[e.chunk]
		done := ch.Status == salvage.ChunkDone && ch.Epoch == e.epoch
		switch n := l.refunds[e.key]; {
		case n > 1:
			t.Errorf("charge %s refunded %d times", e.key, n)
		case done && n > 0:
			t.Errorf("charge %s of done chunk %d refunded", e.key, e.chunk)
		case done:
		case n == 1:
			refunded++
		case left[e.key]:
			named++
		default:
			t.Errorf("%s %s of chunk %d (epoch %d, chunk %s at epoch %d) stands unaccounted: not refunded, not named by an escalation",
				e.tool, e.key, e.chunk, e.epoch, ch.Status, ch.Epoch)
		}
	}
	return refunded, named
}

// TestCancelSettlesCallsInFlight is case 1: a job whose charges take
// 500ms is cancelled while charges are on the wire (from the fourth on,
// a charge waits for its caller to give up, so that it is still on the
// wire when the worker sees the cancel). Those charges land;
// their chunks end cancelled-at-stage-1 and an envelope each settles what
// they did: verified, refunded newest first. Chunks that finished stay
// done with their charge.
func TestCancelSettlesCallsInFlight(t *testing.T) {
	t.Parallel()
	l := newLedger()
	l.chargeTook = 500 * time.Millisecond
	l.holdAfter = 3
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{l.pipeline()}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "orders", 30, nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.applied) >= 3 && l.inflight > 0
	}, "no charge in flight")
	if _, err := c.JobCancel(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	j := salvagetest.WaitJob(t, c, id, time.Minute)
	if j.Status != salvage.JobCancelled {
		t.Fatalf("job = %+v", j)
	}
	envs := settled(t, srv, c, id, time.Minute)
	stopped := 0
	for _, e := range envs {
		if e.Stopped != "" {
			stopped++
			if e.Status != salvage.EnvelopeAbandoned || len(e.Left) != 0 {
				t.Errorf("settlement %s: %s, left %v; want abandoned with nothing left", e.ID, e.Status, e.Left)
			}
		}
	}
	refunded, named := accountFor(t, c, l, id, envs)
	if stopped == 0 || refunded == 0 || refunded != stopped || named != 0 {
		t.Fatalf("%d settlement envelopes, %d refunds, %d left named; want one refund per cancelled chunk that charged", stopped, refunded, named)
	}
	for n, ch := range chunks(t, c, id) {
		_, cancelled := ch.Status.Cancelled()
		if ch.Status != salvage.ChunkDone && !cancelled {
			t.Errorf("chunk %d ended %s", n, ch.Status)
		}
		if cancelled && ch.Envelope != "" && ch.Reason == "" {
			t.Errorf("chunk %d cancelled with envelope %s but no reason", n, ch.Envelope)
		}
	}
	// The job's record names the envelopes that settled its cancel.
	if len(j.Explanation) == 0 {
		t.Errorf("a cancelled job with settled effects explains nothing: %+v", j)
	}
}

// TestVerificationThatFailsNamesTheCall is case 2: a charge is taken but
// never answered, and its verification fails — a garbage reply, or a 500
// every time. The call stays unknown: verified again within bounds, then
// escalated naming the charge; never a dead end, never "no effects".
func TestVerificationThatFailsNamesTheCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		verifyErr error
	}{
		{"garbage reply", salvage.Permanent(0, errors.New(`verify reply is not {"applied", ...}`))},
		{"500 every time", salvage.Transient(500, errors.New("payment API: internal error"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger()
			l.chargeAnswer = salvage.Timeout(errors.New("payment API: no answer"))
			l.verifyErr = tc.verifyErr
			srv := salvagetest.StartServer(t)
			c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{l.pipeline()}, MaxDeliver: 1, Retries: 1})
			ctx := context.Background()
			id, err := c.JobSubmit(ctx, "orders", 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobIncomplete {
				t.Fatalf("job = %+v", j)
			}
			envs := settled(t, srv, c, id, time.Minute)
			if len(envs) != 1 || envs[0].Status != salvage.EnvelopeEscalated {
				t.Fatalf("envelopes = %+v, want one escalated", envs)
			}
			e := envs[0]
			d, err := c.EnvelopeGet(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Envelope.InFlightEntries) != 1 || d.Envelope.Category != salvage.CategoryToolTimeout {
				t.Errorf("envelope %s in flight %v; want TOOL_TIMEOUT naming the charge", d.Envelope.Category, d.Envelope.InFlightEntries)
			}
			if len(e.Left) != 1 || !e.Left[0].Unknown || e.Left[0].Tool != "charge" || e.Left[0].JournalKey != d.Envelope.InFlightEntries[0] {
				t.Fatalf("left = %+v, want the charge whose outcome is unknown", e.Left)
			}
			if refunded, named := accountFor(t, c, l, id, envs); refunded != 0 || named != 1 || l.count("charge") != 1 {
				t.Fatalf("%d refunded, %d named, %d charges", refunded, named, l.count("charge"))
			}
		})
	}
}

// TestReplayAfterCompensationRunsFresh is case 3: an order whose email
// fails permanently has its charge refunded and its envelope abandoned.
// Once the mail server is fixed, a replay runs the chunk fresh in a new
// epoch — a new charge under a new key, the email sent — instead of
// finishing on the refunded charge. A replay that cannot be honoured (the
// job was cancelled) is refused.
func TestReplayAfterCompensationRunsFresh(t *testing.T) {
	t.Parallel()
	l := newLedger()
	l.emailBroken = true
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{l.pipeline()}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "orders", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobIncomplete {
		t.Fatalf("job = %+v", j)
	}
	envs := settled(t, srv, c, id, time.Minute)
	if len(envs) != 2 {
		t.Fatalf("envelopes = %+v", envs)
	}
	for _, e := range envs {
		if e.Status != salvage.EnvelopeAbandoned || e.Category != salvage.CategoryPartialExecution {
			t.Fatalf("envelope %+v, want PARTIAL_EXECUTION abandoned", e)
		}
	}
	if ch := chunks(t, c, id)[1]; !ch.Compensated || ch.Epoch != 0 {
		t.Fatalf("chunk 1 after compensation = %+v", ch)
	}
	l.set(func(l *ledger) { l.emailBroken = false })

	// Through the API: chunk 1 runs fresh.
	byAPI, byHand := envs[0], envs[1]
	if byAPI.Chunk != 1 {
		byAPI, byHand = byHand, byAPI
	}
	// Asked first, the server says the replay runs fresh and names the
	// charge it makes again (the refunded one's resource).
	if d, err := c.EnvelopeGet(ctx, byAPI.ID); err != nil || !d.Actions.Replay.Allowed || len(d.Actions.Replay.Effects) != 1 ||
		!strings.HasPrefix(d.Actions.Replay.Effects[0], "charge (") || !strings.Contains(d.Actions.Replay.Warning, "runs fresh") || !d.Actions.Resolve.Allowed {
		t.Fatalf("the actions of %s: %+v, %v", byAPI.ID, d.Actions, err)
	}
	if _, err := c.EnvelopeReplay(ctx, byAPI.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	// By hand, as the README shows: chunk 2 runs fresh too.
	d, err := c.EnvelopeGet(ctx, byHand.ID)
	if err != nil {
		t.Fatal(err)
	}
	m := natsMsg(d.Envelope.Original.Subject, d.Envelope.Original.Data, "Salvage-Replay-Of", byHand.ID)
	if _, err := srv.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	var j *salvage.Job
	salvagetest.Eventually(t, time.Minute, func() bool {
		j, err = c.JobGet(ctx, id)
		return err == nil && j.Status == salvage.JobDone
	}, "replayed job not done: %+v", &j)
	envs = settled(t, srv, c, id, time.Minute)
	// Each replay is on record: the API's by its caller, the one by hand
	// by the worker that took it.
	for _, tc := range []struct {
		env salvage.EnvelopeRecord
		via string
	}{{byAPI, salvage.ViaAPI}, {byHand, "nats"}} {
		a, err := c.AuditList(ctx, salvage.AuditQuery{Envelope: tc.env.ID})
		if err != nil || len(a.Items) != 1 || a.Items[0].Action != salvage.AuditReplay || a.Items[0].Actor.Via != tc.via || a.Items[0].Outcome != salvage.AuditOK {
			t.Errorf("the audit of %s's replay: %+v, %v", tc.via, a, err)
		}
	}
	for _, e := range envs {
		if e.Status != salvage.EnvelopeResolved || e.ResolvedBy != "chunk" || e.Replays != 1 {
			t.Errorf("envelope %s is %s by %q after %d replays; want resolved by its chunk, replayed once", e.ID, e.Status, e.ResolvedBy, e.Replays)
		}
	}
	for n, ch := range chunks(t, c, id) {
		if ch.Status != salvage.ChunkDone || ch.Epoch != 1 || ch.Compensated {
			t.Errorf("chunk %d = %s epoch %d compensated %v; want done in epoch 1", n, ch.Status, ch.Epoch, ch.Compensated)
		}
	}
	if refunded, named := accountFor(t, c, l, id, envs); refunded != 2 || named != 0 || l.count("charge") != 4 || l.count("email") != 2 {
		t.Fatalf("%d refunded, %d named, %d charges, %d emails; want the 2 first charges refunded, 2 fresh ones and 2 emails", refunded, named, l.count("charge"), l.count("email"))
	}
}

// TestReplayThatCannotBeHonouredIsRefused: an envelope whose chunk's job
// was cancelled, and one whose compensated effects sit beside one that
// stands, are refused — by the API, and in a bulk dry run, which counts
// them refused (it counted them unchanged: "already so").
func TestReplayThatCannotBeHonouredIsRefused(t *testing.T) {
	t.Parallel()
	l := newLedger()
	p := l.pipeline()
	// A third stage that fails, after the irreversible email.
	p.Stages = append(p.Stages, salvage.Stage{Name: "ship", Agents: []salvage.Agent{{Name: "shipper", Run: func(context.Context, *salvage.Turn) (any, error) {
		return nil, salvage.Permanent(422, errors.New("no address"))
	}}}})
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "orders", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.WaitJob(t, c, id, time.Minute)
	envs := settled(t, srv, c, id, time.Minute)
	if len(envs) != 1 || envs[0].Status != salvage.EnvelopeEscalated || envs[0].Category != salvage.CategoryCompensationNeeded {
		t.Fatalf("envelopes = %+v", envs)
	}
	if len(envs[0].Left) != 1 || envs[0].Left[0].Tool != "email" {
		t.Fatalf("left = %+v, want the email", envs[0].Left)
	}
	// The envelope's page is told before anyone clicks: replay refused,
	// with the reason the replay would give.
	if d, err := c.EnvelopeGet(ctx, envs[0].ID); err != nil || d.Actions.Replay.Allowed || !strings.Contains(d.Actions.Replay.Reason, "resolve it by hand") {
		t.Fatalf("the actions of the escalated envelope: %+v, %v", d.Actions, err)
	}
	if _, err := c.EnvelopeReplay(ctx, envs[0].ID, "bob"); !errors.Is(err, salvage.ErrReplayRefused) {
		t.Fatalf("replay of a chunk with its charge refunded and its email sent: %v, want ErrReplayRefused", err)
	}
	res, err := c.EnvelopeBulk(ctx, salvage.BulkRequest{Action: salvage.BulkReplay, Filter: salvage.EnvelopeFilter{Job: id}, DryRun: true})
	if err != nil || res.Acted != 0 || res.Refused != 1 || res.Unchanged != 0 {
		t.Fatalf("bulk dry run = %+v, %v; want it counted refused", res, err)
	}
	if res, err := c.EnvelopeBulk(ctx, salvage.BulkRequest{Action: salvage.BulkReplay, Filter: salvage.EnvelopeFilter{Job: id}}); err != nil || res.Acted != 0 || res.Refused != 1 {
		t.Fatalf("bulk replay = %+v, %v; want it refused", res, err)
	}
	if r, err := c.EnvelopeGet(ctx, envs[0].ID); err != nil || r.Record.Status != salvage.EnvelopeEscalated || r.Record.Replays != 0 {
		t.Fatalf("a refused replay changed the envelope: %+v, %v", r.Record, err)
	}
	if l.count("charge") != 1 || l.count("email") != 1 {
		t.Fatalf("a refused replay made calls: %d charges, %d emails", l.count("charge"), l.count("email"))
	}
}
