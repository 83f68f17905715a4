package salvage_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// agentService serves agents on NATS subjects with a micro service, as a
// team would in any language, and remembers what it was asked.
type agentService struct {
	mu       sync.Mutex
	requests map[string]int // subject -> requests
	keys     map[string]int // idempotency key -> requests
	answered map[string]int // idempotency key -> answers (not errors)
	last     map[string]micro.Request
	fail     map[string]func(n int) (code, retryAfter string) // subject -> failure of the n-th request
}

func serveAgents(t *testing.T, srv *salvagetest.Server, handlers map[string]func(salvage.ServiceRequest) any) *agentService {
	t.Helper()
	s := &agentService{requests: map[string]int{}, keys: map[string]int{}, answered: map[string]int{}, last: map[string]micro.Request{}, fail: map[string]func(int) (string, string){}}
	svc, err := micro.AddService(srv.Conn, micro.Config{Name: "test-agents", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	for subject, h := range handlers {
		h := h
		err := svc.AddEndpoint(strings.ReplaceAll(subject, ".", "-"), micro.HandlerFunc(func(r micro.Request) {
			s.mu.Lock()
			s.requests[subject]++
			n := s.requests[subject]
			s.keys[r.Headers().Get(salvage.HeaderIdempotencyKey)]++
			s.last[subject] = r
			fail := s.fail[subject]
			s.mu.Unlock()
			if fail != nil {
				if code, after := fail(n); code != "" {
					_ = r.Error(code, "refused", nil, micro.WithHeaders(micro.Headers{"Retry-After": []string{after}}))
					return
				}
			}
			var req salvage.ServiceRequest
			if err := json.Unmarshal(r.Data(), &req); err != nil {
				_ = r.Error("400", err.Error(), nil)
				return
			}
			s.mu.Lock()
			s.answered[r.Headers().Get(salvage.HeaderIdempotencyKey)]++
			s.mu.Unlock()
			_ = r.RespondJSON(h(req), micro.WithHeaders(micro.Headers{
				salvage.HeaderModel: []string{"remote-llm"}, salvage.HeaderPromptTokens: []string{"12"}, salvage.HeaderCompletionTokens: []string{"3"}}))
		}), micro.WithEndpointSubject(subject))
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *agentService) count(subject string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[subject]
}

func remotePipeline() *salvage.Pipeline {
	return &salvage.Pipeline{
		Name:  "remote",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{
			{Name: "shout", Agents: []salvage.Agent{{Name: "shouter", Subject: "agents.upper", Timeout: 2 * time.Second}}},
			{Name: "measure", Agents: []salvage.Agent{{Name: "measurer", Subject: "agents.measure", Timeout: 2 * time.Second}}},
		},
	}
}

func remoteHandlers() map[string]func(salvage.ServiceRequest) any {
	return map[string]func(salvage.ServiceRequest) any{
		"agents.upper": func(r salvage.ServiceRequest) any {
			var s string
			_ = json.Unmarshal(r.Input, &s)
			return strings.ToUpper(s)
		},
		"agents.measure": func(r salvage.ServiceRequest) any {
			var shouted string
			if len(r.Prior) == 1 {
				_ = json.Unmarshal(r.Prior[0].Output, &shouted)
			}
			return map[string]any{"length": len(shouted), "stage": r.Stage, "agent": r.Agent}
		},
	}
}

// TestAgentsServedOnSubjects: a pipeline of agents served by a NATS micro
// service finishes; each turn carries the wire contract (body, idempotency
// key, deadline, traceparent); the reply is the output, its usage headers
// are journaled, and the next stage gets the earlier outputs.
func TestAgentsServedOnSubjects(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	svc := serveAgents(t, srv, remoteHandlers())
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{remotePipeline()}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "remote", "hello", nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone || j.Summary.PromptTokens != 24 {
		t.Fatalf("job = %+v", j)
	}
	res, err := c.JobResults(ctx, id)
	if err != nil || !strings.Contains(string(res[1]), `"HELLO"`) || !strings.Contains(string(res[1]), `"length":5`) {
		t.Fatalf("results = %s, %v", res[1], err)
	}
	svc.mu.Lock()
	r := svc.last["agents.measure"]
	svc.mu.Unlock()
	var body salvage.ServiceRequest
	_ = json.Unmarshal(r.Data(), &body)
	if body.Job != id || body.Chunk != 1 || body.Stage != 2 || body.Agent != "measurer" || body.Seq != 1 || string(body.Input) != `"hello"` || len(body.Prior) != 1 {
		t.Errorf("request body = %+v", body)
	}
	deadline, err := time.Parse(time.RFC3339Nano, r.Headers().Get(salvage.HeaderDeadline))
	if r.Headers().Get(salvage.HeaderIdempotencyKey) == "" || err != nil || time.Until(deadline) > 2*time.Second ||
		!strings.HasPrefix(r.Headers().Get("traceparent"), "00-") {
		t.Errorf("request headers = %v", r.Headers())
	}
	tr, err := c.JobTrace(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if call := tr.Chunks[0].Calls[0]; call.Tool != "agent:agents.upper" || call.Usage == nil || call.Usage.Model != "remote-llm" || call.Usage.PromptTokens != 12 {
		t.Errorf("journaled turn = %+v", call)
	}
}

// TestServiceErrorsAreClassified: an error reply's code decides: a 503
// and a 429 with Retry-After are retried in the worker, a 400 fails the
// chunk at once; no responders is retried until a service answers; and a
// resumed chunk does not ask again for a turn that was answered.
func TestServiceErrorsAreClassified(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	// No responders is a service that is down: its breaker opens and
	// holds the chunk; a short cool-down lets the probe find it started.
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{remotePipeline()}, Breaker: salvage.BreakerPolicy{CoolDown: time.Second}})
	ctx := context.Background()

	// No service yet: no responders, retried (tier 1, then held by the
	// open breaker) until the service starts.
	id, err := c.JobSubmit(ctx, "remote", "late", nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		st, err := c.ChunkList(ctx, id, nil)
		return err == nil && len(st.Chunks) == 1 && st.Chunks[0].Tier1Retries > 0
	}, "retries while nobody answers")
	svc := serveAgents(t, srv, remoteHandlers())
	svc.mu.Lock()
	svc.fail["agents.upper"] = func(n int) (string, string) {
		switch n {
		case 1:
			return "503", ""
		case 2:
			return "429", "0.05"
		}
		return "", ""
	}
	svc.mu.Unlock()
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
	if n := svc.count("agents.upper"); n != 3 {
		t.Errorf("agents.upper asked %d times, want 3 (503, 429, answer)", n)
	}

	// A 400 is permanent: one request, then an envelope.
	svc.mu.Lock()
	svc.fail["agents.measure"] = func(int) (string, string) { return "400", "" }
	svc.mu.Unlock()
	before := svc.count("agents.measure")
	id2, err := c.JobSubmit(ctx, "remote", "bad", nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id2, time.Minute); j.Status != salvage.JobIncomplete {
		t.Fatalf("job = %+v", j)
	}
	if n := svc.count("agents.measure") - before; n != 1 {
		t.Errorf("a 400 was asked %d times, want once", n)
	}
	list, err := c.EnvelopeList(ctx, salvage.EnvelopeFilter{Job: id2}, nil)
	if err != nil || list.Total != 1 {
		t.Fatalf("envelopes = %+v, %v", list, err)
	}
	d, err := c.EnvelopeGet(ctx, list.Envelopes[0].ID)
	if err != nil || d.Envelope.ErrorClass != "permanent" || d.Envelope.FailedStage != 2 || !strings.Contains(d.Envelope.Error, "agents.measure answered 400") {
		t.Fatalf("envelope = %+v, %v", d.Envelope, err)
	}

	// Fixed, and replayed once the orchestrator has settled it (a replay
	// while it runs the envelope's strategy is refused): stage 1's
	// answered turn is not asked again.
	salvagetest.Eventually(t, time.Minute, func() bool {
		d, err := c.EnvelopeGet(ctx, list.Envelopes[0].ID)
		return err == nil && d.Record.Status.Final()
	}, "the envelope to settle")
	upper := svc.count("agents.upper")
	svc.mu.Lock()
	delete(svc.fail, "agents.measure")
	svc.mu.Unlock()
	if _, err := c.EnvelopeReplay(ctx, list.Envelopes[0].ID, "test"); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		j, err := c.JobGet(ctx, id2)
		return err == nil && j.Status == salvage.JobDone
	}, "the replayed job to finish")
	if n := svc.count("agents.upper"); n != upper {
		t.Errorf("the replay asked stage 1 again (%d -> %d requests)", upper, n)
	}
	// Failed calls are asked again; an answered one never is.
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for key, n := range svc.answered {
		if n != 1 {
			t.Errorf("idempotency key %s answered %d times", key, n)
		}
	}
	if len(svc.answered) != 4 {
		t.Errorf("%d calls answered, want 4 (two stages of two jobs)", len(svc.answered))
	}
}

