package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// TestAReadCutShortIsAnErrorNotAShorterAnswer: a batched read whose
// replies stop before the server's end-of-batch marker (here the wait is
// over before any reply came; on a loaded machine, before the last) fails
// with ErrBatchCut. It used to end quietly with what had arrived, so a
// chunk whose checkpoint did not arrive in time read as never started:
// retention then retired a job with a held chunk and an open envelope
// (consumers' TestRetentionLeavesLiveWork, seen with go test -p 4).
func TestAReadCutShortIsAnErrorNotAShorterAnswer(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := t.Context()
	const job = "01JDIRECTGETCUTSHORT000000"
	for chunk := 1; chunk <= 3; chunk++ {
		if _, err := st.Parts()[0].Checkpoints.Mutate(ctx, job, chunk, func(cp *kv.Checkpoint) error {
			cp.Status = salvagetype.ChunkHeld
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	cps, revs, err := st.Parts()[0].Checkpoints.Revisions(ctx, job, 1, 3)
	if err != nil || len(cps) != 3 || revs[2] == 0 || cps[2].Status != salvagetype.ChunkHeld {
		t.Fatalf("a read with time to finish: %v, %+v, revisions %v", err, cps, revs)
	}
	over, cancel := context.WithDeadline(ctx, time.Now())
	defer cancel()
	_, revs, err = st.Parts()[0].Checkpoints.Revisions(over, job, 1, 3)
	if !errors.Is(err, kv.ErrBatchCut) {
		t.Fatalf("a read whose wait ran out: %v, revisions %v; want ErrBatchCut, not chunks that look never started", err, revs)
	}
}
