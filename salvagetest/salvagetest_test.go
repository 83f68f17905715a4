package salvagetest_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

func TestMain(m *testing.M) { salvagetest.VerifyNoLeaks(m) }

// echo is a one-stage pipeline whose agent calls tool "upper" once.
func echo(calls *atomic.Int32) *salvage.Pipeline {
	return &salvage.Pipeline{
		Name:  "echo",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{{Name: "say", Agents: []salvage.Agent{{Name: "sayer", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			return t.Tool(ctx, "upper", t.Input)
		}}}}},
		Tools: []salvage.Tool{{Name: "upper", Call: func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
			calls.Add(1)
			return salvage.ToolResult{Output: json.RawMessage(`"HI"`)}, nil
		}}},
	}
}

// TestTheKitRunsAJobAndKeepsItAcrossARestart: a server from StartServer
// and a client from Client run a job to the end (WaitJob); after Restart
// its record is still there and the client, reconnected, reads it.
func TestTheKitRunsAJobAndKeepsItAcrossARestart(t *testing.T) {
	var calls atomic.Int32
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{echo(&calls)}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "echo", "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone || calls.Load() != 1 {
		t.Fatalf("job %+v after %d calls; want done after 1", j, calls.Load())
	}
	srv.Restart(t)
	var got *salvage.Job
	salvagetest.Eventually(t, time.Minute, func() bool {
		got, err = c.JobGet(ctx, id)
		return err == nil
	}, "the job's record after the restart")
	if got.Status != salvage.JobDone {
		t.Errorf("after the restart the job is %s", got.Status)
	}
}

// TestRunAgentReportsTheCalls: RunAgent runs one agent against its tools
// on a real server and returns its output and its journaled calls.
func TestRunAgentReportsTheCalls(t *testing.T) {
	var calls atomic.Int32
	p := echo(&calls)
	run := salvagetest.RunAgent(t, p.Stages[0].Agents[0], p.Tools, "hi")
	if run.Job.Status != salvage.JobDone || string(run.Output) != `"HI"` {
		t.Fatalf("run = %+v, output %s", run.Job, run.Output)
	}
	if len(run.Calls) != 1 || run.Calls[0].Tool != "upper" || calls.Load() != 1 {
		t.Errorf("calls = %+v (%d made); want the one call to upper", run.Calls, calls.Load())
	}
}

// Example shows a pipeline's test with the kit: a real server, a started
// client running the pipeline, a job waited for.
func Example() {
	_ = func(t *testing.T) {
		var calls atomic.Int32
		srv := salvagetest.StartServer(t)
		c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{echo(&calls)}})
		id, err := c.JobSubmit(context.Background(), "echo", "hi", nil)
		if err != nil {
			t.Fatal(err)
		}
		if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone {
			t.Fatalf("job = %+v", j)
		}
	}
}

// ExampleRunAgent tests one agent against its tools.
func ExampleRunAgent() {
	_ = func(t *testing.T) {
		agent := salvage.Agent{Name: "sayer", Run: func(ctx context.Context, turn *salvage.Turn) (any, error) {
			return turn.Tool(ctx, "upper", turn.Input)
		}}
		tools := []salvage.Tool{{Name: "upper", Call: func(context.Context, salvage.ToolCall) (salvage.ToolResult, error) {
			return salvage.ToolResult{Output: json.RawMessage(`"HI"`)}, nil
		}}}
		run := salvagetest.RunAgent(t, agent, tools, "hi")
		if len(run.Calls) != 1 {
			t.Errorf("calls = %+v", run.Calls)
		}
	}
}
