package recovery_test

import (
	"errors"
	"testing"

	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// TestLimitsBoundStrategiesAndResumes: a strategy that failed its tries
// escalates; a strategy that would run the chunk again escalates once the
// chunk had its recoveries; nothing else changes.
func TestLimitsBoundStrategiesAndResumes(t *testing.T) {
	t.Parallel()
	l := recovery.Limits{MaxRecoveries: 2, MaxStrategyAttempts: 3}
	if got := l.Next(salvagetype.StrategyResume, 2); got != salvagetype.StrategyResume {
		t.Errorf("resume after 2 of 3 tries = %s", got)
	}
	if got := l.Next(salvagetype.StrategyCompensateAndAbandon, 3); got != salvagetype.StrategyEscalate {
		t.Errorf("compensate after 3 of 3 tries = %s, want an escalation", got)
	}
	if got := (recovery.Limits{}).Next(salvagetype.StrategyResume, salvagetype.MaxStrategyAttemptsDefault); got != salvagetype.StrategyEscalate {
		t.Errorf("zero limits take the default attempts: %s", got)
	}
	for _, tc := range []struct {
		strategy   salvagetype.Strategy
		recoveries int
		want       salvagetype.Strategy
	}{
		{salvagetype.StrategyResume, 1, salvagetype.StrategyResume},
		{salvagetype.StrategyResume, 2, salvagetype.StrategyEscalate},
		{salvagetype.StrategyCompensateAndRetry, 2, salvagetype.StrategyEscalate},
		{salvagetype.StrategyCompensateAndAbandon, 9, salvagetype.StrategyCompensateAndAbandon},
		{salvagetype.StrategyDeadEnd, 9, salvagetype.StrategyDeadEnd},
	} {
		if got := l.Resume(tc.strategy, tc.recoveries); got != tc.want {
			t.Errorf("Resume(%s, %d recoveries) = %s, want %s", tc.strategy, tc.recoveries, got, tc.want)
		}
	}
	if !recovery.CompensatesFirst(salvagetype.StrategyEscalate, salvagetype.CategoryCompensationNeeded) ||
		recovery.CompensatesFirst(salvagetype.StrategyEscalate, salvagetype.CategoryBudgetExceeded) ||
		!recovery.CompensatesFirst(salvagetype.StrategyCompensateAndRetry, "") || recovery.CompensatesFirst(salvagetype.StrategyDeadEnd, "") {
		t.Error("only the compensating strategies and an escalation of COMPENSATION_NEEDED undo effects first")
	}
}

// TestEndNeverLeavesAnEffectStanding (invariant 9): whatever the strategy,
// an envelope with an effect that may stand ends escalated with the
// effect named; only one with nothing standing is abandoned or a dead end.
func TestEndNeverLeavesAnEffectStanding(t *testing.T) {
	t.Parallel()
	left := []salvagetype.LeftEffect{{Tool: "charge"}}
	refused := errors.New("refund refused: 400")
	for _, tc := range []struct {
		strategy salvagetype.Strategy
		stopped  string
		standing []salvagetype.LeftEffect
		compErr  error
		want     salvagetype.EnvelopeStatus
		note     string
	}{
		{salvagetype.StrategyCompensateAndAbandon, "", nil, nil, salvagetype.EnvelopeAbandoned, "every effect compensated; order abandoned"},
		{salvagetype.StrategyCompensateAndAbandon, salvagetype.StoppedCancelled, nil, nil, salvagetype.EnvelopeAbandoned, "job cancelled; every effect of the chunk compensated"},
		{salvagetype.StrategyCompensateAndAbandon, "", left, nil, salvagetype.EnvelopeEscalated, "compensated what was listed; effects still stand"},
		{salvagetype.StrategyCompensateAndRetry, "", left, refused, salvagetype.EnvelopeEscalated, "compensation failed: refund refused: 400"},
		{salvagetype.StrategyEscalate, "", nil, nil, salvagetype.EnvelopeEscalated, "needs a human"},
		{salvagetype.StrategyEscalate, "", left, refused, salvagetype.EnvelopeEscalated, "compensation failed: refund refused: 400"},
		{salvagetype.StrategyDeadEnd, "", nil, nil, salvagetype.EnvelopeDeadEnd, "permanent failure with no effects to undo"},
		{salvagetype.StrategyDeadEnd, "", left, nil, salvagetype.EnvelopeEscalated, "permanent failure with effects that may stand"},
	} {
		status, note, named := recovery.End(tc.strategy, tc.stopped, tc.standing, tc.compErr)
		if status != tc.want || note != tc.note {
			t.Errorf("End(%s, %d standing, %v) = %s %q, want %s %q", tc.strategy, len(tc.standing), tc.compErr, status, note, tc.want, tc.note)
		}
		if len(tc.standing) > 0 && len(named) != len(tc.standing) {
			t.Errorf("End(%s) with effects standing names %d of them, want %d", tc.strategy, len(named), len(tc.standing))
		}
		if status != salvagetype.EnvelopeEscalated && len(tc.standing) > 0 {
			t.Errorf("End(%s) = %s with an effect standing", tc.strategy, status)
		}
	}
}
