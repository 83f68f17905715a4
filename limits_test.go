package salvage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// provider is a tool's external system that notes when each request
// came.
type provider struct {
	mu    sync.Mutex
	calls []time.Time
}

// pipeline runs chunks of four calls each to the provider, through a tool
// of system "provider".
func (p *provider) pipeline() *salvage.Pipeline {
	return &salvage.Pipeline{
		Name: "paced",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var n int
			if err := json.Unmarshal(in, &n); err != nil || n < 1 {
				return nil, fmt.Errorf("%w: want a count", salvage.ErrBadInput)
			}
			out := make([]json.RawMessage, n)
			for i := range out {
				out[i] = json.RawMessage(fmt.Sprint(i))
			}
			return out, nil
		},
		Stages: []salvage.Stage{{Name: "ask", Agents: []salvage.Agent{{Name: "asker", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			for range 4 {
				if _, err := t.Tool(ctx, "ask", t.Input); err != nil {
					return nil, err
				}
			}
			return "asked", nil
		}}}}},
		Tools: []salvage.Tool{{Name: "ask", System: "provider", Call: func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.calls = append(p.calls, time.Now())
			return salvage.ToolResult{Output: json.RawMessage(`"ok"`)}, nil
		}}},
	}
}

// mostIn returns the most requests made in any window of d.
func (p *provider) mostIn(d time.Duration) int {
	p.mu.Lock()
	calls := slices.Clone(p.calls)
	p.mu.Unlock()
	slices.SortFunc(calls, func(a, b time.Time) int { return a.Compare(b) })
	most, lo := 0, 0
	for hi, t := range calls {
		for t.Sub(calls[lo]) >= d {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// TestLimitHoldsTheFleetToItsRate: two worker processes share a limit of
// 1,200 requests a minute (20 a second) on a system whose tool answers at
// once. The limit is declared in one process's Config; the other learns
// it from salvage_limits. Both hold a share at once, their shares never
// add up past the limit, and in no 5 s window do they send more than 5 s
// of the rate and a second's burst; the job finishes.
func TestLimitHoldsTheFleetToItsRate(t *testing.T) {
	t.Parallel()
	const rpm, calls = 1200, 200
	p := &provider{}
	srv := salvagetest.StartServer(t)
	key := salvage.LimitKey(salvage.LimitSystem, "provider")
	a := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p.pipeline()}, Roles: salvage.AllRoles(), Concurrency: 8,
		Limits: []salvage.Limit{{Key: key, RequestsPerMinute: rpm}}})
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p.pipeline()}, Roles: []salvage.Role{salvage.RoleWorker}, Concurrency: 8})
	ctx := context.Background()
	id, err := a.JobSubmit(ctx, "paced", calls/4, nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		ls, err := a.LimitList(ctx)
		if err != nil || len(ls) != 1 {
			return false
		}
		if l := ls[0]; l.HeldRequestsPerMinute > rpm {
			t.Fatalf("shares add up to %.1f requests a minute, past the limit of %d: %+v", l.HeldRequestsPerMinute, rpm, l)
		}
		return ls[0].Holders == 2
	}, "both processes holding a share of %s", key)
	if j := salvagetest.WaitJob(t, a, id, 2*time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
	perSec := rpm / 60
	if most := p.mostIn(5 * time.Second); most > 5*perSec+perSec {
		t.Errorf("%d requests in 5 s; the limit allows %d and a second's burst (%d)", most, 5*perSec, perSec)
	}
	if ls, err := a.LimitList(ctx); err != nil || len(ls) != 1 || ls[0].RequestsPerMinute != rpm || ls[0].SetBy != "config" {
		t.Errorf("limits = %+v, %v", ls, err)
	}
	// 16 slots at 20 requests a second: calls waited, and their journal
	// rows, which salvage trace shows, say how long.
	tr, err := a.JobTracePage(ctx, id, &salvage.Page{Limit: salvage.PageMax})
	if err != nil {
		t.Fatal(err)
	}
	waited := 0
	for _, ch := range tr.Chunks {
		for _, c := range ch.Calls {
			if c.LimitWaitMS > 0 && c.LimitWaitMS <= c.LatencyMS {
				waited++
			}
		}
	}
	if waited == 0 {
		t.Errorf("no call of %d chunks says it waited for the rate limit (limit_wait_ms within latency_ms)", len(tr.Chunks))
	}
}

// TestSetLimitRefusesWhatCannotBeKept: a key that is not <kind>.<name>,
// a name no subject token can carry, a negative bound or no bound at all
// is refused with ErrInvalidLimit, and so is Config.Limits naming one;
// removing a limit nobody declared says so.
func TestSetLimitRefusesWhatCannotBeKept(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Roles: []salvage.Role{salvage.RoleNone}})
	ctx := context.Background()
	for _, l := range []salvage.Limit{
		{Key: "provider", RequestsPerMinute: 1},
		{Key: "region.eu", RequestsPerMinute: 1},
		{Key: "system.a.b", RequestsPerMinute: 1},
		{Key: "tool.*", RequestsPerMinute: 1},
		{Key: "system.x", RequestsPerMinute: -1},
		{Key: "system.x"},
	} {
		if _, err := c.LimitSet(ctx, l, "ann"); !errors.Is(err, salvage.ErrInvalidLimit) {
			t.Errorf("LimitSet(%+v) = %v; want ErrInvalidLimit", l, err)
		}
	}
	if _, err := salvage.NewClient(srv.JS, &salvage.Config{Limits: []salvage.Limit{{Key: "system.x"}}}); !errors.Is(err, salvage.ErrInvalidConfig) {
		t.Errorf("a Config with a limit of no bound: %v; want ErrInvalidConfig", err)
	}
	if err := c.LimitRemove(ctx, "system.nobody"); !errors.Is(err, salvage.ErrUnknownLimit) {
		t.Errorf("LimitRemove of an undeclared key = %v; want ErrUnknownLimit", err)
	}
	l, err := c.LimitSet(ctx, salvage.Limit{Key: "tool.model", TokensPerMinute: 200_000, InFlight: 8}, "ann")
	if err != nil || l.SetBy != "ann" || l.SetAt.IsZero() {
		t.Fatalf("LimitSet = %+v, %v", l, err)
	}
	if err := c.LimitRemove(ctx, "tool.model"); err != nil {
		t.Fatal(err)
	}
	if ls, err := c.LimitList(ctx); err != nil || len(ls) != 0 {
		t.Errorf("limits after the remove = %+v, %v; want none", ls, err)
	}
}

