package consumers_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/worker"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

const childWorkerEnv = "SALVAGE_TEST_CHILD_WORKER_URL"

// runChildWorker is the body of a real worker process the crash test
// SIGKILLs: the test binary re-executed with childWorkerEnv set.
func runChildWorker(url string) int {
	nc, err := natsconf.Connect(natsconf.ConnectConfig{URL: url, Name: "child-worker"})
	if err != nil {
		return 2
	}
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	stores, err := kv.Open(ctx, js)
	if err != nil {
		return 2
	}
	reg, _ := recovery.NewRegistry(testPipeline(true))
	ackWait, _ := time.ParseDuration(os.Getenv("SALVAGE_TEST_ACK_WAIT"))
	w, err := worker.New(js, stores, worker.Config{
		ID: os.Getenv("SALVAGE_TEST_WORKER_ID"), Registry: reg, AckWait: ackWait, Retry: testRetry, Breakers: testBreakers,
	})
	if err != nil {
		return 2
	}
	if os.Getenv("SALVAGE_TEST_KILL_AFTER_DONE") != "" {
		w.Hooks().AfterDone = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	}
	if os.Getenv("SALVAGE_TEST_KILL_AFTER_FINISH") != "" {
		w.Hooks().AfterFinish = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
	}
	if os.Getenv("SALVAGE_TEST_KILL_BEFORE_ROW") != "" {
		w.Hooks().Journal = func(s recovery.JournalStore) recovery.JournalStore { return killBeforeRow{s} }
	}
	keepRecord(ctx, stores, w, make(chan struct{}))
	_ = w.Run(ctx)
	return 0
}

// killBeforeRow SIGKILLs its process when the outcome row of a stage-2
// call is about to be written: the call has returned, its row is not
// durable, and nothing else of the stage is either.
type killBeforeRow struct{ recovery.JournalStore }

func (k killBeforeRow) PutAsync(row kv.JournalRow, expect uint64) (func(context.Context) (uint64, error), error) {
	if row.Stage == 2 && row.Status == salvagetype.CallSucceeded {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return k.JournalStore.PutAsync(row, expect)
}

// startChild starts a real worker process (this test binary re-executed),
// killed in t.Cleanup; env adds settings such as SALVAGE_TEST_KILL_AFTER_DONE.
func (b *bundle) startChild(t *testing.T, id string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childWorkerEnv+"="+b.NATS.ClientURL(),
		"SALVAGE_TEST_ACK_WAIT="+b.opts.AckWait.String(), "SALVAGE_TEST_WORKER_ID="+id), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func TestJobRunsToDone(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	results := b.subscribe(t, streams.ResultsAll)
	b.startWorker(t, "w1")
	b.startWorker(t, "w2")
	job := b.submit(t, modeOK, modeFailOnce, modeOK)
	j := b.waitJob(t, job, salvagetype.JobDone)
	if j.Summary.Done != 3 {
		t.Fatalf("summary = %+v", j.Summary)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(results()) == 3 }, "3 results")
	if got := b.checkpoint(t, job, 2).Tier1Retries; got != 1 {
		t.Errorf("chunk 2 tier-1 retries = %d, want 1", got)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Chunks) == 0 }, "chunks stream to drain")
}

func TestPermanentFailureOneEnvelopeNoRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.startWorker(t, "w1")
	job := b.submit(t, modeOK, modePermanent)
	j := b.waitJob(t, job, salvagetype.JobIncomplete)
	if len(j.Explanation) != 1 || !strings.Contains(j.Explanation[0], "chunk 2") {
		t.Errorf("explanation = %v", j.Explanation)
	}
	envs := b.dlq(t)
	if len(envs) != 1 {
		t.Fatalf("%d envelopes, want 1", len(envs))
	}
	e := envs[0]
	if e.Category != salvagetype.CategoryUnrecoverable || e.Chunk != 2 || e.FailedStage != 2 {
		t.Errorf("envelope = %+v", e)
	}
	var orig salvagetype.ChunkMsg
	if err := json.Unmarshal(e.Original.Data, &orig); err != nil || orig.Job != job || orig.Chunk != 2 {
		t.Errorf("original = %s (%v)", e.Original.Data, err)
	}
	if n := callCount(job, 2, 2); n != 1 {
		t.Errorf("permanent error was called %d times, want 1 (never retried)", n)
	}
	// The worker terms the message right after the envelope is stored.
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Chunks) == 0 }, "the original removed from SALVAGE_CHUNKS")
}