// TestSubjectAgentsAreValidated: an agent needs exactly one of Run and
// Subject, and a subject no request can or may go to is refused: the
// server's API, replies, Salvage's own subjects.
func TestSubjectAgentsAreValidated(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	for _, a := range []salvage.Agent{
		{Name: "neither"},
		{Name: "both", Subject: "agents.x", Run: func(context.Context, *salvage.Turn) (any, error) { return nil, nil }},
		{Name: "wild", Subject: "agents.*"},
		{Name: "spaced", Subject: "agents. x"},
		{Name: "api", Subject: "$JS.API.STREAM.DELETE.SALVAGE_DLQ"},
		{Name: "replies", Subject: "_INBOX_operator.abc"},
		{Name: "own", Subject: "salvage.api.dlq.bulk"},
	} {
		p := &salvage.Pipeline{Name: "p", Split: func(in json.RawMessage) ([]json.RawMessage, error) { return nil, nil },
			Stages: []salvage.Stage{{Name: "s", Agents: []salvage.Agent{a}}}}
		if _, err := salvage.NewClient(srv.JS, &salvage.Config{Pipelines: []*salvage.Pipeline{p}}); !errors.Is(err, salvage.ErrInvalidConfig) || !strings.Contains(err.Error(), a.Name) && a.Name != "wild" && a.Name != "spaced" {
			t.Errorf("agent %s: %v, want ErrInvalidConfig naming it", a.Name, err)
		}
	}
}
