package salvage

import (
	"fmt"
	"testing"

	"github.com/salvagehq/salvage/consumers"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/streams"
)

// TestPublicNamesMatchTheMachinery: the root package spells out its
// defaults and status words so `go doc` shows them; each must be what the
// machinery uses.
func TestPublicNamesMatchTheMachinery(t *testing.T) {
	t.Parallel()
	for i, pair := range [][2]any{
		{RetriesDefault, recovery.MaxRetriesDefault}, {RetryBaseDefault, recovery.BaseDelayDefault},
		{RetryMaxDefault, recovery.MaxDelayDefault}, {RetryTotalDefault, recovery.TotalCapDefault},
		{AckWaitDefault, streams.AckWaitDefault}, {MaxDeliverDefault, streams.MaxDeliverDefault},
		{MaxRecoveriesDefault, recovery.MaxRecoveriesDefault}, {MaxStrategyAttemptsDefault, recovery.MaxStrategyAttemptsDefault},
		{CoolDownDefault, consumers.CoolDownDefault}, {ConcurrencyDefault, consumers.ConcurrencyDefault},
		{MaxChunksDefault, consumers.MaxChunksDefault}, {ChunkWindowDefault, consumers.ChunkWindowDefault},
		{MaxPayloadDefault, consumers.MaxPayloadDefault}, {SweepIntervalDefault, consumers.SweepIntervalDefault},
		{DrainTimeoutDefault, consumers.DrainTimeoutDefault}, {JobWaitDefault, consumers.JobWaitDefault},
		{UnknownPipelineWaitDefault, consumers.UnknownPipelineWaitDefault},
		{AlertIntervalDefault, consumers.AlertIntervalDefault}, {RetentionDefault, kv.RetentionDefault},
		{AlertBurstCountDefault, recovery.BurstCountDefault}, {AlertBurstWindowDefault, recovery.BurstWindowDefault},
		{AlertUnresolvedDefault, recovery.UnresolvedAfterDefault}, {AlertUnackedDefault, recovery.UnackedAfterDefault},
		{BreakerFailuresDefault, recovery.BreakerFailuresDefault}, {BreakerWindowDefault, recovery.BreakerWindowDefault},
		{BreakerCoolDownDefault, recovery.BreakerCoolDownDefault},
		{string(BreakerClosed), kv.BreakerClosed}, {string(BreakerOpen), kv.BreakerOpen}, {string(BreakerHalfOpen), kv.BreakerHalfOpen},

		{string(JobRunning), kv.JobRunning}, {string(JobDone), kv.JobDone}, {string(JobPartial), kv.JobPartial},
		{string(JobIncomplete), kv.JobIncomplete}, {string(JobCancelled), kv.JobCancelled},
		{string(ChunkPending), kv.StatusPending}, {string(ChunkRunning), kv.StatusRunning}, {string(ChunkDone), kv.StatusDone},
		{string(ChunkDeadLettered), kv.StatusDeadLettered}, {string(ChunkHeld), kv.StatusHeld}, {string(ChunkAwaitingApproval), kv.StatusAwaitingApproval},
		{string(CallInitiated), kv.CallInitiated}, {string(CallSucceeded), kv.CallSucceeded}, {string(CallFailed), kv.CallFailed},
		{string(CallUnknown), kv.CallUnknown}, {string(CallCancelled), kv.CallCancelled}, {string(CallCompensated), kv.CallCompensated},
		{string(CategoryTransientNetwork), recovery.CategoryTransientNetwork}, {string(CategoryExternalSystemDown), recovery.CategoryExternalSystemDown},
		{string(CategoryToolTimeout), recovery.CategoryToolTimeout}, {string(CategoryPartialExecution), recovery.CategoryPartialExecution},
		{string(CategoryCompensationNeeded), recovery.CategoryCompensationNeeded}, {string(CategoryBudgetExceeded), recovery.CategoryBudgetExceeded},
		{string(CategoryUnrecoverable), recovery.CategoryUnrecoverable},
		{string(StrategyResume), recovery.StrategyResume}, {string(StrategyCompensateAndRetry), recovery.StrategyCompensateAndRetry},
		{string(StrategyCompensateAndAbandon), recovery.StrategyCompensateAndAbandon}, {string(StrategyEscalate), recovery.StrategyEscalate},
		{string(StrategyDeadEnd), recovery.StrategyDeadEnd}, {string(StrategyVerify), recovery.StrategyVerify},
		{string(EnvelopeOpen), kv.EnvelopeOpen}, {string(EnvelopeRecovering), kv.EnvelopeRecovering}, {string(EnvelopeResolved), kv.EnvelopeResolved},
		{string(EnvelopeSuperseded), kv.EnvelopeSuperseded}, {string(EnvelopeEscalated), kv.EnvelopeEscalated},
		{string(EnvelopeDeadEnd), kv.EnvelopeDeadEnd}, {string(EnvelopeAbandoned), kv.EnvelopeAbandoned},
	} {
		if fmt.Sprint(pair[0]) != fmt.Sprint(pair[1]) {
			t.Errorf("pair %d: public %v, machinery %v", i, pair[0], pair[1])
		}
	}
	// The types convert field for field.
	_ = recovery.AlertRules(AlertRules{})
	_ = RecoveryStats(recovery.RecoveryStats{})
	_ = recovery.CompensationInput(CompensationInput{})
}