// TestEnvelopeNamesTheFailingAgent: agent2b's call fails with a 400 while
// its sibling agent2 is mid-call. The envelope names agent2b and its call;
// agent2's row says CANCELLED (it used to be written FAILED with agent2b's
// error, and the envelope could blame agent2).
func TestEnvelopeNamesTheFailingAgent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.startWorker(t, "w1")
	job := b.submit(t, modeSiblingFails)
	b.waitJob(t, job, salvagetype.JobIncomplete)
	envs := b.dlq(t)
	if len(envs) != 1 {
		t.Fatalf("%d envelopes, want 1", len(envs))
	}
	e := envs[0]
	if e.FailedAgent != "agent2b" || e.FailedCall != kv.JournalKey(job, 1, 0, 2, "agent2b", 1) || e.FailedTool != "tool" || e.FailedStage != 2 {
		t.Errorf("envelope blames agent %q call %q tool %q stage %d; want agent2b's first call in stage 2", e.FailedAgent, e.FailedCall, e.FailedTool, e.FailedStage)
	}
	sibling, err := b.stores.Parts()[0].Journal.Get(b.ctx, kv.JournalKey(job, 1, 0, 2, "agent2", 1))
	if err != nil || sibling.Status != salvagetype.CallCancelled || sibling.ErrorStatus != 0 || strings.Contains(sibling.Error, "too long") {
		t.Errorf("agent2's row = %+v (%v), want CANCELLED without agent2b's error", sibling.JournalRow, err)
	}
	failed, err := b.stores.Parts()[0].Journal.Get(b.ctx, e.FailedCall)
	if err != nil || failed.Status != salvagetype.CallFailed || failed.ErrorStatus != 400 {
		t.Errorf("agent2b's row = %+v (%v), want FAILED 400", failed.JournalRow, err)
	}
}

func TestAlwaysFailingChunkEndsAsOneEnvelope(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.startWorker(t, "w1")
	b.startWorker(t, "w2")
	job := b.submit(t, modeAlwaysFails)
	b.waitJob(t, job, salvagetype.JobIncomplete)
	// Give a second advisory or sweep the chance to double it.
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Chunks) == 0 }, "original removed")
	envs := b.dlq(t)
	if len(envs) != 1 {
		t.Fatalf("%d envelopes, want exactly 1", len(envs))
	}
	e := envs[0]
	if e.Category != salvagetype.CategoryExternalSystemDown || e.Strategy != salvagetype.StrategyResume {
		t.Errorf("category/strategy = %s/%s", e.Category, e.Strategy)
	}
	if e.Deliveries != 3 {
		t.Errorf("deliveries = %d, want 3", e.Deliveries)
	}
	cp := b.checkpoint(t, job, 1)
	// Each run of stage 2 is 1 call + 2 tier-1 retries: one run per
	// delivery, a takeover among them (a loaded machine can keep a
	// process from renewing its lease, and the reaper hands its chunk
	// back: a redelivery). The records say how many.
	runs := int(cp.Deliveries)
	if cp.Tier1Retries != 2*runs || cp.Deliveries != 3 || cp.Takeovers > 2 || cp.Envelope != e.ID {
		t.Errorf("tier-1 retries %d, deliveries %d, takeovers %d, envelope %q; want 2 retries per run, 3 deliveries, at most 2 takeovers, envelope %s",
			cp.Tier1Retries, cp.Deliveries, cp.Takeovers, cp.Envelope, e.ID)
	}
	if n := callCount(job, 1, 2); n != int64(3*runs) {
		t.Errorf("stage 2 calls = %d, want %d: 3 in each of %d runs", n, 3*runs, runs)
	}
	if n := callCount(job, 1, 1); n != 1 {
		t.Errorf("stage 1 calls = %d, want 1: redeliveries resume from the checkpoint", n)
	}
}

