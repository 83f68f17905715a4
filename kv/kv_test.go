package kv_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

func setup(t *testing.T) *kv.Stores {
	t.Helper()
	b := salvagetest.StartServer(t)
	if err := streams.Provision(context.Background(), b.JS, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Provision(context.Background(), b.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Provisioning twice is a no-op.
	if _, err := kv.Provision(context.Background(), b.JS, kv.Options{}); err != nil {
		t.Fatalf("second provision: %v", err)
	}
	return st
}

func TestClaimRaceExactlyOneWins(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	var wins atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := st.Parts()[0].Claims.Acquire(ctx, "J1", 1, fmt.Sprintf("w%d", i), 1, time.Minute)
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, kv.ErrClaimHeld):
			default:
				t.Errorf("worker %d: unexpected error %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Fatalf("%d workers won the claim, want exactly 1", got)
	}
}

func TestClaimLeaseExpiresAfterRenewal(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	st.Parts()[0].Claims.SetClock(clock)

	l, err := st.Parts()[0].Claims.Acquire(ctx, "J1", 2, "a", 1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	advance(8 * time.Second)
	if l, err = st.Parts()[0].Claims.Renew(ctx, l, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// 8s after the renewal the lease is still live: no steal.
	advance(8 * time.Second)
	var held *kv.HeldError
	if _, err := st.Parts()[0].Claims.Acquire(ctx, "J1", 2, "b", 2, 10*time.Second); !errors.As(err, &held) || held.Holder.ClaimedBy != "a" {
		t.Fatalf("steal of a renewed live lease: err = %v", err)
	}
	// The renewed lease still expires: 3s later it can be stolen.
	advance(3 * time.Second)
	stolen, err := st.Parts()[0].Claims.Acquire(ctx, "J1", 2, "b", 2, 10*time.Second)
	if err != nil {
		t.Fatalf("steal after expiry: %v", err)
	}
	if _, err := st.Parts()[0].Claims.Renew(ctx, l, 10*time.Second); !errors.Is(err, kv.ErrClaimLost) {
		t.Fatalf("stale renew: err = %v, want ErrClaimLost", err)
	}
	if err := st.Parts()[0].Claims.Release(ctx, l); !errors.Is(err, kv.ErrClaimLost) {
		t.Fatalf("stale release: err = %v, want ErrClaimLost", err)
	}
	if err := st.Parts()[0].Claims.Release(ctx, stolen); err != nil {
		t.Fatalf("holder release: %v", err)
	}
	if _, err := st.Parts()[0].Claims.Get(ctx, "J1", 2); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("after release: %v", err)
	}
}

func TestCheckpointFence(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	cpA, fa, err := st.Parts()[0].Checkpoints.Take(ctx, "J1", 1, "a", 1, func(cp *kv.Checkpoint) { cp.Status = salvagetype.ChunkRunning })
	if err != nil {
		t.Fatal(err)
	}
	cpA.Stage = 2
	if err := st.Parts()[0].Checkpoints.Write(ctx, &fa, cpA); err != nil {
		t.Fatal(err)
	}
	// b takes the chunk over (it stole the expired claim).
	cpB, fb, err := st.Parts()[0].Checkpoints.Take(ctx, "J1", 1, "b", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cpB.Stage != 2 {
		t.Fatalf("b resumed at stage %d, want 2", cpB.Stage)
	}
	cpA.Stage = 3
	if err := st.Parts()[0].Checkpoints.Write(ctx, &fa, cpA); !errors.Is(err, kv.ErrFenced) {
		t.Fatalf("stale write: err = %v, want ErrFenced", err)
	}
	cpB.Status = salvagetype.ChunkDone
	if err := st.Parts()[0].Checkpoints.Write(ctx, &fb, cpB); err != nil {
		t.Fatalf("holder write: %v", err)
	}
	got, _, err := st.Parts()[0].Checkpoints.Get(ctx, "J1", 1)
	if err != nil || got.Status != salvagetype.ChunkDone || got.ClaimedBy != "b" || got.Stage != 2 {
		t.Fatalf("checkpoint = %+v, %v", got, err)
	}
}

func TestDerive(t *testing.T) {
	t.Parallel()
	cp := func(status salvagetype.ChunkStatus, gaps ...string) kv.Checkpoint {
		var c kv.Checkpoint
		c.Chunk, c.Stage, c.Status, c.Gaps, c.Envelope = 1, 2, status, gaps, "E1"
		return c
	}
	noEnvelope := func(c kv.Checkpoint, chunk, stage int) kv.Checkpoint {
		c.Chunk, c.Stage, c.Envelope = chunk, stage, ""
		return c
	}
	tests := []struct {
		name      string
		cancelled bool
		cps       []kv.Checkpoint
		want      salvagetype.JobStatus
		explained bool
	}{
		{"all done", false, []kv.Checkpoint{cp(salvagetype.ChunkDone), cp(salvagetype.ChunkDone)}, salvagetype.JobDone, false},
		{"one running", false, []kv.Checkpoint{cp(salvagetype.ChunkDone), cp(salvagetype.ChunkRunning)}, salvagetype.JobRunning, false},
		{"one pending", false, []kv.Checkpoint{cp(salvagetype.ChunkPending)}, salvagetype.JobRunning, false},
		{"parked is not finished", false, []kv.Checkpoint{cp(salvagetype.ChunkHeld)}, salvagetype.JobRunning, false},
		{"gaps", false, []kv.Checkpoint{cp(salvagetype.ChunkDone, "summary")}, salvagetype.JobPartial, true},
		{"dead-lettered", false, []kv.Checkpoint{cp(salvagetype.ChunkDone), cp(salvagetype.ChunkDeadLettered)}, salvagetype.JobIncomplete, true},
		{"cancelled, its envelope named", true, []kv.Checkpoint{cp(salvagetype.ChunkDone), cp(salvagetype.CancelledAtStage(2))}, salvagetype.JobCancelled, true},
		{"cancelled", true, []kv.Checkpoint{cp(salvagetype.ChunkDone), noEnvelope(cp(salvagetype.CancelledAtStage(1)), 2, 1)}, salvagetype.JobCancelled, false},
		{"cancelled after every chunk ended", true, []kv.Checkpoint{cp(salvagetype.ChunkDone), cp(salvagetype.ChunkDone)}, salvagetype.JobDone, false},
		{"cancelled after every chunk ended, one failed", true, []kv.Checkpoint{cp(salvagetype.ChunkDone), cp(salvagetype.ChunkDeadLettered)}, salvagetype.JobIncomplete, true},
		{"cancelled but still running", true, []kv.Checkpoint{cp(salvagetype.ChunkRunning)}, salvagetype.JobRunning, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, why := kv.Derive(tt.cancelled, tt.cps)
			if got != tt.want || (len(why) > 0) != tt.explained {
				t.Fatalf("Derive = %s %v, want %s (explained %v)", got, why, tt.want, tt.explained)
			}
		})
	}
}

func TestEnvelopeGuardOnce(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	if _, err := st.Envelopes.Guard(ctx, 0, 42, "E1"); err != nil {
		t.Fatal(err)
	}
	g, err := st.Envelopes.Guard(ctx, 0, 42, "E2")
	if !errors.Is(err, kv.ErrGuardExists) || g.Envelope != "E1" {
		t.Fatalf("second guard: %+v %v", g, err)
	}
	// Message 42 of another partition's chunk stream is another message:
	// its envelope is its own (chaos with three partitions once gave a
	// chunk the envelope of another job's chunk at the same sequence).
	for k, id := range map[int]string{1: "E3", 2: "E4"} {
		if g, err := st.Envelopes.Guard(ctx, k, 42, id); err != nil || g.Envelope != id {
			t.Fatalf("guard of message 42 in partition %d: %+v %v", k, g, err)
		}
	}
}

// TestForJobReadsEveryChunkInBatches: 2,500 chunks come back in chunk order
// from three direct-get batches (the server caps one at 1,024 keys; past
// 1,000 ForJob used to fall back to one read per chunk).
func TestForJobReadsEveryChunkInBatches(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	const n = 2500
	for i := 1; i <= n; i++ {
		if i == 7 {
			continue // never written: reported pending
		}
		if _, err := st.Parts()[0].Checkpoints.Mutate(ctx, "J", i, func(cp *kv.Checkpoint) error { cp.Status = salvagetype.ChunkDone; cp.Calls = i; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// Another job's chunk 1 and a longer job id sharing the prefix.
	_, _ = st.Parts()[0].Checkpoints.Mutate(ctx, "JX", 1, func(cp *kv.Checkpoint) error { cp.Status = salvagetype.ChunkRunning; return nil })
	cps, err := st.Parts()[0].Checkpoints.ForJob(ctx, "J", n)
	if err != nil || len(cps) != n {
		t.Fatalf("%d checkpoints, %v", len(cps), err)
	}
	page, err := st.Parts()[0].Checkpoints.ForJobRange(ctx, "J", 1999, 2002)
	if err != nil || len(page) != 4 || page[0].Chunk != 1999 || page[3].Calls != 2002 {
		t.Fatalf("range 1999-2002 = %+v, %v", page, err)
	}
	for i, cp := range cps {
		switch {
		case i+1 == 7 && cp.Status != salvagetype.ChunkPending:
			t.Errorf("chunk 7 = %+v, want pending", cp)
		case i+1 != 7 && (cp.Status != salvagetype.ChunkDone || cp.Calls != i+1 || cp.Chunk != i+1):
			t.Errorf("chunk %d = %+v", i+1, cp)
		}
	}
}

func TestSnapshotsInlineSmallObjectLarge(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	small := []byte(`{"goal":"x"}`)
	ref, err := st.Snapshots.Save(ctx, kv.SnapshotName("J", 1, 0, "a", 1), 1, small)
	if err != nil || ref.Object != "" || len(ref.Inline) == 0 {
		t.Fatalf("small snapshot = %+v, %v; want inline", ref, err)
	}
	large := make([]byte, 64<<10)
	_, _ = rand.Read(large) // incompressible
	ref2, err := st.Snapshots.Save(ctx, kv.SnapshotName("J", 1, 0, "a", 2), 2, large)
	if err != nil || ref2.Object == "" || ref2.Inline != nil {
		t.Fatalf("large snapshot = %+v, %v; want the object store", ref2.Object, err)
	}
	for _, tc := range []struct {
		ref  kv.SnapshotRef
		want []byte
	}{{ref, small}, {ref2, large}} {
		got, err := st.Snapshots.Load(ctx, tc.ref)
		if err != nil || string(got) != string(tc.want) {
			t.Fatalf("load %d: %d bytes, %v", tc.ref.Seq, len(got), err)
		}
	}
	if _, err := st.Snapshots.Load(ctx, kv.SnapshotRef{Object: "nope"}); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("missing object: %v", err)
	}
	// An agent's state round-trips, its sequence counting up per snapshot.
	state := &salvagetype.AgentState{Goal: "fulfil order o-1", Completed: []string{"k1", "k2"}, Seq: 1}
	ref3, err := st.Snapshots.SaveState(ctx, "J", 1, 0, "clerk", state)
	if err != nil || ref3.Seq != 2 || state.Seq != 2 {
		t.Fatalf("stage snapshot = %+v, %v", ref3, err)
	}
	back, err := st.Snapshots.LoadState(ctx, ref3)
	if err != nil || len(back.Completed) != 2 || back.Goal != state.Goal || back.Seq != 2 {
		t.Fatalf("loaded %+v, %v", back, err)
	}
}

// TestExplanationPutsFailuresFirst: a 200-chunk job where 132 chunks
// skipped the same optional step and 25 failed explains the failures
// first, folds the skipped step into one line, and counts what the 20
// lines leave out.
func TestExplanationPutsFailuresFirst(t *testing.T) {
	t.Parallel()
	var cps []kv.Checkpoint
	for n := 1; n <= 200; n++ {
		var cp kv.Checkpoint
		cp.Chunk, cp.Stage, cp.Status = n, 2, salvagetype.ChunkDone
		switch {
		case n%8 == 0:
			cp.Status, cp.Envelope = salvagetype.ChunkDeadLettered, fmt.Sprintf("E%d", n)
		case n <= 150:
			cp.Gaps = []string{"profile"}
		}
		cps = append(cps, cp)
	}
	status, s, why := kv.Derive(false, cps)
	if status != salvagetype.JobIncomplete || s.DeadLettered != 25 || s.Degraded != 132 {
		t.Fatalf("Derive = %s %+v", status, s)
	}
	if len(why) != 21 || why[0] != "chunk 8 failed at stage 2: envelope E8" || why[19] != "chunk 160 failed at stage 2: envelope E160" ||
		why[20] != "and 6 more" {
		t.Fatalf("explanation (%d lines):\n%s", len(why), strings.Join(why, "\n"))
	}
	// With room, the skipped step is one line naming the first chunks;
	// a failure names its reason, its first line.
	cps[15].Reason = "agent a: tool t: permanent (status 422): refused\npanic stack"
	_, _, why = kv.Derive(false, cps[:20])
	want := []string{"chunk 8 failed at stage 2: envelope E8", "chunk 16 failed at stage 2: envelope E16 (agent a: tool t: permanent (status 422): refused)",
		"18 chunks done without [profile]: 1, 2, 3, 4, 5, 6, 7, 9, …"}
	if !slices.Equal(why, want) {
		t.Fatalf("explanation:\n%s\nwant:\n%s", strings.Join(why, "\n"), strings.Join(want, "\n"))
	}
}

// TestDerivationByPagesIsDerive: a job's checkpoints given a page at a
// time derive what they derive all at once, cancelled or not.
func TestDerivationByPagesIsDerive(t *testing.T) {
	t.Parallel()
	var cps []kv.Checkpoint
	for n := 1; n <= 2500; n++ {
		var cp kv.Checkpoint
		cp.Chunk, cp.Stage, cp.Status, cp.Tier1Retries, cp.PromptTokens = n, 2, salvagetype.ChunkDone, n%3, int64(n)
		switch {
		case n%97 == 0:
			cp.Status, cp.Envelope = salvagetype.ChunkDeadLettered, fmt.Sprintf("E%d", n)
		case n%13 == 0:
			cp.Gaps = []string{fmt.Sprintf("step-%d", n%5)}
		case n > 2400:
			cp.Status = salvagetype.ChunkPending
		}
		cps = append(cps, cp)
	}
	d := kv.NewDerivation()
	for lo := 0; lo < len(cps); lo += 7 {
		d.Add(cps[lo:min(lo+7, len(cps))])
	}
	for _, cancelled := range []bool{false, true} {
		ws, wsum, wwhy := kv.Derive(cancelled, cps)
		gs, gsum, gwhy := d.Result(cancelled)
		if gs != ws || gsum != wsum || !slices.Equal(gwhy, wwhy) {
			t.Errorf("cancelled %v: by pages %s %+v %q; all at once %s %+v %q", cancelled, gs, gsum, gwhy, ws, wsum, wwhy)
		}
	}
}

func TestDeriveSumsRetries(t *testing.T) {
	t.Parallel()
	_, s, _ := kv.Derive(false, []kv.Checkpoint{
		checkpointOf(t, salvagetype.Chunk{Status: salvagetype.ChunkDone, Tier1Retries: 2, Deliveries: 1}),
		checkpointOf(t, salvagetype.Chunk{Status: salvagetype.ChunkDone, Tier1Retries: 3, Deliveries: 1, Redeliveries: 2}),
		checkpointOf(t, salvagetype.Chunk{Status: salvagetype.ChunkPending}),
	})
	if s.Tier1Retries != 5 || s.Redeliveries != 2 {
		t.Fatalf("summary = %+v, want 5 tier-1 retries and 2 redeliveries", s)
	}
}

// TestJobCountsStayO1AndSettle: each chunk outcome changes the job record
// by one CAS with the chunk's delta; a count lost to a crash is repaired by
// Settle from the checkpoints, and event counts never go back.
func TestJobCountsStayO1AndSettle(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	if err := st.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: "J", Pipeline: "p", Chunks: 3}}); err != nil {
		t.Fatal(err)
	}
	outcome := func(chunk int, status salvagetype.ChunkStatus, apply bool) kv.Job {
		t.Helper()
		var d kv.Delta
		if _, err := st.Parts()[0].Checkpoints.Mutate(ctx, "J", chunk, func(cp *kv.Checkpoint) error {
			cp.Status, cp.Tier1Retries = status, cp.Tier1Retries+1
			d = cp.Recount()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !apply {
			j, _ := st.Jobs.Get(ctx, "J")
			return j
		}
		j, _, err := st.Jobs.Apply(ctx, "J", d)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	j := outcome(1, salvagetype.ChunkDeadLettered, true)
	if j.Summary.DeadLettered != 1 || j.Summary.DeadLetters != 1 || j.Status != salvagetype.JobRunning {
		t.Fatalf("after a dead letter: %+v", j)
	}
	// Recovered: dead-lettered -> pending -> done.
	outcome(1, salvagetype.ChunkPending, true)
	j = outcome(1, salvagetype.ChunkDone, true)
	if j.Summary.DeadLettered != 0 || j.Summary.Done != 1 || j.Summary.DeadLetters != 1 || j.Summary.Tier1Retries != 3 {
		t.Fatalf("after the recovery: %+v", j.Summary)
	}
	outcome(2, salvagetype.ChunkDone, true)
	// A crash between chunk 3's checkpoint and its count.
	j = outcome(3, salvagetype.ChunkDone, false)
	if j.Summary.Done != 2 || j.Status != salvagetype.JobRunning {
		t.Fatalf("before repair: %+v", j)
	}
	cps, err := st.Parts()[0].Checkpoints.ForJob(ctx, "J", 3)
	if err != nil {
		t.Fatal(err)
	}
	j, finished, err := st.Jobs.Settle(ctx, "J", cps)
	if err != nil || !finished || j.Status != salvagetype.JobDone || j.Summary.Done != 3 || j.Summary.DeadLetters != 1 || j.Summary.Tier1Retries != 5 {
		t.Fatalf("settled: %+v finished %v, %v", j, finished, err)
	}
	if _, again, _ := st.Jobs.Settle(ctx, "J", cps); again {
		t.Fatal("a second Settle finished the job again")
	}
}

// TestDeriveCancelledJob: a cancelled job's chunks that never started
// (no checkpoint: their messages were purged) count as cancelled.
func TestDeriveCancelledJob(t *testing.T) {
	t.Parallel()
	status, s, _ := kv.Derive(true, []kv.Checkpoint{checkpointOf(t, salvagetype.Chunk{Status: salvagetype.ChunkDone}), checkpointOf(t, salvagetype.Chunk{Status: salvagetype.ChunkPending}), checkpointOf(t, salvagetype.Chunk{Status: salvagetype.CancelledAtStage(2)})})
	if status != salvagetype.JobCancelled || s.Cancelled != 2 || s.Done != 1 {
		t.Fatalf("Derive = %s %+v", status, s)
	}
	var j kv.Job
	now := time.Now()
	j.CancelledAt = &now
	if v := j.View([]kv.Checkpoint{checkpointOf(t, salvagetype.Chunk{Status: salvagetype.ChunkPending})}); v[0].Status != salvagetype.CancelledAtStage(0) {
		t.Fatalf("view of a purged chunk = %s", v[0].Status)
	}
}

// TestCancelledJobCountsStayWhole: a cancelled job settles with its
// pending chunks counted cancelled at stage 0; a worker that then picks up
// one of them (its message was in flight when the queue was purged) and
// records the cancellation must not count it twice, even for a moment.
func TestCancelledJobCountsStayWhole(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	if err := st.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: "C", Pipeline: "p", Chunks: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Jobs.Cancel(ctx, "C"); err != nil {
		t.Fatal(err)
	}
	cps, err := st.Parts()[0].Checkpoints.ForJob(ctx, "C", 2)
	if err != nil {
		t.Fatal(err)
	}
	j, finished, err := st.Jobs.Settle(ctx, "C", cps)
	if err != nil || !finished || j.Status != salvagetype.JobCancelled || j.Summary.Cancelled != 2 {
		t.Fatalf("settled: %+v finished %v, %v", j, finished, err)
	}
	var d kv.Delta
	if _, err := st.Parts()[0].Checkpoints.Mutate(ctx, "C", 1, func(cp *kv.Checkpoint) error {
		cp.Status = salvagetype.CancelledAtStage(0)
		d = cp.Recount()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	j, settle, err := st.Jobs.Apply(ctx, "C", d)
	if err != nil || !settle || j.Summary.Cancelled != 2 || j.Summary.Terminal() != 2 || j.Status != salvagetype.JobCancelled {
		t.Fatalf("late cancellation applied: %+v settle %v, %v; want the counts unchanged and a settle asked for", j.Summary, settle, err)
	}
}

// TestRepairDoesNotCountARunningChunkTwice: a repair Settle while a chunk
// runs counts only what the job already counted of it; the chunk's own
// outcome then adds the rest, so retries and tokens are counted once.
func TestRepairDoesNotCountARunningChunkTwice(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	if err := st.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: "R", Pipeline: "p", Chunks: 1}}); err != nil {
		t.Fatal(err)
	}
	// The chunk runs a stage: retries and tokens in its checkpoint, not
	// yet counted in the job.
	if _, err := st.Parts()[0].Checkpoints.Mutate(ctx, "R", 1, func(cp *kv.Checkpoint) error {
		cp.Status, cp.Tier1Retries, cp.PromptTokens, cp.CompletionTokens = salvagetype.ChunkRunning, 3, 100, 7
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cps, _ := st.Parts()[0].Checkpoints.ForJob(ctx, "R", 1)
	if j, _, err := st.Jobs.Settle(ctx, "R", cps); err != nil || j.Summary.Tier1Retries != 0 || j.Summary.PromptTokens != 0 {
		t.Fatalf("repair while running: %+v, %v", j.Summary, err)
	}
	// It finishes: its Recount carries everything it spent.
	var d kv.Delta
	if _, err := st.Parts()[0].Checkpoints.Mutate(ctx, "R", 1, func(cp *kv.Checkpoint) error {
		cp.Status, cp.PromptTokens, cp.CompletionTokens = salvagetype.ChunkDone, 150, 9
		d = cp.Recount()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	j, settle, err := st.Jobs.Apply(ctx, "R", d)
	if err != nil {
		t.Fatal(err)
	}
	if settle {
		cps, _ = st.Parts()[0].Checkpoints.ForJob(ctx, "R", 1)
		if j, _, err = st.Jobs.Settle(ctx, "R", cps); err != nil {
			t.Fatal(err)
		}
	}
	if j.Summary.Tier1Retries != 3 || j.Summary.PromptTokens != 150 || j.Summary.CompletionTokens != 9 || j.Status != salvagetype.JobDone {
		t.Errorf("job = %s %+v; want 3 retries and 150+9 tokens, once", j.Status, j.Summary)
	}
}

// An envelope's body lives as long as its record: kept while the record
// is unsettled, expiring with it once settled, kept again when a replay
// opens the record again.
func TestEnvelopeBodyLivesWithItsRecord(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	st.Envelopes.Keep(time.Second)
	for _, id := range []string{"SETTLES", "REOPENS"} {
		if err := st.Envelopes.PutBody(ctx, id, []byte(`{"envelope_id":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
		if err := st.Envelopes.Put(ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: id, Job: "J", Chunk: 1, Status: salvagetype.EnvelopeOpen}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Envelopes.Mutate(ctx, id, func(r *kv.EnvelopeRecord) error { r.Status = salvagetype.EnvelopeDeadEnd; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Envelopes.Mutate(ctx, "REOPENS", func(r *kv.EnvelopeRecord) error { r.Status = salvagetype.EnvelopeRecovering; return nil }); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, err := st.Envelopes.Body(ctx, "SETTLES")
		return errors.Is(err, kv.ErrNotFound)
	}, "the settled envelope's body to expire with it")
	// The reopened one outlived the settled one's TTL by now.
	if b, err := st.Envelopes.Body(ctx, "REOPENS"); err != nil || !strings.Contains(string(b), "REOPENS") {
		t.Fatalf("the reopened envelope's body: %q, %v", b, err)
	}
}

// A claim is believed only one lease past its last write, whatever its
// expiry says; a holder whose claim was overwritten by something no holder
// writes takes it back, one stolen as holders steal stays stolen.
func TestClaimsAreBelievedOnlyAsFarAsTheirWrite(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	ctx := context.Background()
	st, err := kv.Provision(ctx, srv.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := srv.JS.KeyValue(ctx, kv.BucketClaims)
	if err != nil {
		t.Fatal(err)
	}
	forged := `{"claimed_by":"ghost","expires_at":"2099-01-01T00:00:00Z"}`
	if _, err := b.Put(ctx, kv.ChunkKey("J", 1), []byte(forged)); err != nil {
		t.Fatal(err)
	}
	var l kv.Lease
	salvagetest.Eventually(t, time.Minute, func() bool {
		l, err = st.Parts()[0].Claims.Acquire(ctx, "J", 1, "w", 1, time.Second)
		return err == nil
	}, "the forged claim to stop holding the chunk (last: %v)", &err)
	if !strings.Contains(l.Replaced, "ghost") {
		t.Fatalf("replaced = %q", l.Replaced)
	}

	if _, err := b.Put(ctx, l.Key, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Parts()[0].Claims.Renew(ctx, l, time.Second); !errors.Is(err, kv.ErrClaimLost) {
		t.Fatalf("renew over garbage: %v", err)
	}
	back, err := st.Parts()[0].Claims.Reclaim(ctx, l, time.Second)
	if err != nil || back.ClaimedBy != "w" || !strings.Contains(back.Replaced, "garbage") {
		t.Fatalf("reclaim over garbage: %+v, %v", back, err)
	}
	// A real steal once the lease lapsed is not undone.
	var stolen kv.Lease
	salvagetest.Eventually(t, time.Minute, func() bool {
		stolen, err = st.Parts()[0].Claims.Acquire(ctx, "J", 1, "thief", 2, time.Second)
		return err == nil
	}, "the lapsed claim to be stolen")
	if _, err := st.Parts()[0].Claims.Reclaim(ctx, back, time.Second); !errors.Is(err, kv.ErrClaimLost) {
		t.Fatalf("reclaim after a steal: %v (thief %+v)", err, stolen)
	}
}

// checkpointOf is a checkpoint whose view is c (read from c's JSON, as
// the store reads a record).
func checkpointOf(t *testing.T, c salvagetype.Chunk) kv.Checkpoint {
	t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var cp kv.Checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		t.Fatal(err)
	}
	return cp
}
