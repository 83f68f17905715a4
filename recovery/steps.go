package recovery

import "github.com/salvagehq/salvage/salvagetype"

// The orchestrator's rules. The orchestrator (package consumers) reads the
// records and makes the calls; what it runs next for an envelope, when a
// person takes over, and how a recovery ends are decided here.

// Next returns the strategy to run now for an envelope whose record says
// strategy after attempts failed tries: ESCALATE_TO_HUMAN once they reach
// MaxStrategyAttempts.
func (l Limits) Next(strategy salvagetype.Strategy, attempts int) salvagetype.Strategy {
	if attempts >= l.WithDefaults().MaxStrategyAttempts {
		return salvagetype.StrategyEscalate
	}
	return strategy
}

// Resume returns strategy, or ESCALATE_TO_HUMAN when strategy would run a
// chunk again that had MaxRecoveries already (invariant 7: nothing loops).
// A chunk of a cancelled job never runs again at all: its effects are
// settled instead (invariant 4), which the orchestrator reads from the
// job record.
func (l Limits) Resume(strategy salvagetype.Strategy, recoveries int) salvagetype.Strategy {
	if strategy.Resumes() && recoveries >= l.WithDefaults().MaxRecoveries {
		return salvagetype.StrategyEscalate
	}
	return strategy
}

// CompensatesFirst reports whether strategy, on an envelope of category,
// undoes the chunk's effects before it ends: the compensating strategies,
// and an escalation of COMPENSATION_NEEDED (a person gets what could not
// be undone, not what could).
func CompensatesFirst(strategy salvagetype.Strategy, category salvagetype.Category) bool {
	return strategy.Compensates() || strategy == salvagetype.StrategyEscalate && category == salvagetype.CategoryCompensationNeeded
}

// End decides how an envelope ends once strategy ran: the status its
// record takes, the note that says why, and the effects a person must
// look at (left). compErr is what its compensation returned (nil when it
// undid everything it listed, or when there was none; a failure worth
// another try is not an ending), standing the effects that may still
// stand, stopped the record's Stopped. A recovery is never a dead end or abandoned while an effect may
// stand (invariant 9): a person decides. A COMPENSATE_AND_RETRY that
// compensated does not end: its chunk runs again.
func End(strategy salvagetype.Strategy, stopped string, standing []salvagetype.LeftEffect, compErr error) (status salvagetype.EnvelopeStatus, note string, left []salvagetype.LeftEffect) {
	switch strategy {
	case salvagetype.StrategyCompensateAndRetry, salvagetype.StrategyCompensateAndAbandon:
		if compErr != nil {
			return salvagetype.EnvelopeEscalated, "compensation failed: " + compErr.Error(), standing
		}
		if len(standing) > 0 {
			// What the envelope listed is undone, yet something stands
			// (an effect recorded since).
			return salvagetype.EnvelopeEscalated, "compensated what was listed; effects still stand", standing
		}
		if stopped == salvagetype.StoppedCancelled {
			return salvagetype.EnvelopeAbandoned, "job cancelled; every effect of the chunk compensated", nil
		}
		return salvagetype.EnvelopeAbandoned, "every effect compensated; order abandoned", nil
	case salvagetype.StrategyEscalate:
		note = "needs a human"
		if compErr != nil {
			note = "compensation failed: " + compErr.Error()
		}
		return salvagetype.EnvelopeEscalated, note, standing
	}
	// DEAD_END
	if len(standing) > 0 {
		return salvagetype.EnvelopeEscalated, "permanent failure with effects that may stand", standing
	}
	return salvagetype.EnvelopeDeadEnd, "permanent failure with no effects to undo", nil
}