// TestLastErrorSurvivesARedelivery: the error that sent a chunk to tier
// 2 stays in its checkpoint while the next delivery runs (marked older),
// so an envelope written after that delivery dies still says why.
func TestLastErrorSurvivesARedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.startWorker(t, "w1")
	job := b.submit(t, modeFailThenGate)
	salvagetest.Eventually(t, time.Minute, func() bool { return callCount(job, 1, 2) >= 4 }, "the second delivery to reach stage 2")
	cp := b.checkpoint(t, job, 1)
	if cp.Status != salvagetype.ChunkRunning || cp.Deliveries != 2 || !strings.Contains(cp.LastError, "unavailable for a moment") ||
		!strings.Contains(cp.LastError, "the limit of 2 retries") || !cp.LastErrorOlder || cp.LastErrorStatus != 503 {
		t.Fatalf("checkpoint during the redelivery = %s delivery %d, last error %q (older %v, status %d)", cp.Status, cp.Deliveries, cp.LastError, cp.LastErrorOlder, cp.LastErrorStatus)
	}
	close(gate(job, 1))
	b.waitJob(t, job, salvagetype.JobDone)
}

func TestAdvisoryWithoutListenerIsCovered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		purge bool // lose the captured advisory too: only the sweeper is left
	}{{"captured by the stream", false}, {"found by the sweeper", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, setupOpts{noDeadLetter: true})
			b.startWorker(t, "w1")
			job := b.submit(t, modeAlwaysFails)
			salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Advisories) == 1 }, "the advisory")
			if tc.purge {
				s, _ := b.JS.Stream(b.ctx, streams.Advisories)
				if err := s.Purge(b.ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got := len(b.dlq(t)); got != 0 {
				t.Fatalf("%d envelopes before any dead-letterer ran", got)
			}
			b.startDeadLetterer(t)
			b.waitJob(t, job, salvagetype.JobIncomplete)
			if got := len(b.dlq(t)); got != 1 {
				t.Fatalf("%d envelopes, want 1", got)
			}
		})
	}
}

// TestCancellationAtStage cancels a job by its record alone, as a
// canceller that died before its cancelled event would: the repair sweep
// finds the cancelled job idle and finishes the cancel, event included, and
// the chunk blocked in stage 2 stops there.
func TestCancellationAtStage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.startWorker(t, "w1")
	job := b.submit(t, modeWaitCancel, modeOK)
	salvagetest.Eventually(t, time.Minute, func() bool {
		cp, _, err := b.stores.Parts()[0].Checkpoints.Get(b.ctx, job, 2)
		return callCount(job, 1, 2) == 1 && err == nil && cp.Status == salvagetype.ChunkDone
	}, "chunk 1 blocked in stage 2 and chunk 2 done")
	if _, err := b.stores.Jobs.Cancel(b.ctx, job); err != nil {
		t.Fatal(err)
	}
	j := b.waitJob(t, job, salvagetype.JobCancelled)
	cp := b.checkpoint(t, job, 1)
	if cp.Status != "cancelled-at-stage-2" {
		t.Fatalf("chunk 1 status = %q", cp.Status)
	}
	if cp.Tier1Retries != 0 || callCount(job, 1, 2) != 1 {
		t.Errorf("cancelled call was retried: retries %d, calls %d", cp.Tier1Retries, callCount(job, 1, 2))
	}
	if j.Summary.Cancelled != 1 || j.Summary.Done != 1 {
		t.Errorf("summary = %+v", j.Summary)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Chunks) == 0 }, "cancelled chunk acked")
	if n := len(b.dlq(t)); n != 0 {
		t.Errorf("%d envelopes for a cancelled chunk", n)
	}
}

