package recovery

import (
	"net/http"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// Failure is what the classifier knows about a chunk that could not
// finish: its last error, from typed errors only, and its journal.
type Failure struct {
	// Class and Status of the last error (Status is the HTTP-like code).
	Class  salvagetype.Class
	Status int
	// Exhausted is true when the chunk used up its deliveries.
	Exhausted bool
	// InFlight is true when a call was running when the chunk failed: a
	// journal row left INITIATED, or a worker that died without a result.
	InFlight bool
	// Completed are the side effects that took place in this epoch, in
	// the order they happened.
	Completed []kv.JournalRow
	// FailingRetryableAfterCompensation marks a failing step that may run
	// again once the chunk's effects are undone.
	FailingRetryableAfterCompensation bool
	// BudgetExceeded is set when the job ran out of budget.
	BudgetExceeded bool
	// Rejected is set when a person rejected the chunk's approval: what
	// it did is compensated and it is abandoned (escalated when an
	// irreversible effect stands).
	Rejected bool
	// Cancelled is set when the chunk's job was cancelled (by a person or
	// its budget) while the chunk had effects that may stand: they are
	// settled as a rejection's are — unknown outcomes verified first, what
	// is reversible compensated, the rest escalated by name.
	Cancelled bool
	// Recoveries the chunk already had; StrategyFailures of this envelope.
	Recoveries       int
	StrategyFailures int
}

// FromJournal fills the journal facts of f from one chunk epoch's rows.
func (f *Failure) FromJournal(rows Rows) {
	for _, r := range rows.Sorted() {
		switch {
		case r.Status == salvagetype.CallInitiated || r.Status == salvagetype.CallUnknown:
			f.InFlight = true
		case r.Status == salvagetype.CallSucceeded && r.Fingerprint != nil:
			f.Completed = append(f.Completed, r.JournalRow)
		case r.Status == salvagetype.CallFailed && r.RetryableAfterCompensation:
			f.FailingRetryableAfterCompensation = true
		}
	}
}

// Limits bound recovery so nothing loops (invariant 7). Zero fields take
// the defaults.
type Limits struct {
	// MaxRecoveries is how many recoveries a chunk gets across all its
	// envelopes before the next one escalates. Default
	// MaxRecoveriesDefault.
	MaxRecoveries int
	// MaxStrategyAttempts is how often a failing strategy is tried before
	// the envelope escalates. Default MaxStrategyAttemptsDefault.
	MaxStrategyAttempts int
}

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxRecoveries <= 0 {
		l.MaxRecoveries = salvagetype.MaxRecoveriesDefault
	}
	if l.MaxStrategyAttempts <= 0 {
		l.MaxStrategyAttempts = salvagetype.MaxStrategyAttemptsDefault
	}
	return l
}

// Stopped reports whether a person stopped the chunk (a rejected
// approval, a cancelled job): it never runs again, so what it did is
// settled instead of resumed.
func (f Failure) Stopped() bool { return f.Rejected || f.Cancelled }

// Classify picks the failure's category and strategy by the design's
// table, from typed errors and the journal — never from error text. A
// chunk past l's limits escalates; a stopped chunk is not held to the recoveries
// limit, which bounds resumes, and a stopped chunk never resumes.
func (f Failure) Classify(l Limits) (category salvagetype.Category, strategy salvagetype.Strategy) {
	l = l.WithDefaults()
	category, strategy = classify(f)
	if (f.Recoveries >= l.MaxRecoveries && !f.Stopped()) || f.StrategyFailures >= l.MaxStrategyAttempts {
		return category, salvagetype.StrategyEscalate
	}
	return category, strategy
}

func classify(f Failure) (salvagetype.Category, salvagetype.Strategy) {
	reversible, irreversible := 0, 0
	for _, r := range f.Completed {
		if r.Fingerprint.Reversible {
			reversible++
		} else {
			irreversible++
		}
	}
	switch {
	case f.BudgetExceeded:
		return salvagetype.CategoryBudgetExceeded, salvagetype.StrategyEscalate
	case f.InFlight:
		// A side effect whose outcome is unknown may stand, whatever else
		// went wrong: it is verified before anything is decided
		// (invariant 9), never classified away as "no effects".
		return salvagetype.CategoryToolTimeout, salvagetype.StrategyVerify
	case f.Stopped() && irreversible > 0:
		return salvagetype.CategoryCompensationNeeded, salvagetype.StrategyEscalate
	case f.Stopped() && reversible > 0:
		return salvagetype.CategoryPartialExecution, salvagetype.StrategyCompensateAndAbandon
	case f.Stopped():
		return salvagetype.CategoryUnrecoverable, salvagetype.StrategyCompensateAndAbandon
	case f.Class.Permanent() && irreversible > 0:
		// Compensate what is reversible, escalate the rest.
		return salvagetype.CategoryCompensationNeeded, salvagetype.StrategyEscalate
	case f.Class.Permanent() && reversible > 0 && f.FailingRetryableAfterCompensation:
		return salvagetype.CategoryPartialExecution, salvagetype.StrategyCompensateAndRetry
	case f.Class.Permanent() && reversible > 0:
		return salvagetype.CategoryPartialExecution, salvagetype.StrategyCompensateAndAbandon
	case f.Class.Permanent():
		return salvagetype.CategoryUnrecoverable, salvagetype.StrategyDeadEnd
	case f.Class == salvagetype.ClassTimeout:
		return salvagetype.CategoryToolTimeout, salvagetype.StrategyVerify
	case f.Class == salvagetype.ClassBreakerOpen || f.Status == http.StatusServiceUnavailable:
		return salvagetype.CategoryExternalSystemDown, salvagetype.StrategyResume
	default:
		return salvagetype.CategoryTransientNetwork, salvagetype.StrategyResume
	}
}
