package recovery_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// lateLedger is a payment system that applies every charge it is asked
// for, once per idempotency key, and then answers with whatever fail
// says for that attempt: the effect lands whatever the answer claims.
type lateLedger struct {
	mu       sync.Mutex
	applied  map[string]int // key -> times applied (must stay 1)
	requests int
	verifies int
	// fail returns the error attempt n (1-based) answers with; nil: ok.
	fail func(n int) error
	// verifyErr, when set, is what every verification answers.
	verifyErr error
	// apply false: the failing attempts do not take effect.
	noApplyOnError bool
}

func (l *lateLedger) tools(t *testing.T) *recovery.Tools {
	t.Helper()
	tools, err := recovery.NewTools(
		salvagetype.Tool{Name: "charge", System: "payments", Effect: &salvagetype.SideEffect{
			Reversible: true, Compensation: "refund",
			Verify: func(_ context.Context, key string) (salvagetype.Verification, error) {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.verifies++
				if l.verifyErr != nil {
					return salvagetype.Verification{}, l.verifyErr
				}
				return salvagetype.Verification{Applied: l.applied[key] > 0, ResourceID: "ch_" + key[:6], Output: json.RawMessage(`"charged"`)}, nil
			},
		}, Call: func(_ context.Context, c salvagetype.ToolCall) (salvagetype.ToolResult, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.requests++
			var err error
			if l.fail != nil {
				err = l.fail(l.requests)
			}
			if err == nil || !l.noApplyOnError {
				l.applied[c.IdempotencyKey]++
			}
			return salvagetype.ToolResult{Output: json.RawMessage(`"charged"`), ResourceID: "ch_" + c.IdempotencyKey[:6]}, err
		}},
		salvagetype.Tool{Name: "refund", Call: func(context.Context, salvagetype.ToolCall) (salvagetype.ToolResult, error) {
			return salvagetype.ToolResult{}, nil
		}},
		salvagetype.Tool{Name: "big", Call: func(context.Context, salvagetype.ToolCall) (salvagetype.ToolResult, error) {
			out, _ := json.Marshal(strings.Repeat("x", salvagetype.MaxOutput))
			return salvagetype.ToolResult{Output: out}, nil
		}},
		salvagetype.Tool{Name: "liar", Call: func(context.Context, salvagetype.ToolCall) (salvagetype.ToolResult, error) {
			return salvagetype.ToolResult{Output: json.RawMessage(`1`), Usage: &salvagetype.Usage{PromptTokens: -1_000_000}}, nil
		}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return tools
}

// callOnce runs one agent that calls tool once, with retries tier-1
// retries, and returns the stage's error and the call's journal row.
func callOnce(t *testing.T, tools *recovery.Tools, j *memJournal, tool string, retries int) (kv.JournalRow, error) {
	t.Helper()
	exec, _ := recovery.NewExecutor(recovery.RetryPolicy{MaxRetries: retries, BaseDelay: 1, MaxDelay: 1}, zerolog.Nop())
	var stats recovery.Stats
	_, err := recovery.RunStage(context.Background(), salvagetype.Stage{Agents: []salvagetype.Agent{{Name: "payer", Run: func(ctx context.Context, turn *salvagetype.Turn) (any, error) {
		return turn.Tool(ctx, tool, "order-1")
	}}}}, recovery.StageRun{Job: "J", Chunk: 1, Stage: 1, Exec: exec, Stats: &stats, Tools: tools, Replay: recovery.NewReplay(j, nil)})
	return j.rows[kv.JournalKey("J", 1, 0, 1, "payer", 1)].JournalRow, err
}

// TestSideEffectIsVerifiedBeforeEveryRetry: a side effect whose attempt
// failed in a way that does not say "not applied" (a 503 after the
// effect landed, a plain transient error, a timeout) is verified before
// it is made again; the system applies it once. A refusal that says so
// (NotApplied, a rate limit) is retried without a verify.
func TestSideEffectIsVerifiedBeforeEveryRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		err          error
		notApplied   bool
		wantVerifies int
		wantRequests int
	}{
		{"503 after the effect landed", salvagetype.Transient(503, errors.New("upstream hiccup")), false, 1, 1},
		{"a transient error without a status", salvagetype.Transient(0, errors.New("connection reset")), false, 1, 1},
		{"a timeout", salvagetype.Timeout(errors.New("no answer")), false, 1, 1},
		{"409 conflict", salvagetype.Transient(409, errors.New("conflict")), false, 1, 1},
		{"no responders: never reached the system", salvagetype.NotApplied(salvagetype.Transient(503, errors.New("no responders"))), true, 0, 2},
		{"rate limited", salvagetype.RateLimited(1, errors.New("slow down")), true, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &lateLedger{applied: map[string]int{}, noApplyOnError: tt.notApplied}
			l.fail = func(n int) error {
				if n == 1 {
					return tt.err
				}
				return nil
			}
			row, err := callOnce(t, l.tools(t), &memJournal{rows: map[string]kv.StoredRow{}}, "charge", 3)
			if err != nil {
				t.Fatal(err)
			}
			if l.verifies != tt.wantVerifies || l.requests != tt.wantRequests {
				t.Fatalf("verifies %d, requests %d; want %d, %d", l.verifies, l.requests, tt.wantVerifies, tt.wantRequests)
			}
			for key, n := range l.applied {
				if n != 1 {
					t.Fatalf("key %s applied %d times", key, n)
				}
			}
			if row.Status != salvagetype.CallSucceeded || row.Fingerprint == nil || row.Fingerprint.ResourceID == "" || row.Verified == tt.notApplied {
				t.Fatalf("row = %+v", row)
			}
		})
	}
}

