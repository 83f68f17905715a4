package salvagetype_test

import (
	"fmt"
	"testing"

	"github.com/salvagehq/salvage/salvagetype"
)

func TestChunkOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status   salvagetype.ChunkStatus
		outcome  salvagetype.ChunkStatus
		terminal bool
	}{
		{salvagetype.ChunkPending, "", false},
		{salvagetype.ChunkRunning, "", false},
		{salvagetype.ChunkHeld, "", false},
		{salvagetype.ChunkAwaitingApproval, "", false},
		{salvagetype.ChunkPaused, "", false},
		{salvagetype.ChunkDone, salvagetype.ChunkDone, true},
		{salvagetype.ChunkDeadLettered, salvagetype.ChunkDeadLettered, true},
		{salvagetype.CancelledAtStage(0), salvagetype.OutcomeCancelled, true},
		{salvagetype.CancelledAtStage(3), salvagetype.OutcomeCancelled, true},
	}
	for _, tt := range tests {
		if got := tt.status.Outcome(); got != tt.outcome {
			t.Errorf("%s.Outcome() = %q, want %q", tt.status, got, tt.outcome)
		}
		if got := tt.status.Terminal(); got != tt.terminal {
			t.Errorf("%s.Terminal() = %v, want %v", tt.status, got, tt.terminal)
		}
	}
	if n, ok := salvagetype.CancelledAtStage(7).Cancelled(); !ok || n != 7 {
		t.Errorf("CancelledAtStage(7).Cancelled() = %d, %v", n, ok)
	}
	if _, ok := salvagetype.ChunkStatus("cancelled-at-stage-x").Cancelled(); ok {
		t.Error("a cancelled status without a stage number parsed")
	}
}

// TestEnvelopeStatusesMeanOneThing: every status is final, open, or both
// (escalated: final for Salvage, open for a person), and only recovering
// and open are neither final nor done.
func TestEnvelopeStatusesMeanOneThing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status      salvagetype.EnvelopeStatus
		final, open bool
	}{
		{salvagetype.EnvelopeOpen, false, true},
		{salvagetype.EnvelopeRecovering, false, true},
		{salvagetype.EnvelopeEscalated, true, true},
		{salvagetype.EnvelopeResolved, true, false},
		{salvagetype.EnvelopeSuperseded, true, false},
		{salvagetype.EnvelopeDeadEnd, true, false},
		{salvagetype.EnvelopeAbandoned, true, false},
	}
	for _, tt := range tests {
		if tt.status.Final() != tt.final || tt.status.Open() != tt.open {
			t.Errorf("%s: final %v open %v, want %v %v", tt.status, tt.status.Final(), tt.status.Open(), tt.final, tt.open)
		}
	}
}

func ExampleCancelledAtStage() {
	s := salvagetype.CancelledAtStage(2)
	stage, _ := s.Cancelled()
	fmt.Println(s, stage, s.Terminal(), s.Outcome())
	// Output: cancelled-at-stage-2 2 true cancelled
}