func TestCancelledJobChunksNeverStart(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	job := b.submit(t, modeOK, modeOK)
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, err := b.stores.Jobs.Get(b.ctx, job)
		return err == nil && b.streamMsgs(t, streams.Chunks) == 2
	}, "chunks published and the job recorded")
	if _, err := b.stores.Jobs.Cancel(b.ctx, job); err != nil {
		t.Fatal(err)
	}
	b.startWorker(t, "w1")
	b.waitJob(t, job, salvagetype.JobCancelled)
	if got := b.checkpoint(t, job, 1).Status; got != "cancelled-at-stage-1" {
		t.Errorf("status = %q", got)
	}
	if callCount(job, 1, 1) != 0 {
		t.Error("a cancelled chunk ran")
	}
}

// TestKilledWorkerLosesClaimAndChunkResumes SIGKILLs a real worker process
// that renewed its claim mid-chunk; the chunk completes in another worker
// from the checkpoint the dead one wrote.
func TestKilledWorkerLosesClaimAndChunkResumes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{ackWait: 1500 * time.Millisecond})
	job := b.submit(t, modeBlockInChild)

	cmd := b.startChild(t, "child")

	var first kv.Lease
	salvagetest.Eventually(t, time.Minute, func() bool {
		l, err := b.stores.Parts()[0].Claims.Get(b.ctx, job, 1)
		if err == nil && first.Revision == 0 {
			first = l
		}
		return err == nil && l.ClaimedBy == "child" && l.Revision > first.Revision && b.checkpoint(t, job, 1).Stage == 2
	}, "the child to hold and renew the claim in stage 2")

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	b.startWorker(t, "survivor")

	b.waitJob(t, job, salvagetype.JobDone)
	cp := b.checkpoint(t, job, 1)
	// The survivor took it over once the lease lapsed, or took the
	// redelivery, whichever came first (AckWait and the lease are both
	// 1.5 s here). On a loaded machine neither may come first: a
	// redelivery that meets the child's claim while its process's lease
	// still holds is put back, and the takeover comes on the next — the
	// last MaxDeliver allows. Any later, and the chunk is dead-lettered
	// and the job is not done.
	if cp.ClaimedBy != "survivor" || cp.Deliveries > uint64(b.opts.MaxDeliver) {
		t.Errorf("checkpoint = %+v, want finished by survivor within MaxDeliver (%d) deliveries", cp, b.opts.MaxDeliver)
	}
	// A delivery put back is not a take: the chunk ran on two deliveries,
	// the child's and then the survivor's.
	var takers []string
	for _, e := range cp.Events {
		if e.Kind == salvagetype.EventDelivered {
			takers = append(takers, e.Worker)
		}
	}
	if !slices.Equal(takers, []string{"child", "survivor"}) {
		t.Errorf("delivered to %q; want the child, then the survivor", takers)
	}
	if n := callCount(job, 1, 1); n != 0 {
		t.Errorf("survivor re-ran stage 1 (%d calls): it should resume from the checkpoint at stage 2", n)
	}
	if n := callCount(job, 1, 2); n != 1 {
		t.Errorf("survivor ran stage 2 %d times, want 1", n)
	}
	// Stage 3 passed only if agent1's stage-1 snapshot, written by the
	// killed process, was loaded; the checkpoint names the snapshots.
	if ref := cp.Snapshots["agent1"]; ref.Seq != 2 || len(ref.Inline) == 0 {
		t.Errorf("agent1 snapshot = %+v, want its second, inline", ref)
	}
	st, err := b.stores.Snapshots.LoadState(b.ctx, cp.Snapshots["agent1"])
	if err != nil || len(st.Completed) != 2 || st.Memory["mode"] == nil {
		t.Errorf("agent1 state = %+v, %v", st, err)
	}
}

