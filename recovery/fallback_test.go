package recovery_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// model is a model tool whose answers a test sets.
type model struct {
	name, system string
	calls        atomic.Int32
	fail         atomic.Pointer[error]
}

func (m *model) tool() salvagetype.Tool {
	return salvagetype.Tool{Name: m.name, System: m.system, Call: func(context.Context, salvagetype.ToolCall) (salvagetype.ToolResult, error) {
		m.calls.Add(1)
		if e := m.fail.Load(); e != nil {
			return salvagetype.ToolResult{}, *e
		}
		return salvagetype.ToolResult{Output: json.RawMessage(`"` + m.name + ` says hi"`), Usage: &salvagetype.Usage{Model: m.name, PromptTokens: 10, CompletionTokens: 2}}, nil
	}}
}

func (m *model) failWith(err error) { m.fail.Store(&err) }

// gateClosedTo refuses one system, as an open breaker does.
type gateClosedTo string

func (g gateClosedTo) Allow(_ context.Context, system, _ string) error {
	if system == string(g) {
		return &salvagetype.BreakerOpenError{System: system, State: salvagetype.BreakerOpen}
	}
	return nil
}
func (gateClosedTo) Done(context.Context, string, string, error) {}

// runChain runs an agent that asks the chain, then makes one more call,
// against the journal j.
func runChain(t *testing.T, tools *recovery.Tools, j *memJournal, gate recovery.Gate) (string, json.RawMessage, error) {
	t.Helper()
	exec, _ := recovery.NewExecutor(recovery.RetryPolicy{MaxRetries: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, zerolog.Nop())
	rows := map[string]kv.StoredRow{}
	for k, v := range j.rows {
		rows[k] = v
	}
	var who string
	var out json.RawMessage
	_, err := recovery.RunStage(context.Background(), salvagetype.Stage{Agents: []salvagetype.Agent{{Name: "writer", Run: func(ctx context.Context, turn *salvagetype.Turn) (any, error) {
		var err error
		out, who, err = turn.ToolWithFallback(ctx, []string{"premium", "cheap"}, "hello")
		if err != nil {
			return nil, err
		}
		_, err = turn.Tool(ctx, "after", "next")
		return out, err
	}}}}, recovery.StageRun{Job: "J", Chunk: 1, Stage: 1, Exec: exec, Stats: &recovery.Stats{}, Tools: tools, Replay: recovery.NewReplay(j, rows), Gate: gate})
	return who, out, err
}

func TestFallbackChainPassesRateLimitsAndOpenBreakers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		set  func(premium *model) recovery.Gate
	}{
		{"rate limited", func(p *model) recovery.Gate {
			p.failWith(salvagetype.RateLimited(10*time.Second, errors.New("429"))) // within tier 1's cap: a link that waited would wait 10 s
			return nil
		}},
		{"breaker open", func(p *model) recovery.Gate { return gateClosedTo("premium-api") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			premium, cheap, after := &model{name: "premium", system: "premium-api"}, &model{name: "cheap", system: "cheap-api"}, &model{name: "after"}
			tools, err := recovery.NewTools(premium.tool(), cheap.tool(), after.tool())
			if err != nil {
				t.Fatal(err)
			}
			j := &memJournal{rows: map[string]kv.StoredRow{}}
			gate := c.set(premium)
			var who string
			var out json.RawMessage
			// In a bubble the clock moves only when the chain waits: a
			// chain that waited out the 10 s rate limit, or any part
			// of it, returns with the clock moved.
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				who, out, err = runChain(t, tools, j, gate)
				if waited := time.Since(start); waited != 0 {
					t.Fatalf("the chain waited %s; want no wait for the rate limit", waited)
				}
			})
			if err != nil || who != "cheap" || string(out) != `"cheap says hi"` {
				t.Fatalf("chain answered %q %s, %v; want the cheap model", who, out, err)
			}
			if n := premium.calls.Load(); (gate == nil && n != 1) || (gate != nil && n != 0) {
				t.Fatalf("premium asked %d times; want once when rate limited, never when its breaker is open", n)
			}
			p, ch := j.rows[kv.JournalKey("J", 1, 0, 1, "writer", 1)], j.rows[kv.JournalKey("J", 1, 0, 1, "writer", 2)]
			if p.Tool != "premium" || p.Status != salvagetype.CallFailed || (p.ErrorClass != "rate-limited" && p.ErrorClass != "breaker-open") {
				t.Fatalf("premium's row %+v", p.JournalRow)
			}
			if ch.Tool != "cheap" || ch.Status != salvagetype.CallSucceeded || ch.Usage == nil || ch.Usage.Model != "cheap" {
				t.Fatalf("cheap's row %+v", ch.JournalRow)
			}
			// A resume, with the premium model healthy again: the same
			// calls under the same keys, nothing asked again.
			premium.fail.Store(nil)
			before := premium.calls.Load()
			who, out, err = runChain(t, tools, j, nil)
			if err != nil || who != "cheap" || string(out) != `"cheap says hi"` || premium.calls.Load() != before || cheap.calls.Load() != 1 {
				t.Fatalf("resume answered %q %s, %v; premium asked %d more, cheap %d in all", who, out, err, premium.calls.Load()-before, cheap.calls.Load())
			}
			if after.calls.Load() != 1 {
				t.Fatalf("the call after the chain ran %d times", after.calls.Load())
			}
		})
	}
}

func TestFallbackChainReturnsOtherFailures(t *testing.T) {
	t.Parallel()
	premium, cheap := &model{name: "premium", system: "p"}, &model{name: "cheap", system: "c"}
	premium.failWith(salvagetype.Permanent(400, errors.New("bad prompt")))
	tools, _ := recovery.NewTools(premium.tool(), cheap.tool(), (&model{name: "after"}).tool())
	who, _, err := runChain(t, tools, &memJournal{rows: map[string]kv.StoredRow{}}, nil)
	if !errors.Is(err, salvagetype.ErrPermanent) || who != "premium" || cheap.calls.Load() != 0 {
		t.Fatalf("a permanent failure must end the chain: %q, %v, cheap asked %d", who, err, cheap.calls.Load())
	}
}