// TestRateLimitHoldsEveryProcess: one 429 asking for a 5 s wait holds the
// key in every process, not only the one refused: the limit's record
// carries the pause, and from a renewal later (2.5 s after the refusal,
// a second's renewal and margin for a slow machine) until the wait ends
// no process sends a request; then the job finishes.
func TestRateLimitHoldsEveryProcess(t *testing.T) {
	t.Parallel()
	const wait = 5 * time.Second
	var (
		mu      sync.Mutex
		calls   []time.Time
		refused time.Time
	)
	p := &provider{}
	pl := p.pipeline()
	pl.Tools[0].Call = func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		calls = append(calls, now)
		if len(calls) == 40 {
			refused = now
			return salvage.ToolResult{}, salvage.RateLimited(wait, errors.New("429 Too Many Requests"))
		}
		return salvage.ToolResult{Output: json.RawMessage(`"ok"`)}, nil
	}
	srv := salvagetest.StartServer(t)
	key := salvage.LimitKey(salvage.LimitSystem, "provider")
	cfg := func(roles ...salvage.Role) *salvage.Config {
		return &salvage.Config{Pipelines: []*salvage.Pipeline{pl}, Roles: roles, Concurrency: 4, RetryMax: 10 * time.Second,
			Limits: []salvage.Limit{{Key: key, RequestsPerMinute: 3000}}}
	}
	a := srv.Client(t, cfg(salvage.AllRoles()...))
	srv.Client(t, cfg(salvage.RoleWorker))
	ctx := context.Background()
	id, err := a.JobSubmit(ctx, "paced", 60, nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		ls, err := a.LimitList(ctx)
		return err == nil && len(ls) == 1 && ls[0].PausedUntil.After(time.Now()) && ls[0].Recent429s == 1
	}, "the pause, and the one 429, on %s's record", key)
	if j := salvagetest.WaitJob(t, a, id, 2*time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
	mu.Lock()
	defer mu.Unlock()
	var during, after int
	for _, c := range calls {
		switch {
		case c.After(refused.Add(2500*time.Millisecond)) && c.Before(refused.Add(wait)):
			during++
		case !c.Before(refused.Add(wait)):
			after++
		}
	}
	if during != 0 || after == 0 {
		t.Errorf("%d requests from 2.5 s after the 429 until its wait ended, %d after it; want none, then the rest", during, after)
	}
}

// TestFallbackTakesACallTheLimitWouldHold: a fallback chain whose first
// model is limited to 60 requests a minute (one a second) passes a call
// over to the next model when the first's budget is further away than
// the pipeline's FallbackAfter, instead of waiting for it: the job's 30
// calls finish in a few seconds, most of them on the second model, and
// the first is never sent more than its rate allows.
func TestFallbackTakesACallTheLimitWouldHold(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		got = map[string][]time.Time{}
	)
	tool := func(name, system string) salvage.Tool {
		return salvage.Tool{Name: name, System: system, Call: func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
			mu.Lock()
			defer mu.Unlock()
			got[name] = append(got[name], time.Now())
			return salvage.ToolResult{Output: json.RawMessage(`"ok"`)}, nil
		}}
	}
	p := &provider{}
	pl := p.pipeline()
	pl.Tools = []salvage.Tool{tool("premium", "premium"), tool("cheap", "cheap")}
	pl.Stages[0].Agents[0].Run = func(ctx context.Context, t *salvage.Turn) (any, error) {
		for range 10 {
			if _, _, err := t.ToolWithFallback(ctx, []string{"premium", "cheap"}, t.Input); err != nil {
				return nil, err
			}
		}
		return "asked", nil
	}
	pl.FallbackAfter = 100 * time.Millisecond
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{pl}, Roles: salvage.AllRoles(), Concurrency: 3,
		Limits: []salvage.Limit{{Key: salvage.LimitKey(salvage.LimitSystem, "premium"), RequestsPerMinute: 60}}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "paced", 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
	mu.Lock()
	defer mu.Unlock()
	premium, cheap := got["premium"], got["cheap"]
	if len(premium)+len(cheap) != 30 || len(cheap) < 15 {
		t.Errorf("%d calls to premium, %d to cheap; want 30 in all, most passed over to cheap", len(premium), len(cheap))
	}
	if len(premium) > 1 {
		if span := premium[len(premium)-1].Sub(premium[0]); float64(len(premium)-2) > span.Seconds() {
			t.Errorf("%d calls to premium in %s: past its one a second", len(premium), span)
		}
	}
	bad := *pl
	bad.Name, bad.FallbackAfter = "bad", -time.Second
	if _, err := salvage.NewClient(srv.JS, &salvage.Config{Pipelines: []*salvage.Pipeline{&bad}}); !errors.Is(err, salvage.ErrInvalidConfig) {
		t.Errorf("a negative FallbackAfter: %v; want ErrInvalidConfig", err)
	}
}