// TestSurvivorTakesOverBeforeAckWait SIGKILLs a real worker process
// mid-chunk under an AckWait of 20 s: once the dead process's lease (two
// fifths of AckWait) lapsed, the reaper hands its claim back and naks its
// delivery, and a survivor finishes the chunk from the checkpoint on the
// next delivery, a takeover. (AckWait's own redelivery would take the
// claim without a takeover: the records say which it was.)
func TestSurvivorTakesOverBeforeAckWait(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{ackWait: 20 * time.Second})
	job := b.submit(t, modeBlockInChild)
	cmd := b.startChild(t, "child")
	salvagetest.Eventually(t, time.Minute, func() bool {
		l, err := b.stores.Parts()[0].Claims.Get(b.ctx, job, 1)
		cp, _, cerr := b.stores.Parts()[0].Checkpoints.Get(b.ctx, job, 1)
		return err == nil && cerr == nil && l.ClaimedBy == "child" && l.Reply != "" && cp.Stage == 2
	}, "the child to hold the chunk in stage 2")
	b.startWorker(t, "survivor")
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	b.waitJob(t, job, salvagetype.JobDone)
	cp := b.checkpoint(t, job, 1)
	if cp.ClaimedBy != "survivor" || cp.Deliveries != 2 || cp.Takeovers != 1 {
		t.Errorf("checkpoint = %+v; want finished by the survivor on the second delivery, a takeover", cp)
	}
	if n := callCount(job, 1, 2); n != 1 {
		t.Errorf("stage 2 ran %d times; want once (the child blocked in it before its call)", n)
	}
	var takers []string
	for _, e := range cp.Events {
		if e.Kind == salvagetype.EventDelivered {
			takers = append(takers, e.Worker+": "+e.Detail)
		}
	}
	if want := []string{"child: ", "survivor: taken over from child (its process's lease lapsed)"}; !slices.Equal(takers, want) {
		t.Errorf("delivered to %q; want %q", takers, want)
	}
	if keys, err := b.stores.Parts()[0].Claims.HeldBy(b.ctx, "child"); err != nil || len(keys) != 0 {
		t.Errorf("claims still listed under the dead child: %v (%v)", keys, err)
	}
	// Nothing left pending.
	salvagetest.Eventually(t, time.Minute, func() bool {
		info, err := b.JS.Consumer(b.ctx, streams.Chunks, streams.Pipeline("test").Workers())
		return err == nil && info.CachedInfo().NumAckPending == 0 && info.CachedInfo().NumPending == 0
	}, "the chunk message acknowledged")
}

// TestKilledBeforePureCallRowIsMadeAgain: a worker process is SIGKILLed
// after a pure call returned and before its outcome row was written. The
// call left no row at all (a pure call writes none before it runs), so
// the next worker makes it again, once, and the chunk finishes; stage 1,
// checkpointed, is not run again.
func TestKilledBeforePureCallRowIsMadeAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{ackWait: 1500 * time.Millisecond})
	job := b.submit(t, modeOK)
	child := b.startChild(t, "child", "SALVAGE_TEST_KILL_BEFORE_ROW=1")
	if err := child.Wait(); err == nil {
		t.Fatal("the child worker exited cleanly; it should have killed itself before the stage-2 row")
	}
	cp := b.checkpoint(t, job, 1)
	if cp.Stage != 2 || cp.Status != salvagetype.ChunkRunning {
		t.Fatalf("checkpoint after the kill = stage %d %s, want stage 2 running", cp.Stage, cp.Status)
	}
	key := kv.JournalKey(job, 1, cp.Epoch, 2, "agent2", 1)
	if row, err := b.stores.Parts()[0].Journal.Get(b.ctx, key); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("row %s after the kill = %+v, %v; want none", key, row, err)
	}
	b.startWorker(t, "survivor")
	b.waitJob(t, job, salvagetype.JobDone)
	if n := callCount(job, 1, 2); n != 1 {
		t.Errorf("survivor made the stage-2 call %d times, want once more", n)
	}
	if n := callCount(job, 1, 1); n != 0 {
		t.Errorf("survivor re-ran stage 1 (%d calls): its checkpoint was durable", n)
	}
	row, err := b.stores.Parts()[0].Journal.Get(b.ctx, key)
	if err != nil || row.Status != salvagetype.CallSucceeded || row.Attempts != 1 {
		t.Errorf("row %s = %+v, %v; want SUCCEEDED after one attempt", key, row, err)
	}
}

