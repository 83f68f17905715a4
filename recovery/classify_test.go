package recovery_test

import (
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

func effect(tool string, reversible bool) kv.JournalRow {
	return kv.JournalRow{Call: salvagetype.Call{Tool: tool, Status: salvagetype.CallSucceeded, Fingerprint: &salvagetype.Fingerprint{Reversible: reversible}}}
}

// TestClassifierTable covers every row of the classifier table of docs/design.md.
func TestClassifierTable(t *testing.T) {
	t.Parallel()
	reserve, charge, email := effect("reserve", true), effect("charge", true), effect("email", false)
	tests := []struct {
		name     string
		f        recovery.Failure
		category salvagetype.Category
		strategy salvagetype.Strategy
	}{
		{"transient exhausted both tiers, nothing in flight",
			recovery.Failure{Class: salvagetype.ClassTransient, Exhausted: true}, salvagetype.CategoryTransientNetwork, salvagetype.StrategyResume},
		{"rate limited to exhaustion",
			recovery.Failure{Class: salvagetype.ClassRateLimited, Status: 429, Exhausted: true}, salvagetype.CategoryTransientNetwork, salvagetype.StrategyResume},
		{"external system down (503)",
			recovery.Failure{Class: salvagetype.ClassTransient, Status: 503, Exhausted: true}, salvagetype.CategoryExternalSystemDown, salvagetype.StrategyResume},
		{"call in flight when the worker died",
			recovery.Failure{Class: salvagetype.ClassTransient, Exhausted: true, InFlight: true}, salvagetype.CategoryToolTimeout, salvagetype.StrategyVerify},
		{"call timed out",
			recovery.Failure{Class: salvagetype.ClassTimeout, Exhausted: true}, salvagetype.CategoryToolTimeout, salvagetype.StrategyVerify},
		{"permanent after reversible effects only",
			recovery.Failure{Class: salvagetype.ClassPermanent, Completed: []kv.JournalRow{reserve, charge}}, salvagetype.CategoryPartialExecution, salvagetype.StrategyCompensateAndAbandon},
		{"permanent after reversible effects, failing step retryable after compensation",
			recovery.Failure{Class: salvagetype.ClassPermanent, Completed: []kv.JournalRow{reserve}, FailingRetryableAfterCompensation: true}, salvagetype.CategoryPartialExecution, salvagetype.StrategyCompensateAndRetry},
		{"permanent after an irreversible effect",
			recovery.Failure{Class: salvagetype.ClassPermanent, Completed: []kv.JournalRow{reserve, email}}, salvagetype.CategoryCompensationNeeded, salvagetype.StrategyEscalate},
		{"budget exceeded",
			recovery.Failure{Class: salvagetype.ClassPermanent, BudgetExceeded: true, Completed: []kv.JournalRow{reserve}}, salvagetype.CategoryBudgetExceeded, salvagetype.StrategyEscalate},
		{"permanent, no effects",
			recovery.Failure{Class: salvagetype.ClassPermanent}, salvagetype.CategoryUnrecoverable, salvagetype.StrategyDeadEnd},
		{"strategy failed 3 times",
			recovery.Failure{Class: salvagetype.ClassTransient, Exhausted: true, StrategyFailures: 3}, salvagetype.CategoryTransientNetwork, salvagetype.StrategyEscalate},
		{"permanent error while a side effect is in flight (a verification failed)",
			recovery.Failure{Class: salvagetype.ClassPermanent, InFlight: true}, salvagetype.CategoryToolTimeout, salvagetype.StrategyVerify},
		{"permanent error after reversible effects, one still in flight",
			recovery.Failure{Class: salvagetype.ClassPermanent, InFlight: true, Completed: []kv.JournalRow{reserve}}, salvagetype.CategoryToolTimeout, salvagetype.StrategyVerify},
		{"job cancelled with a charge in flight",
			recovery.Failure{Class: salvagetype.ClassCancelled, Cancelled: true, InFlight: true}, salvagetype.CategoryToolTimeout, salvagetype.StrategyVerify},
		{"job cancelled after reversible effects",
			recovery.Failure{Class: salvagetype.ClassCancelled, Cancelled: true, Completed: []kv.JournalRow{reserve, charge}}, salvagetype.CategoryPartialExecution, salvagetype.StrategyCompensateAndAbandon},
		{"job cancelled after an irreversible effect",
			recovery.Failure{Class: salvagetype.ClassCancelled, Cancelled: true, Completed: []kv.JournalRow{email}}, salvagetype.CategoryCompensationNeeded, salvagetype.StrategyEscalate},
		{"job cancelled after reversible effects, past its recoveries: still compensated",
			recovery.Failure{Class: salvagetype.ClassCancelled, Cancelled: true, Completed: []kv.JournalRow{charge}, Recoveries: 3}, salvagetype.CategoryPartialExecution, salvagetype.StrategyCompensateAndAbandon},
		{"recoveries past the maximum",
			recovery.Failure{Class: salvagetype.ClassPermanent, Completed: []kv.JournalRow{reserve}, Recoveries: 3}, salvagetype.CategoryPartialExecution, salvagetype.StrategyEscalate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := tt.f.Classify(recovery.Limits{})
			if c != tt.category || s != tt.strategy {
				t.Fatalf("Classify = %s/%s, want %s/%s", c, s, tt.category, tt.strategy)
			}
		})
	}
}

