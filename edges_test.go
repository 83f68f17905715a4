package salvage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// ticketDesk is a tool served on NATS subjects, in the one-at-a-time way
// of a NATS micro endpoint: tools.refund refunds a ticket (an effect per
// request: it does not deduplicate, so a repeated request refunds twice),
// tools.refund.verify says whether a key was applied. behave decides,
// per request n, what the desk does.
type ticketDesk struct {
	mu        sync.Mutex
	applied   map[string]int // idempotency key -> refunds made
	requests  int
	verifies  int
	deadlines []time.Duration // how long each request had before its Salvage-Deadline
	behave    func(n int, r micro.Request) (apply bool, code string, h micro.Headers)
}

func serveDesk(t *testing.T, srv *salvagetest.Server, d *ticketDesk) {
	t.Helper()
	svc, err := micro.AddService(srv.Conn, micro.Config{Name: "ticket-desk", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	err = svc.AddEndpoint("refund", micro.HandlerFunc(func(r micro.Request) {
		key := r.Headers().Get(salvage.HeaderIdempotencyKey)
		deadline, _ := time.Parse(time.RFC3339Nano, r.Headers().Get(salvage.HeaderDeadline))
		d.mu.Lock()
		d.requests++
		n := d.requests
		d.deadlines = append(d.deadlines, time.Until(deadline))
		d.mu.Unlock()
		apply, code, h := d.behave(n, r)
		if apply && time.Now().Before(deadline) {
			// The contract: never apply after Salvage-Deadline.
			d.mu.Lock()
			d.applied[key]++
			d.mu.Unlock()
		}
		if code != "" {
			_ = r.Error(code, "desk trouble", nil, micro.WithHeaders(h))
			return
		}
		_ = r.Respond([]byte(`{"refund":"ok"}`), micro.WithHeaders(micro.Headers{salvage.HeaderResourceID: []string{"rf-" + key[:8]}}))
	}), micro.WithEndpointSubject("tools.refund"))
	if err != nil {
		t.Fatal(err)
	}
	err = svc.AddEndpoint("verify", micro.HandlerFunc(func(r micro.Request) {
		var req salvage.VerifyRequest
		_ = json.Unmarshal(r.Data(), &req)
		d.mu.Lock()
		d.verifies++
		n := d.applied[req.Key]
		d.mu.Unlock()
		_ = r.RespondJSON(salvage.VerifyReply{Applied: n > 0, ResourceID: "rf-" + req.Key[:8]})
	}), micro.WithEndpointSubject("tools.refund.verify"))
	if err != nil {
		t.Fatal(err)
	}
}

func deskPipeline(timeout time.Duration) *salvage.Pipeline {
	return &salvage.Pipeline{
		Name:  "tickets",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{{Name: "refund", Agents: []salvage.Agent{{Name: "clerk", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			return t.Tool(ctx, "refund", t.Input)
		}}}}},
		Tools: []salvage.Tool{{Name: "refund", Subject: "tools.refund", Timeout: timeout,
			Effect: &salvage.SideEffect{VerifySubject: "tools.refund.verify"}}},
	}
}

// TestServiceAnswersThatMayHaveApplied is case 4: a service that applied
// a refund and then answered 503, or took so long that Salvage stopped
// waiting, is asked on its verify subject before the refund is requested
// again — one refund per ticket. A service that says Salvage-Outcome:
// not-applied is asked again without a verify. Every request carries a
// Salvage-Deadline ahead of Salvage's own timeout, after which a service
// must not apply it.
func TestServiceAnswersThatMayHaveApplied(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	for _, tc := range []struct {
		name         string
		behave       func(n int, r micro.Request) (bool, string, micro.Headers)
		wantRequests int
		wantVerifies int
	}{
		{"503 after the refund landed", func(n int, _ micro.Request) (bool, string, micro.Headers) {
			if n == 1 {
				return true, "503", nil
			}
			return true, "", nil
		}, 1, 1},
		{"too slow: past the deadline it must not apply", func(n int, _ micro.Request) (bool, string, micro.Headers) {
			if n == 1 {
				time.Sleep(timeout + 200*time.Millisecond) // the fault: an answer after the caller's deadline
			}
			return true, "", nil
		}, 2, 1},
		{"a 500 that says it did not apply", func(n int, _ micro.Request) (bool, string, micro.Headers) {
			if n == 1 {
				return false, "500", micro.Headers{salvage.HeaderOutcome: []string{salvage.OutcomeNotApplied}}
			}
			return true, "", nil
		}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := salvagetest.StartServer(t)
			desk := &ticketDesk{applied: map[string]int{}, behave: tc.behave}
			serveDesk(t, srv, desk)
			c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{deskPipeline(timeout)}})
			ctx := context.Background()
			id, err := c.JobSubmit(ctx, "tickets", map[string]string{"ticket": "T-1"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone {
				t.Fatalf("job = %+v", j)
			}
			desk.mu.Lock()
			defer desk.mu.Unlock()
			if len(desk.applied) != 1 || desk.requests != tc.wantRequests || desk.verifies != tc.wantVerifies {
				t.Fatalf("refunds by key %v after %d requests and %d verifies; want one refund, %d requests, %d verifies",
					desk.applied, desk.requests, desk.verifies, tc.wantRequests, tc.wantVerifies)
			}
			for key, n := range desk.applied {
				if n != 1 {
					t.Fatalf("ticket refunded %d times under %s", n, key)
				}
			}
			for _, left := range desk.deadlines {
				if left > timeout-salvage.DeadlineGrace(timeout)+100*time.Millisecond || left <= 0 {
					t.Fatalf("a request had %s before its Salvage-Deadline; Salvage waits %s", left, timeout)
				}
			}
			tr, err := c.JobTrace(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			call := tr.Chunks[0].Calls[0]
			if call.Status != salvage.CallSucceeded || call.Attempts < 1 || call.Fingerprint == nil || !strings.HasPrefix(call.Fingerprint.ResourceID, "rf-") {
				t.Fatalf("journaled refund = %+v", call)
			}
		})
	}
}

// TestAJobIDNamesOneInput is case 5: a job id submitted again with the
// same input is the same job (its id, nothing new runs); with another
// input it is refused — by Submit, by salvage.api.jobs.submit (409) and,
// for a plain nats pub, by the splitter with a rejection event. A
// rejection of an older message under an id is not the rejection of a
// later submission under it.
func TestAJobIDNamesOneInput(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, Roles: salvage.AllRoles()})
	ctx := context.Background()
	opts := &salvage.SubmitOpts{JobID: "order-42"}
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"one"}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	first := salvagetest.WaitJob(t, c, id, time.Minute)
	if first.Status != salvage.JobDone || first.InputHash == "" {
		t.Fatalf("job = %+v", first)
	}
	if again, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"one"}}, opts); err != nil || again != id {
		t.Fatalf("the same job again: %s, %v", again, err)
	}
	if _, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"two", "three"}}, opts); !errors.Is(err, salvage.ErrJobExists) {
		t.Fatalf("another input under the same id: %v, want ErrJobExists", err)
	}
	// The service answers 409.
	reply, err := srv.Conn.Request("salvage.api.jobs.submit", []byte(`{"pipeline":"words","job_id":"order-42","input":{"words":["other"]}}`), 10*time.Second)
	if err != nil || reply.Header.Get(micro.ErrorCodeHeader) != "409" {
		t.Fatalf("jobs.submit of another input: %v %v", reply, err)
	}
	// A plain publish is refused by the splitter, with an event.
	rejections, err := srv.Conn.SubscribeSync("salvage.events.rejected.duplicate-job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(ctx, "salvage.jobs.words", []byte(`{"job_id":"order-42","input":{"words":["four"]}}`)); err != nil {
		t.Fatal(err)
	}
	if m, err := rejections.NextMsg(20 * time.Second); err != nil || !strings.Contains(string(m.Data), "order-42") {
		t.Fatalf("no duplicate-job rejection: %v", err)
	}
	if j, err := c.JobGet(ctx, id); err != nil || j.Chunks != 1 || j.Status != salvage.JobDone || j.InputHash != first.InputHash {
		t.Fatalf("the first job changed: %+v, %v", j, err)
	}
	res, err := c.JobResults(ctx, id)
	if err != nil || len(res) != 1 || string(res[1]) != `"ONE!"` {
		t.Fatalf("results = %v, %v", res, err)
	}

	// An old rejection under an id is not a later submission's.
	if _, err := srv.JS.Publish(ctx, "salvage.jobs.nowhere", []byte(`{"job_id":"order-43","input":{"words":["x"]}}`)); err != nil {
		t.Fatal(err)
	}
	other := srv.Client(t, &salvage.Config{Roles: []salvage.Role{salvage.RoleAPI}})
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, err := other.JobWait(ctx, "order-43")
		return errors.Is(err, salvage.ErrRejected)
	}, "the message to an unknown pipeline was not rejected")
	id, err = c.JobSubmit(ctx, "words", map[string]any{"words": []string{"late"}}, &salvage.SubmitOpts{JobID: "order-43"})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.JobWaitAccepted(actx, id); err != nil {
		t.Fatalf("JobWaitAccepted reported another message's rejection: %v", err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
}

// TestChunkMessagesAreCheckedAgainstTheRecords is case 6: a chunk message
// naming another job's envelope in Salvage-Replay-Of, one whose chunk
// number is past its job's, one whose subject and body disagree, one
// whose input is not the one split, one ahead of its checkpoint's epoch,
// one of a job that does not exist and one that is not JSON are rejected
// at once: they run nothing and touch no envelope.
func TestChunkMessagesAreCheckedAgainstTheRecords(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := context.Background()
	// An envelope: the panicking word.
	failed, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"panic"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.WaitJob(t, c, failed, time.Minute)
	envs := settled(t, srv, c, failed, time.Minute)
	if len(envs) != 1 {
		t.Fatalf("envelopes = %+v", envs)
	}
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"fine"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.WaitJob(t, c, id, time.Minute)

	rejected, err := srv.Conn.SubscribeSync("salvage.events.rejected.>")
	if err != nil {
		t.Fatal(err)
	}
	// The job's one chunk as split ("fine"; a job of one chunk needs no
	// proof), and the same chunk with another input.
	chunk := func(job string, n int, input string) []byte {
		return []byte(fmt.Sprintf(`{"job_id":%q,"chunk":%d,"pipeline":"words","epoch":0,"trace_id":"","input":%q}`, job, n, input))
	}
	for _, tc := range []struct {
		reason  string
		subject string
		data    []byte
		header  map[string]string
	}{
		{"bad-replay", "salvage.chunks.words." + id + ".1", chunk(id, 1, "fine"), map[string]string{"Salvage-Replay-Of": envs[0].ID}},
		{"bad-replay", "salvage.chunks.words." + id + ".1", chunk(id, 1, "fine"), map[string]string{"Salvage-Recovery-Of": envs[0].ID}},
		{"bad-chunk", "salvage.chunks.words." + id + ".2", chunk(id, 2, "fine"), nil},
		{"bad-chunk", "salvage.chunks.words." + id + ".1", chunk(failed, 1, "fine"), nil},
		// Another input than the one split: forged.
		{"bad-chunk", "salvage.chunks.words." + id + ".1", chunk(id, 1, "forged"), nil},
		// An epoch its checkpoint never reached: its effects would run
		// again under new keys.
		{"bad-chunk", "salvage.chunks.words." + id + ".1", []byte(fmt.Sprintf(`{"job_id":%q,"chunk":1,"pipeline":"words","epoch":7,"input":"fine"}`, id)), nil},
		// A job that does not exist, with and without a source message.
		{"bad-chunk", "salvage.chunks.words.nojob.1", chunk("nojob", 1, "fine"), nil},
		{"bad-chunk", "salvage.chunks.words.nojob.1", []byte(`{"job_id":"nojob","chunk":1,"pipeline":"words","source_seq":1,"input":"fine"}`), nil},
		// A body that is not a chunk: rejected, not dead-lettered onto the
		// real chunk of its subject.
		{"bad-chunk", "salvage.chunks.words." + id + ".1", []byte(`not json`), nil},
	} {
		m := nats.NewMsg(tc.subject)
		m.Data = tc.data
		for k, v := range tc.header {
			m.Header.Set(k, v)
		}
		if _, err := srv.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		ev, err := rejected.NextMsg(20 * time.Second)
		if err != nil || !strings.HasSuffix(ev.Subject, "."+tc.reason) {
			t.Fatalf("%s %v: rejection %v, %v", tc.subject, tc.header, ev, err)
		}
	}
	if d, err := c.EnvelopeGet(ctx, envs[0].ID); err != nil || d.Record.Status != envs[0].Status || d.Record.Replays != 0 || d.Record.Requeued {
		t.Fatalf("a forged replay touched the envelope: %+v, %v", d.Record, err)
	}
	if res, err := c.JobResults(ctx, id); err != nil || len(res) != 1 {
		t.Fatalf("results of the one-chunk job: %v, %v", res, err)
	}
	if j, err := c.JobGet(ctx, failed); err != nil || j.Summary.Done != 0 {
		t.Fatalf("the failed job gained a done chunk: %+v, %v", j, err)
	}
}

// TestBudgetsAtEveryEntry is case 7: a job whose only chunk finished but
// passed its budget is done (its record says the budget was passed), not
// cancelled; a usage header that is not a count fails its call and is
// never counted; a budget that is not a cap is refused on submission and
// by the splitter.
func TestBudgetsAtEveryEntry(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	var usage sync.Map // subject -> prompt tokens header
	usage.Store("agents.think", "500")
	svc, err := micro.AddService(srv.Conn, micro.Config{Name: "thinker", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := svc.AddEndpoint("think", micro.HandlerFunc(func(r micro.Request) {
		v, _ := usage.Load("agents.think")
		_ = r.Respond([]byte(`"thought"`), micro.WithHeaders(micro.Headers{salvage.HeaderModel: []string{"m"},
			salvage.HeaderPromptTokens: []string{v.(string)}, salvage.HeaderCompletionTokens: []string{"0"}}))
	}), micro.WithEndpointSubject("agents.think")); err != nil {
		t.Fatal(err)
	}
	p := &salvage.Pipeline{Name: "think", Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{{Name: "think", Agents: []salvage.Agent{{Name: "thinker", Subject: "agents.think", Timeout: time.Second}}}}}
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p}})
	ctx := context.Background()

	id, err := c.JobSubmit(ctx, "think", "q", &salvage.SubmitOpts{Budget: &salvage.Budget{Tokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	j := salvagetest.WaitJob(t, c, id, time.Minute)
	if j.Status != salvage.JobDone || j.BudgetExceededAt == nil || len(j.Explanation) != 1 || !strings.Contains(j.Explanation[0], "budget exceeded") {
		t.Fatalf("a job whose last chunk passed its budget = %s %v %q; want done, saying so", j.Status, j.BudgetExceededAt, j.Explanation)
	}
	if list, err := c.EnvelopeList(ctx, salvage.EnvelopeFilter{Job: id}, nil); err != nil || list.Total != 0 {
		t.Fatalf("envelopes = %+v, %v", list, err)
	}

	usage.Store("agents.think", "-1000000")
	id, err = c.JobSubmit(ctx, "think", "again", &salvage.SubmitOpts{Budget: &salvage.Budget{Tokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	j = salvagetest.WaitJob(t, c, id, time.Minute)
	if j.Status != salvage.JobIncomplete || j.Summary.PromptTokens != 0 {
		t.Fatalf("a reply reporting -1000000 tokens: job %s with %d prompt tokens; want incomplete, nothing counted", j.Status, j.Summary.PromptTokens)
	}
	envs := settled(t, srv, c, id, time.Minute)
	d, err := c.EnvelopeGet(ctx, envs[0].ID)
	if err != nil || !strings.Contains(d.Envelope.Error, "usage") || d.Envelope.ErrorClass != "permanent" || d.Envelope.Deliveries != 1 {
		t.Fatalf("envelope = %+v, %v", d.Envelope, err)
	}

	for _, b := range []salvage.Budget{{Cost: math.NaN()}, {Cost: math.Inf(1)}, {Tokens: -5}, {Cost: -1}} {
		if _, err := c.JobSubmit(ctx, "think", "x", &salvage.SubmitOpts{Budget: &b}); !errors.Is(err, salvage.ErrInvalidJob) {
			t.Errorf("budget %+v: %v, want ErrInvalidJob", b, err)
		}
	}
	rejected, err := srv.Conn.SubscribeSync("salvage.events.rejected.bad-input")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(ctx, "salvage.jobs.think", []byte(`{"input":"x","budget":{"cost":-3}}`)); err != nil {
		t.Fatal(err)
	}
	if m, err := rejected.NextMsg(20 * time.Second); err != nil || !strings.Contains(string(m.Data), "budget") {
		t.Fatalf("a negative budget through nats pub: %v, %v", m, err)
	}
}

// TestReplyTooLargeFailsAtOnce is case 8: an agent whose reply is past
// the journal's limit once escaped fails its chunk permanently on the
// first attempt, saying why — no retries, no redeliveries.
func TestReplyTooLargeFailsAtOnce(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	big := strings.Repeat("<é>", salvage.MaxOutput/4) // not JSON: escaped into a string past the limit
	sub, err := srv.Conn.Subscribe("agents.verbose", func(m *nats.Msg) { _ = m.Respond([]byte(big)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	p := &salvage.Pipeline{Name: "verbose", Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{{Name: "talk", Agents: []salvage.Agent{{Name: "talker", Subject: "agents.verbose", Timeout: 5 * time.Second}}}}}
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "verbose", "say a lot", nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobIncomplete || j.Summary.Tier1Retries != 0 || j.Summary.Redeliveries != 0 {
		t.Fatalf("job = %+v", j)
	}
	envs := settled(t, srv, c, id, time.Minute)
	d, err := c.EnvelopeGet(ctx, envs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Envelope.ErrorClass != "permanent" || d.Envelope.Category != salvage.CategoryUnrecoverable || d.Envelope.Deliveries != 1 ||
		!strings.Contains(d.Envelope.Error, "output too large") || envs[0].Status != salvage.EnvelopeDeadEnd {
		t.Fatalf("envelope %s %s/%s (%s, %d deliveries): %s", envs[0].Status, d.Envelope.Category, d.Envelope.ErrorClass, d.Envelope.Strategy, d.Envelope.Deliveries, d.Envelope.Error)
	}
}
