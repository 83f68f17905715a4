package recovery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

func TestBackoffFullJitterBounds(t *testing.T) {
	t.Parallel()
	p := recovery.DefaultRetryPolicy()
	var maxDraw int64
	p.Rand = func(n int64) int64 { maxDraw = n - 1; return n - 1 }
	for retry, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if got := p.Backoff(retry); got != want || time.Duration(maxDraw) != want {
			t.Errorf("retry %d: ceiling %v, want %v", retry, got, want)
		}
	}
	p.Rand = func(int64) int64 { return 0 }
	if got := p.Backoff(2); got != 0 {
		t.Errorf("full jitter must reach 0, got %v", got)
	}
}

func TestNextWait(t *testing.T) {
	t.Parallel()
	p := recovery.RetryPolicy{MaxRetries: 3, BaseDelay: 100 * time.Millisecond, MaxDelay: 400 * time.Millisecond, TotalCap: 2 * time.Second,
		Rand: func(n int64) int64 { return n / 2 }}
	tests := []struct {
		name    string
		err     error
		retry   int
		elapsed time.Duration
		want    time.Duration
		ok      bool
	}{
		{"transient", salvagetype.Transient(503, errors.New("x")), 0, 0, 50 * time.Millisecond, true},
		{"unknown errors are transient", errors.New("reset"), 1, 0, 100 * time.Millisecond, true},
		{"timeout", salvagetype.Timeout(errors.New("x")), 0, 0, 50 * time.Millisecond, true},
		{"retry-after is a floor", salvagetype.RateLimited(time.Second, errors.New("x")), 0, 0, time.Second, true},
		{"permanent never", salvagetype.Permanent(400, errors.New("x")), 0, 0, 0, false},
		{"cancelled never", fmt.Errorf("call: %w", recovery.ErrJobCancelled), 0, 0, 0, false},
		{"context cancelled never", context.Canceled, 0, 0, 0, false},
		{"attempt cap", salvagetype.Transient(503, nil), 3, 0, 0, false},
		{"total cap", salvagetype.Transient(503, nil), 1, 1950 * time.Millisecond, 0, false},
		{"retry-after past the cap", salvagetype.RateLimited(5*time.Second, nil), 0, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := p.NextWait(tt.err, tt.retry, tt.elapsed)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("NextWait = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestClassOfMatchesSentinels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err   error
		class salvagetype.Class
		is    error
	}{
		{salvagetype.Transient(502, nil), salvagetype.ClassTransient, salvagetype.ErrTransient},
		{salvagetype.RateLimited(time.Second, nil), salvagetype.ClassRateLimited, salvagetype.ErrRateLimited},
		{fmt.Errorf("wrapped: %w", salvagetype.Timeout(nil)), salvagetype.ClassTimeout, salvagetype.ErrTimeout},
		{salvagetype.Permanent(400, nil), salvagetype.ClassPermanent, salvagetype.ErrPermanent},
		{context.DeadlineExceeded, salvagetype.ClassTimeout, context.DeadlineExceeded},
		{recovery.ErrJobCancelled, salvagetype.ClassCancelled, recovery.ErrJobCancelled},
	}
	for _, tt := range tests {
		if got := recovery.ClassOf(tt.err); got != tt.class || !errors.Is(tt.err, tt.is) {
			t.Errorf("ClassOf(%v) = %v (is %v: %v), want %v", tt.err, got, tt.is, errors.Is(tt.err, tt.is), tt.class)
		}
	}
}

func TestExecutor(t *testing.T) {
	t.Parallel()
	exec, err := recovery.NewExecutor(recovery.RetryPolicy{MaxRetries: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Run("succeeds after transient failures", func(t *testing.T) {
		var stats recovery.Stats
		n := 0
		err := exec.Do(ctx, &stats, "op", func(context.Context) error {
			if n++; n < 3 {
				return salvagetype.Transient(503, nil)
			}
			return nil
		})
		if err != nil || stats.Calls.Load() != 3 || stats.Retries.Load() != 2 {
			t.Fatalf("err %v, calls %d, retries %d", err, stats.Calls.Load(), stats.Retries.Load())
		}
	})
	t.Run("exhausted", func(t *testing.T) {
		var stats recovery.Stats
		err := exec.Do(ctx, &stats, "op", func(context.Context) error { return salvagetype.Transient(503, nil) })
		if !errors.Is(err, salvagetype.ErrRetriesExhausted) || !errors.Is(err, salvagetype.ErrTransient) || stats.Calls.Load() != 4 {
			t.Fatalf("err %v, calls %d", err, stats.Calls.Load())
		}
	})
	t.Run("permanent is not retried", func(t *testing.T) {
		var stats recovery.Stats
		err := exec.Do(ctx, &stats, "op", func(context.Context) error { return salvagetype.Permanent(400, nil) })
		if !errors.Is(err, salvagetype.ErrPermanent) || errors.Is(err, salvagetype.ErrRetriesExhausted) || stats.Calls.Load() != 1 {
			t.Fatalf("err %v, calls %d", err, stats.Calls.Load())
		}
	})
	t.Run("cancellation stops the call and is not retried", func(t *testing.T) {
		var stats recovery.Stats
		ctx, cancel := context.WithCancelCause(ctx)
		err := exec.Do(ctx, &stats, "op", func(ctx context.Context) error {
			cancel(recovery.ErrJobCancelled)
			<-ctx.Done()
			return salvagetype.Transient(503, ctx.Err())
		})
		if !errors.Is(err, recovery.ErrJobCancelled) || stats.Retries.Load() != 0 {
			t.Fatalf("err %v, retries %d", err, stats.Retries.Load())
		}
	})
}

// TestRunStageParallelAndSeverity: a stage's agents run at once — each
// of stage 1's three waits inside its call until all three are inside (a
// rendezvous: run one after another, the first would wait for good) — and
// when several fail, the most severe failure decides.
func TestRunStageParallelAndSeverity(t *testing.T) {
	t.Parallel()
	exec, _ := recovery.NewExecutor(recovery.RetryPolicy{MaxRetries: -1}, zerolog.Nop())
	failures := map[string]error{"flaky": salvagetype.Transient(503, nil), "broken": salvagetype.Permanent(400, nil)}
	brokenFailed := make(chan struct{})
	arrived, allIn := make(chan struct{}, 3), make(chan struct{})
	go func() {
		for range 3 {
			<-arrived
		}
		close(allIn)
	}()
	tools, terr := recovery.NewTools(salvagetype.Tool{Name: "op", Call: func(ctx context.Context, c salvagetype.ToolCall) (salvagetype.ToolResult, error) {
		if string(c.Input) == "true" {
			if agentOf(ctx) == "flaky" {
				// Fail after broken: the first failure stops the rest.
				<-brokenFailed
			} else {
				defer close(brokenFailed)
			}
			return salvagetype.ToolResult{}, failures[agentOf(ctx)]
		}
		if c.Stage == 1 {
			arrived <- struct{}{}
		}
		select {
		case <-ctx.Done():
			return salvagetype.ToolResult{}, ctx.Err()
		case <-allIn:
			return salvagetype.ToolResult{Output: json.RawMessage(`1`)}, nil
		case <-time.After(time.Minute):
			// Only a bound on the wait: agents run one at a time never
			// meet, however fast the machine.
			return salvagetype.ToolResult{}, salvagetype.Permanent(0, errors.New("the stage's agents never were inside their calls at once"))
		}
	}})
	if terr != nil {
		t.Fatal(terr)
	}
	agent := func(name string, fail error) salvagetype.Agent {
		return salvagetype.Agent{Name: name, Run: func(ctx context.Context, tr *salvagetype.Turn) (any, error) {
			ctx = context.WithValue(ctx, agentKey{}, name)
			_, err := tr.Tool(ctx, "op", fail != nil)
			return name, err
		}}
	}
	var stats recovery.Stats
	outs, err := recovery.RunStage(context.Background(), salvagetype.Stage{Agents: []salvagetype.Agent{agent("a", nil), agent("b", nil), agent("c", nil)}},
		recovery.StageRun{Stage: 1, Exec: exec, Stats: &stats, Tools: tools})
	if err != nil || len(outs) != 3 || string(outs[1].Output) != `"b"` {
		t.Fatalf("outs %v, err %v", outs, err)
	}
	_, err = recovery.RunStage(context.Background(), salvagetype.Stage{Agents: []salvagetype.Agent{
		agent("slow", nil), agent("flaky", salvagetype.Transient(503, nil)), agent("broken", salvagetype.Permanent(400, nil)),
	}}, recovery.StageRun{Stage: 2, Exec: exec, Stats: &stats, Tools: tools})
	var ae *recovery.AgentError
	if !errors.Is(err, salvagetype.ErrPermanent) || !errors.As(err, &ae) || ae.Agent != "broken" {
		t.Fatalf("stage error = %v, want broken's permanent error to decide", err)
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	p := &recovery.Plan{Name: "p", Split: func(json.RawMessage) ([]json.RawMessage, error) { return nil, nil }, Stages: []salvagetype.Stage{{Name: "s"}}}
	if _, err := recovery.NewRegistry(p, p); err == nil {
		t.Error("duplicate pipeline accepted")
	}
	if _, err := recovery.NewRegistry(&recovery.Plan{Name: "a.b", Split: p.Split, Stages: p.Stages}); err == nil {
		t.Error("pipeline name with a dot accepted")
	}
	r, err := recovery.NewRegistry(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get("q"); !errors.Is(err, salvagetype.ErrUnknownPipeline) {
		t.Errorf("Get(q) = %v", err)
	}
}

type agentKey struct{}

func agentOf(ctx context.Context) string { s, _ := ctx.Value(agentKey{}).(string); return s }

// TestNoRetriesMeansNone: MaxRetries < 0 (`--retries 0`) used to become the
// default 3 because the executor applied the defaults twice.
func TestNoRetriesMeansNone(t *testing.T) {
	t.Parallel()
	exec, err := recovery.NewExecutor(recovery.RetryPolicy{MaxRetries: -1, BaseDelay: time.Millisecond}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	var stats recovery.Stats
	calls := 0
	err = exec.Do(context.Background(), &stats, "op", func(context.Context) error { calls++; return salvagetype.Transient(503, nil) })
	if !errors.Is(err, salvagetype.ErrRetriesExhausted) || calls != 1 || stats.Retries.Load() != 0 {
		t.Fatalf("calls %d, retries %d, err %v; want one attempt and no retry", calls, stats.Retries.Load(), err)
	}
}
