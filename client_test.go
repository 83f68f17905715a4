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

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
)

// words splits {"words": [...]} into one chunk per word; each chunk's one
// agent calls the "upper" tool, and a word "panic" makes the agent panic.
func words() *salvage.Pipeline {
	return &salvage.Pipeline{
		Name: "words",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var v struct {
				Words []string `json:"words"`
			}
			if err := json.Unmarshal(in, &v); err != nil || len(v.Words) == 0 {
				return nil, fmt.Errorf("%w: want {\"words\": [...]}", salvage.ErrBadInput)
			}
			out := make([]json.RawMessage, len(v.Words))
			for i, w := range v.Words {
				out[i], _ = json.Marshal(w)
			}
			return out, nil
		},
		Stages: []salvage.Stage{{Name: "shout", Agents: []salvage.Agent{{Name: "shouter", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			var w string
			_ = json.Unmarshal(t.Input, &w)
			if w == "panic" {
				panic("shouter cannot shout " + w)
			}
			out, err := t.Tool(ctx, "upper", w)
			if err != nil {
				return nil, err
			}
			var s string
			_ = json.Unmarshal(out, &s)
			return s + "!", nil
		}}}}},
		Tools: []salvage.Tool{{Name: "upper", Call: func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
			var w string
			if err := json.Unmarshal(c.Input, &w); err != nil {
				return salvage.ToolResult{}, salvage.Permanent(400, err)
			}
			if c.Job == "" || c.Chunk < 1 || c.Stage != 1 || c.Agent != "shouter" || c.Seq != 1 || c.IdempotencyKey == "" {
				return salvage.ToolResult{}, salvage.Permanent(0, fmt.Errorf("the call does not say where it runs: %+v", c))
			}
			out, _ := json.Marshal(strings.ToUpper(w))
			return salvage.ToolResult{Output: out}, nil
		}}},
		Result: func(chunk json.RawMessage, outs []salvage.StageOutput) (json.RawMessage, error) {
			return outs[0].Output, nil
		},
	}
}

func TestClientRunsAJob(t *testing.T) {
	t.Parallel()
	c := salvagetest.StartServer(t).Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"salvage", "works"}}, &salvage.SubmitOpts{JobID: "my-job-1"})
	if err != nil || id != "my-job-1" {
		t.Fatalf("submit: %s, %v", id, err)
	}
	j := salvagetest.WaitJob(t, c, id, time.Minute)
	if j.Status != salvage.JobDone || j.Summary.Done != 2 {
		t.Fatalf("job = %+v", j)
	}
	res, err := c.JobResults(ctx, id)
	if err != nil || string(res[1]) != `"SALVAGE!"` || string(res[2]) != `"WORKS!"` {
		t.Fatalf("results = %s %s, %v", res[1], res[2], err)
	}
	st, err := c.ChunkList(ctx, id, &salvage.Page{Limit: 1})
	if err != nil || len(st.Chunks) != 1 || st.Chunks[0].Status != salvage.ChunkDone || st.NextOffset != 1 {
		t.Fatalf("status = %+v, %v", st, err)
	}
	tr, err := c.JobTrace(ctx, id)
	if err != nil || len(tr.Chunks) != 2 || len(tr.Chunks[0].Calls) != 1 || tr.Chunks[0].Calls[0].Status != salvage.CallSucceeded {
		t.Fatalf("trace = %+v, %v", tr, err)
	}
	if _, err := c.JobWait(ctx, "rejected"); err == nil {
		t.Error("waiting on a reserved id should fail")
	}
	if _, err := c.JobGet(ctx, "no-such-job"); !errors.Is(err, salvage.ErrUnknownJob) {
		t.Errorf("Get of an unknown job: %v", err)
	}
}

