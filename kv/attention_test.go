package kv_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// A chunk's checkpoint that comes to need a person — dead-lettered by the
// dead-letterer, held by its worker, failed back to tier 2 with an error,
// cancelled after effects — puts the chunk in its job's attention index,
// once however often it is written again; a chunk that runs clean and
// finishes never does. The index holds chunk numbers alone.
func TestAttentionIndexNamesEachFailingChunkOnce(t *testing.T) {
	t.Parallel()
	b := salvagetest.StartServer(t)
	ctx := t.Context()
	if err := streams.Provision(ctx, b.JS, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Provision(ctx, b.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	entries := func() uint64 {
		t.Helper()
		str, err := b.JS.Stream(ctx, streams.Index)
		if err != nil {
			t.Fatal(err)
		}
		subject := kv.IndexJobAttention("J1")
		info, err := str.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[subject]
	}
	take := func(chunk int, mutate func(*kv.Checkpoint)) (kv.Checkpoint, kv.Fence) {
		t.Helper()
		cp, f, err := st.Parts()[0].Checkpoints.Take(ctx, "J1", chunk, "w", 1, mutate)
		if err != nil {
			t.Fatal(err)
		}
		return cp, f
	}

	// 1 runs clean to done: no entry.
	cp, f := take(1, func(cp *kv.Checkpoint) { cp.Status = salvagetype.ChunkRunning })
	cp.Status = salvagetype.ChunkDone
	if err := st.Parts()[0].Checkpoints.Write(ctx, &f, cp); err != nil {
		t.Fatal(err)
	}
	// 2 fails back to tier 2 with an error, is taken again and written
	// three more times: one entry.
	cp, f = take(2, func(cp *kv.Checkpoint) { cp.Status = salvagetype.ChunkRunning })
	cp.LastError = "503 from the model"
	for range 3 {
		if err := st.Parts()[0].Checkpoints.Write(ctx, &f, cp); err != nil {
			t.Fatal(err)
		}
	}
	cp, f = take(2, nil)
	if err := st.Parts()[0].Checkpoints.Write(ctx, &f, cp); err != nil {
		t.Fatal(err)
	}
	// 3 is held by its worker.
	cp, f = take(3, func(cp *kv.Checkpoint) { cp.Status = salvagetype.ChunkHeld })
	// 4 is dead-lettered by a writer that does not hold it.
	if _, err := st.Parts()[0].Checkpoints.Mutate(ctx, "J1", 4, func(cp *kv.Checkpoint) error {
		cp.Status, cp.Envelope = salvagetype.ChunkDeadLettered, "E4"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// 5 is cancelled before it had effects: nobody's business.
	if _, err := st.Parts()[0].Checkpoints.Mutate(ctx, "J1", 5, func(cp *kv.Checkpoint) error {
		cp.Status = salvagetype.CancelledAtStage(0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// 6 is cancelled after effects an envelope settles; retention keeps
	// its checkpoint a while, which keeps its entry at least as long.
	cp6, err := st.Parts()[0].Checkpoints.Mutate(ctx, "J1", 6, func(cp *kv.Checkpoint) error {
		cp.Status, cp.Envelope = salvagetype.CancelledAtStage(2), "E6"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, rev, err := st.Parts()[0].Checkpoints.Get(ctx, "J1", 6)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Parts()[0].Checkpoints.Retain(ctx, cp6, rev, time.Hour); err != nil {
		t.Fatal(err)
	}

	// Numbers that are no chunk of the job, written by anybody, are not
	// kept.
	for _, forged := range []string{"99", "0", "x"} {
		if _, err := b.JS.Publish(ctx, kv.IndexJobAttention("J1"), []byte(forged)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.Parts()[0].Checkpoints.Flagged(ctx, "J1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{2, 3, 4, 6}; !slices.Equal(got, want) {
		t.Fatalf("flagged %v; want %v", got, want)
	}
	if n := entries(); n != 4+3 {
		t.Fatalf("%d attention entries; want 4, one per chunk, and the 3 forged", n)
	}
	for _, c := range []int{2, 3, 4, 6} {
		cp, _, err := st.Parts()[0].Checkpoints.Get(ctx, "J1", c)
		if err != nil {
			t.Fatal(err)
		}
		if cp.AttentionUntil == nil || time.Until(*cp.AttentionUntil) < salvagetype.RecordsRetentionDefault {
			t.Fatalf("chunk %d: attention entry until %v; want past the records' retention", c, cp.AttentionUntil)
		}
	}
	// The named chunks read back in the order asked, a missing one as
	// pending.
	cps, err := st.Parts()[0].Checkpoints.Chunks(ctx, "J1", []int{6, 99, 3})
	if err != nil {
		t.Fatal(err)
	}
	if cps[0].Chunk != 6 || cps[0].Envelope != "E6" || cps[1].Chunk != 99 || cps[1].Status != salvagetype.ChunkPending || cps[2].Status != salvagetype.ChunkHeld {
		t.Fatalf("chunks 6, 99, 3 read %+v", cps)
	}
	if got, err := st.Parts()[0].Checkpoints.Flagged(ctx, "J2", 10); err != nil || len(got) != 0 {
		t.Fatalf("a job with no entry: %v, %v", got, err)
	}
}