// TestStaleWorkerIsFencedOut: a worker whose claim was stolen finishes its
// stage, fails the fenced checkpoint write, and stops without acking.
func TestStaleWorkerIsFencedOut(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{ackWait: 30 * time.Second})
	log, fenced := logSays("fenced out; stopping without ack")
	b.startWorkerWith(t, "stale", func(c *worker.Config) { c.Logger = log })
	job := b.submit(t, modeGate)
	salvagetest.Eventually(t, time.Minute, func() bool { return callCount(job, 1, 2) == 1 }, "stale worker in stage 2")

	// Another worker steals the claim after expiry and takes the fence.
	b.stores.Parts()[0].Claims.SetClock(func() time.Time { return time.Now().Add(time.Minute) })
	lease, err := b.stores.Parts()[0].Claims.Acquire(b.ctx, job, 1, "thief", 2, time.Hour)
	b.stores.Parts()[0].Claims.SetClock(time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.stores.Parts()[0].Checkpoints.Take(b.ctx, job, 1, "thief", lease.Revision, nil); err != nil {
		t.Fatal(err)
	}
	close(gate(job, 1))

	// The stale worker's stage-2 checkpoint write fails (it says so, and
	// stops): the checkpoint stays the thief's, at stage 2, and the
	// message stays unacked.
	select {
	case <-fenced:
	case <-time.After(time.Minute):
		t.Fatal("the stale worker never found itself fenced out")
	}
	if cp := b.checkpoint(t, job, 1); cp.ClaimedBy != "thief" || cp.Stage != 2 {
		t.Fatalf("stale worker wrote the checkpoint: %+v", cp)
	}
	cons, _ := b.JS.Consumer(b.ctx, streams.Chunks, streams.Pipeline("test").Workers())
	info, err := cons.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 1 || b.streamMsgs(t, streams.Chunks) != 1 {
		t.Fatalf("stale worker acked: ack pending %d, messages %d", info.NumAckPending, b.streamMsgs(t, streams.Chunks))
	}
	if n := callCount(job, 1, 3); n != 0 {
		t.Fatalf("stale worker went on to stage 3")
	}
}

// TestPanicsAreChunkFailures: an agent that panics and a tool that panics
// each end their own chunk in an envelope of class panic carrying the
// panic and its stack; the other chunks of the job, in the same worker
// process, finish. A split that panics rejects its job.
func TestPanicsAreChunkFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rejected := b.subscribe(t, "salvage.events.rejected.>")
	b.startWorker(t, "w1")
	job := b.submit(t, modeAgentPanics, modeOK, modeToolPanics, modeOK)
	j := b.waitJob(t, job, salvagetype.JobIncomplete)
	if j.Summary.Done != 2 || j.Summary.DeadLettered != 2 {
		t.Fatalf("summary = %+v, want the two other chunks done", j.Summary)
	}
	for _, e := range b.dlq(t) {
		if e.ErrorClass != "panic" || !strings.Contains(e.Error, "panicked") || !strings.Contains(e.Error, "goroutine") ||
			e.Category != salvagetype.CategoryUnrecoverable {
			t.Errorf("envelope of chunk %d: class %q, category %s, error %.300q", e.Chunk, e.ErrorClass, e.Category, e.Error)
		}
	}
	row, err := b.stores.Parts()[0].Journal.Get(b.ctx, kv.JournalKey(job, 3, 0, 2, "agent2", 1))
	if err != nil || row.Status != salvagetype.CallFailed || row.ErrorClass != "panic" || !strings.Contains(row.Error, "the tool fell over") {
		t.Errorf("the panicking tool's row = %+v, %v", row.JournalRow, err)
	}
	if _, err := b.JS.Publish(b.ctx, streams.Pipeline("test").Subject(), []byte(`{"input": {"chunks": ["ok"], "panic": true}}`)); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(rejected()) == 1 }, "the split panic's rejection")
	if m := rejected()[0]; m.Subject != streams.RejectedSubject(salvagetype.RejectPanic) || !strings.Contains(string(m.Data), "split cannot cope") {
		t.Errorf("rejection on %s: %.300s", m.Subject, m.Data)
	}
}

type saysWriter struct {
	msg  string
	once sync.Once
	said chan struct{}
}

func (w *saysWriter) Write(p []byte) (int, error) {
	var line struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(p, &line) == nil && line.Message == w.msg {
		w.once.Do(func() { close(w.said) })
	}
	return len(p), nil
}