func TestFailureFromJournal(t *testing.T) {
	t.Parallel()
	rows := map[string]kv.StoredRow{
		"a": {JournalRow: effect("reserve", true), Seq: 1},
		"b": {JournalRow: kv.JournalRow{Call: salvagetype.Call{Tool: "model", Status: salvagetype.CallSucceeded}}, Seq: 2},
		"c": {JournalRow: kv.JournalRow{Call: salvagetype.Call{Tool: "email", Status: salvagetype.CallFailed}, RetryableAfterCompensation: true}, Seq: 3},
		"d": {JournalRow: kv.JournalRow{Call: salvagetype.Call{Tool: "crm", Status: salvagetype.CallInitiated}}, Seq: 4},
	}
	var f recovery.Failure
	f.FromJournal(rows)
	if len(f.Completed) != 1 || f.Completed[0].Tool != "reserve" || !f.InFlight || !f.FailingRetryableAfterCompensation {
		t.Fatalf("facts = %+v", f)
	}
}

// TestAutoRecoveryRate: per chunk, by its latest envelope; a superseded
// envelope is not counted twice; dead ends, escalations and anything a
// person touched count against it.
func TestAutoRecoveryRate(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Unix(1_700_000_000+int64(s), 0) }
	recs := []kv.EnvelopeRecord{
		// chunk 1: failed, recovery requeued, failed again, then finished.
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "A", Job: "J", Chunk: 1, Status: salvagetype.EnvelopeSuperseded, CreatedAt: at(1)}},
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "B", Job: "J", Chunk: 1, Status: salvagetype.EnvelopeResolved, ResolvedBy: "chunk", CreatedAt: at(2)}},
		// chunk 2: compensated, nothing left.
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "C", Job: "J", Chunk: 2, Status: salvagetype.EnvelopeAbandoned, CreatedAt: at(1)}},
		// chunk 3: a dead end nobody touched.
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "D", Job: "J", Chunk: 3, Status: salvagetype.EnvelopeDeadEnd, CreatedAt: at(1)}},
		// chunk 4: escalated.
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "E", Job: "J", Chunk: 4, Status: salvagetype.EnvelopeEscalated, CreatedAt: at(1)}},
		// chunk 5: finished, but only after an operator replayed it.
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "F", Job: "J", Chunk: 5, Status: salvagetype.EnvelopeResolved, ResolvedBy: "chunk", Replays: 1, Human: true, CreatedAt: at(1)}},
		// chunk 6: resolved by hand.
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "G", Job: "J", Chunk: 6, Status: salvagetype.EnvelopeResolved, ResolvedBy: "alice", Human: true, CreatedAt: at(1)}},
		// chunk 7: still recovering.
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "H", Job: "J", Chunk: 7, Status: salvagetype.EnvelopeRecovering, CreatedAt: at(1)}},
		// chunk 8: a person rejected its approval — a decision, not a
		// failure: it is not counted at all.
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "I", Job: "J", Chunk: 8, Status: salvagetype.EnvelopeDeadEnd, Human: true, Rejected: true, CreatedAt: at(1)}},
	}
	got := recovery.AutoRecoveryRate(recs)
	if got.DeadLettered != 7 || got.Recovered != 2 || got.Rate != 2.0/7 {
		t.Fatalf("AutoRecoveryRate = %+v, want 2 of 7 chunks", got)
	}
	if r := recovery.AutoRecoveryRate(nil); r.Rate != 1 || r.DeadLettered != 0 {
		t.Fatalf("no envelopes: %+v, want rate 1", r)
	}
}

// TestLimitsAreConfigurable: a chunk past its configured recoveries
// escalates; the defaults are 3 and 3.
func TestLimitsAreConfigurable(t *testing.T) {
	t.Parallel()
	f := recovery.Failure{Class: salvagetype.ClassTransient, Exhausted: true, Recoveries: 1}
	if _, s := f.Classify(recovery.Limits{}); s != salvagetype.StrategyResume {
		t.Errorf("one recovery under the default limit: %s", s)
	}
	if _, s := f.Classify(recovery.Limits{MaxRecoveries: 1}); s != salvagetype.StrategyEscalate {
		t.Errorf("one recovery with MaxRecoveries 1: %s, want escalate", s)
	}
	if l := (recovery.Limits{}).WithDefaults(); l.MaxRecoveries != 3 || l.MaxStrategyAttempts != 3 {
		t.Errorf("defaults = %+v", l)
	}
}