// TestUnknownStaysUnknown: when the last attempt's outcome is unknown —
// tier 1 ran out on 5xx answers, or the verification itself fails — the
// row says UNKNOWN (the next run verifies first), never FAILED.
func TestUnknownStaysUnknown(t *testing.T) {
	t.Parallel()
	l := &lateLedger{applied: map[string]int{}, noApplyOnError: true, fail: func(int) error { return salvagetype.Transient(500, errors.New("boom")) }}
	row, err := callOnce(t, l.tools(t), &memJournal{rows: map[string]kv.StoredRow{}}, "charge", 2)
	if !errors.Is(err, salvagetype.ErrRetriesExhausted) || !strings.Contains(err.Error(), "the limit of 2 retries") {
		t.Fatalf("err = %v, want tier 1 exhausted naming its limit", err)
	}
	if row.Status != salvagetype.CallUnknown || l.requests != 3 || l.verifies != 2 || row.Attempts != 3 {
		t.Fatalf("row %s (%d attempts) after %d requests, %d verifies; want UNKNOWN after 3 requests, each retry verified first", row.Status, row.Attempts, l.requests, l.verifies)
	}

	// The system applies but answers 500 and its verification answers
	// garbage: nothing can be known, so the row stays UNKNOWN.
	l = &lateLedger{applied: map[string]int{}, fail: func(int) error { return salvagetype.Transient(500, errors.New("boom")) },
		verifyErr: salvagetype.Permanent(0, errors.New("verify reply is not JSON"))}
	row, err = callOnce(t, l.tools(t), &memJournal{rows: map[string]kv.StoredRow{}}, "charge", 3)
	if err == nil || row.Status != salvagetype.CallUnknown || l.requests != 1 || l.verifies != 1 {
		t.Fatalf("err %v, row %s, %d requests, %d verifies; want UNKNOWN after one request and one verify", err, row.Status, l.requests, l.verifies)
	}
	var f recovery.Failure
	f.Class = recovery.ClassOf(err)
	f.FromJournal(map[string]kv.StoredRow{row.Key: {JournalRow: row}})
	if c, s := f.Classify(recovery.Limits{}); c != salvagetype.CategoryToolTimeout || s != salvagetype.StrategyVerify {
		t.Fatalf("a permanent error with a charge in flight classified %s/%s, want TOOL_TIMEOUT/VERIFY", c, s)
	}
}

// TestRepliesThatCannotBeJournaled: an output past MaxOutput and usage
// that is not a count fail the call permanently at once, by type.
func TestRepliesThatCannotBeJournaled(t *testing.T) {
	t.Parallel()
	l := &lateLedger{applied: map[string]int{}}
	tools := l.tools(t)
	row, err := callOnce(t, tools, &memJournal{rows: map[string]kv.StoredRow{}}, "big", 3)
	if !errors.Is(err, salvagetype.ErrOutputTooLarge) || !recovery.ClassOf(err).Permanent() || row.Status != salvagetype.CallFailed || row.Attempts != 1 {
		t.Fatalf("big output: err %v, row %+v", err, row.Status)
	}
	row, err = callOnce(t, tools, &memJournal{rows: map[string]kv.StoredRow{}}, "liar", 3)
	if !errors.Is(err, salvagetype.ErrBadUsage) || !recovery.ClassOf(err).Permanent() || row.Attempts != 1 || row.Usage != nil {
		t.Fatalf("negative usage: err %v, row %+v", err, row)
	}
	// A side effect that answered too much may have taken effect: it is
	// left UNKNOWN for a verify, not FAILED.
	l.fail = func(int) error { return nil }
	big := strings.Repeat("x", salvagetype.MaxOutput)
	tools2, _ := recovery.NewTools(
		salvagetype.Tool{Name: "charge", Effect: &salvagetype.SideEffect{Verify: func(context.Context, string) (salvagetype.Verification, error) {
			return salvagetype.Verification{}, errors.New("down")
		}}, Call: func(context.Context, salvagetype.ToolCall) (salvagetype.ToolResult, error) {
			out, _ := json.Marshal(big)
			return salvagetype.ToolResult{Output: out}, nil
		}})
	row, err = callOnce(t, tools2, &memJournal{rows: map[string]kv.StoredRow{}}, "charge", 0)
	if !errors.Is(err, salvagetype.ErrOutputTooLarge) || row.Status != salvagetype.CallUnknown {
		t.Fatalf("side effect with a huge answer: err %v, row %s", err, row.Status)
	}
}

// TestSettleCountsTheRequestThatWentOut: a call found applied by a
// verification went out at least once.
func TestSettleCountsTheRequestThatWentOut(t *testing.T) {
	t.Parallel()
	l := &lateLedger{applied: map[string]int{}}
	tool, _ := l.tools(t).Get("charge")
	row := recovery.Settle(tool, kv.JournalRow{Call: salvagetype.Call{Key: "k", IdempotencyKey: "key-123456", Status: salvagetype.CallInitiated}}, salvagetype.Verification{Applied: true, ResourceID: "ch_1"}, time.Now())
	if row.Status != salvagetype.CallSucceeded || row.Attempts != 1 || !row.Verified || row.Fingerprint == nil || row.Fingerprint.ResourceID != "ch_1" {
		t.Fatalf("settled = %+v", row)
	}
	row = recovery.Settle(tool, kv.JournalRow{Call: salvagetype.Call{Key: "k", Status: salvagetype.CallUnknown, Attempts: 2}}, salvagetype.Verification{}, time.Now())
	if row.Status != salvagetype.CallFailed || row.Attempts != 2 || row.Fingerprint != nil {
		t.Fatalf("settled not applied = %+v", row)
	}
}