// TestWaitReportsARejection: a job the splitter refuses ends Wait with
// ErrRejected instead of waiting forever.
func TestWaitReportsARejection(t *testing.T) {
	t.Parallel()
	c := salvagetest.StartServer(t).Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := c.JobSubmit(ctx, "words", map[string]any{"nothing": true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.JobWait(ctx, id); !errors.Is(err, salvage.ErrRejected) || !strings.Contains(err.Error(), "bad-input") {
		t.Fatalf("Wait = %v, want a bad-input rejection", err)
	}
	id, _ = c.JobSubmit(ctx, "nope", map[string]any{}, nil)
	if _, err := c.JobWait(ctx, id); !errors.Is(err, salvage.ErrUnknownPipeline) {
		t.Fatalf("Wait for an unknown pipeline = %v", err)
	}
}

// TestPanickingAgentFailsOnlyItsChunk: the proof through the
// public API — an envelope of class panic with the stack; the other
// chunks finish.
func TestPanickingAgentFailsOnlyItsChunk(t *testing.T) {
	t.Parallel()
	c := salvagetest.StartServer(t).Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"one", "panic", "three"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j := salvagetest.WaitJob(t, c, id, time.Minute)
	if j.Status != salvage.JobIncomplete || j.Summary.Done != 2 || j.Summary.DeadLettered != 1 {
		t.Fatalf("job = %+v", j)
	}
	list, err := c.EnvelopeList(ctx, salvage.EnvelopeFilter{Job: id}, nil)
	if err != nil || list.Total != 1 {
		t.Fatalf("envelopes = %+v, %v", list, err)
	}
	d, err := c.EnvelopeGet(ctx, list.Envelopes[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Envelope.ErrorClass != "panic" || !strings.Contains(d.Envelope.Error, "shouter cannot shout panic") ||
		!strings.Contains(d.Envelope.Error, "goroutine") || d.Envelope.Category != salvage.CategoryUnrecoverable || d.Envelope.FailedAgent != "shouter" {
		t.Fatalf("envelope = %+v", d.Envelope)
	}
}

// TestRunAgentWithASideEffect: the test kit runs one agent against a tool
// with a side effect; the tool learns where it runs, and the journal shows
// the effect's fingerprint.
func TestRunAgentWithASideEffect(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	charged := map[string]string{}
	charge := salvage.Tool{Name: "charge", System: "payments",
		Effect: &salvage.SideEffect{Reversible: true, Compensation: "refund",
			Verify: func(_ context.Context, key string) (salvage.Verification, error) {
				mu.Lock()
				defer mu.Unlock()
				id, ok := charged[key]
				return salvage.Verification{Applied: ok, ResourceID: id}, nil
			}},
		Call: func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
			mu.Lock()
			defer mu.Unlock()
			charged[c.IdempotencyKey] = "ch_" + c.Job[len(c.Job)-4:]
			return salvage.ToolResult{Output: json.RawMessage(`{"ok":true}`), ResourceID: charged[c.IdempotencyKey]}, nil
		}}
	refund := salvage.Tool{Name: "refund", System: "payments", Call: func(context.Context, salvage.ToolCall) (salvage.ToolResult, error) {
		return salvage.ToolResult{}, nil
	}}
	run := salvagetest.RunAgent(t, salvage.Agent{Name: "biller", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
		return t.Tool(ctx, "charge", map[string]int{"cents": 999})
	}}, []salvage.Tool{charge, refund}, map[string]string{"order": "o-1"})
	if run.Job.Status != salvage.JobDone || string(run.Output) != `{"ok":true}` || len(run.Calls) != 1 {
		t.Fatalf("run = %+v", run)
	}
	call := run.Calls[0]
	if call.Tool != "charge" || call.Status != salvage.CallSucceeded || call.Fingerprint == nil || !call.Fingerprint.Reversible ||
		call.Fingerprint.Compensation != "refund" || !strings.HasPrefix(call.Fingerprint.ResourceID, "ch_") {
		t.Fatalf("call = %+v", call)
	}
}

// TestConfigErrorsNameTheField: NewClient refuses what cannot run and says
// which field.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	s := salvagetest.StartServer(t)
	noVerify := words()
	noVerify.Tools = append(noVerify.Tools, salvage.Tool{Name: "email", Effect: &salvage.SideEffect{}, Call: noVerify.Tools[0].Call})
	badName := words()
	badName.Name = "a.b"
	for name, tc := range map[string]struct {
		cfg  salvage.Config
		want string
	}{
		"unknown role":      {salvage.Config{Roles: []salvage.Role{"boss"}}, "Roles"},
		"heartbeat":         {salvage.Config{AckWait: time.Second, Heartbeat: 2 * time.Second}, "Heartbeat"},
		"retry bounds":      {salvage.Config{RetryBase: time.Minute, RetryMax: time.Second}, "RetryBase"},
		"journal mode":      {salvage.Config{JournalWrites: "sometimes"}, "JournalWrites"},
		"payload":           {salvage.Config{MaxPayload: 2 << 20}, "MaxPayload"},
		"tool needs verify": {salvage.Config{Pipelines: []*salvage.Pipeline{noVerify}}, "Verify"},
		"pipeline name":     {salvage.Config{Pipelines: []*salvage.Pipeline{badName}}, "pipeline name"},
		"twice":             {salvage.Config{Pipelines: []*salvage.Pipeline{words(), words()}}, "twice"},
	} {
		if _, err := salvage.NewClient(s.JS, &tc.cfg); !errors.Is(err, salvage.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewClient = %v, want ErrInvalidConfig naming %s", name, err, tc.want)
		}
	}
}

// TestWaitOutlivesAServerRestart: Wait watches the job's record; a server
// restart ends that watch, and Wait watches again instead of failing, so
// it still returns the finished job.
func TestWaitOutlivesAServerRestart(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	gate := make(chan struct{})
	var started sync.Once
	running := make(chan struct{})
	p := &salvage.Pipeline{
		Name:  "gated",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{{Name: "wait", Agents: []salvage.Agent{{Name: "waiter", Run: func(ctx context.Context, _ *salvage.Turn) (any, error) {
			started.Do(func() { close(running) })
			select {
			case <-gate:
				return "through", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}}}}},
	}
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p}, AckWait: 5 * time.Second})
	// Generous: 3.4 s here, once 60+ s with four packages testing at once
	// on two cores. Each step is logged, so a slow run says which was slow.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	id, err := c.JobSubmit(ctx, "gated", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		job *salvage.Job
		err error
	}
	waited := make(chan result, 1)
	go func() { j, err := c.JobWait(ctx, id); waited <- result{j, err} }()
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("the agent never ran")
	}
	t.Logf("%s: the agent runs; restarting the server", time.Since(start))
	srv.Restart(t)
	t.Logf("%s: the server is back", time.Since(start))
	select {
	case r := <-waited:
		t.Fatalf("Wait returned across the restart: %+v, %v", r.job, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	close(gate)
	// Once the record says done, Wait returns: a Wait that trusted the
	// watch alone returned 19 s later, once the watch recovered. The
	// bound is a liveness bound on that event, not a speed.
	jobs, err := kv.OpenJobs(ctx, srv.JS)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, 2*time.Minute, func() bool {
		j, err := jobs.Get(ctx, id)
		return err == nil && j.Status == salvagetype.JobDone
	}, "the job's record to say done")
	t.Logf("%s: the job's record says done", time.Since(start))
	select {
	case r := <-waited:
		if r.err != nil || r.job.Status != salvage.JobDone {
			t.Fatalf("Wait = %+v, %v; want the job done", r.job, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Wait had not returned a minute after the job's record said done: it missed the record")
	}
}
