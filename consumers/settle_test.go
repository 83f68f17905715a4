package consumers_test

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// TestKilledRightAfterDoneSettles: a worker process is SIGKILLed right
// after writing a replayed chunk's done checkpoint — before it acks,
// counts the chunk in its job, or resolves the envelope it ran for. With
// no worker left to see the chunk again, the sweeper settles both within
// a sweep interval of them going quiet (they used to stay incomplete and
// recovering forever).
func TestKilledRightAfterDoneSettles(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{ackWait: time.Minute})
	stop := b.startWorker(t, "parent")
	job := b.submit(t, modeFailsInParent)
	b.waitJob(t, job, salvagetype.JobIncomplete)
	stop()
	env := b.dlq(t)[0]
	op := operator.New(b.JS, b.stores)
	if _, err := op.Replay(b.ctx, env.ID, "tester"); err != nil {
		t.Fatal(err)
	}
	child := b.startChild(t, "child", "SALVAGE_TEST_KILL_AFTER_DONE=1")
	if err := child.Wait(); err == nil {
		t.Fatal("the child worker exited cleanly; it should have been killed after the done checkpoint")
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.Sys() == nil {
		t.Fatalf("child: %v", err)
	}
	if cp := b.checkpoint(t, job, 1); cp.Status != salvagetype.ChunkDone {
		t.Fatalf("checkpoint after the kill = %s, want done", cp.Status)
	}
	j := b.waitJob(t, job, salvagetype.JobDone)
	if j.Summary.Done != 1 || j.Summary.DeadLettered != 0 || j.Summary.DeadLetters != 1 {
		t.Errorf("settled summary = %+v", j.Summary)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		rec, _, err := b.stores.Envelopes.Get(b.ctx, env.ID)
		return err == nil && rec.Status == salvagetype.EnvelopeResolved && rec.ResolvedBy == "chunk"
	}, "the replayed envelope to be resolved")
}

// TestKilledBetweenFinishAndAnnouncementAnnounces: a worker process is
// SIGKILLed right after the write that finished its job, before the
// finished event retention works from. The job record keeps the debt,
// and the dead-letterer's repair sweep announces it (it used to be lost
// for good: only the call whose write finished the job announced, and
// no later settle finishes it again).
func TestKilledBetweenFinishAndAnnouncementAnnounces(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	child := b.startChild(t, "child", "SALVAGE_TEST_KILL_AFTER_FINISH=1")
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = child.Wait(); close(exited) }()
	// Before startChild's own cleanup, which waits for the child too.
	t.Cleanup(func() { _ = child.Process.Kill(); <-exited })
	// The child makes the finishing write unless the repair sweep beats it
	// to it (a sweep that read the record just before the child counted
	// its last chunk, with the job idle since it was created): then the
	// sweep announces at once and the child lives on. Another job, then.
	var job string
	for attempt := 1; ; attempt++ {
		job = b.submit(t, modeOK)
		killed := false
		salvagetest.Eventually(t, 2*time.Minute, func() bool {
			select {
			case <-exited:
				killed = true
				return true
			default:
			}
			j, err := b.stores.Jobs.Get(b.ctx, job)
			return err == nil && j.Finishes > 0 && !j.AnnouncementOwed()
		}, "the child killed after finishing the job, or the job finished and announced by the sweep")
		if killed {
			break
		}
		if attempt == 3 {
			t.Fatalf("three jobs in a row were finished by the repair sweep before the child, which was never killed")
		}
		t.Logf("job %s was finished by the repair sweep, not the child; another job", job)
	}
	if waitErr == nil {
		t.Fatal("the child worker exited cleanly; it should have been killed after the finish")
	}
	j, err := b.stores.Jobs.Get(b.ctx, job)
	if err != nil || j.Status != salvagetype.JobDone || j.Finishes != 1 || j.Unannounced != 1 {
		t.Fatalf("job after the kill = %+v, %v: want done, finished once, its finish owed", j, err)
	}
	s, err := b.JS.Stream(b.ctx, streams.Events)
	if err != nil {
		t.Fatal(err)
	}
	finished := streams.JobRef{Job: job}.Event(streams.EventFinished)
	if _, err := s.GetLastMsgForSubject(b.ctx, finished); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a finished event before the announcement (%v)", err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		j, err = b.stores.Jobs.Get(b.ctx, job)
		return err == nil && j.Unannounced == 0
	}, "the repair sweep to announce the finish")
	m, err := s.GetLastMsgForSubject(b.ctx, finished)
	if err != nil {
		t.Fatalf("no finished event for job %s: %v", job, err)
	}
	var ev salvagetype.JobEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Status != salvagetype.JobDone || ev.Done != j.Chunks {
		t.Errorf("finished event %s (%v); want done, %d chunks done", m.Data, err, j.Chunks)
	}
}

// TestHandReplayIsLinked: an operator republishes a dead-lettered chunk by
// hand (nats pub <original.subject> <original.data> -H
// Salvage-Replay-Of:<id>) and it fails again. The old envelope is
// superseded by the new one — never left open beside it, never called
// resolved — and marked as a person's doing.
func TestHandReplayIsLinked(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.startWorker(t, "w1")
	job := b.submit(t, modePermanent)
	b.waitJob(t, job, salvagetype.JobIncomplete)
	first := b.dlq(t)[0]
	m := nats.NewMsg(first.Original.Subject)
	m.Data = first.Original.Data
	m.Header.Set(salvagetype.HeaderReplayOf, first.ID)
	if _, err := b.JS.PublishMsg(b.ctx, m); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(b.dlq(t)) == 2 }, "the replay's own envelope")
	second := b.dlq(t)[1]
	salvagetest.Eventually(t, time.Minute, func() bool {
		old, _, err := b.stores.Envelopes.Get(b.ctx, first.ID)
		return err == nil && old.Status == salvagetype.EnvelopeSuperseded
	}, "the first envelope superseded")
	old, _, _ := b.stores.Envelopes.Get(b.ctx, first.ID)
	cur, _, _ := b.stores.Envelopes.Get(b.ctx, second.ID)
	if old.SupersededBy != second.ID || !old.Human || old.Replays != 1 || cur.Status != salvagetype.EnvelopeOpen {
		t.Errorf("first = %+v\nsecond = %+v", old, cur)
	}
	if cp := b.checkpoint(t, job, 1); cp.Envelope != second.ID || cp.DeadLetters != 2 {
		t.Errorf("checkpoint names envelope %s after %d dead letters, want %s after 2", cp.Envelope, cp.DeadLetters, second.ID)
	}
	j := b.waitJob(t, job, salvagetype.JobIncomplete)
	if j.Summary.DeadLettered != 1 || j.Summary.DeadLetters != 2 {
		t.Errorf("summary = %+v, want 1 chunk dead-lettered twice", j.Summary)
	}
	recs, _ := b.stores.Envelopes.List(b.ctx)
	if r := recovery.AutoRecoveryRate(recs); r.DeadLettered != 1 || r.Recovered != 0 {
		t.Errorf("rate = %+v, want one chunk, not recovered (a person replayed it, and it is open)", r)
	}
	if _, err := operator.New(b.JS, b.stores).Replay(b.ctx, first.ID, "x"); err == nil {
		t.Error("replaying a superseded envelope should be refused: replay the newer one")
	}
}

// TestBigJobIsFairCheapAndCancellable: a 5,000-chunk job is split with only
// a window of it queued; a 1-chunk job submitted right behind it finishes
// while most of the big one still waits (it used to wait behind all 5,000).
// Each chunk outcome costs the server O(1) messages, not a read of every
// checkpoint; cancelling removes the queued chunks at once and records them
// cancelled at stage 0.
func TestBigJobIsFairCheapAndCancellable(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxPayload: 1 << 20})
	b.startWorker(t, "w1")
	const n = 5000
	modes := make([]string, n)
	for i := range modes {
		modes[i] = modeOK
	}
	before := outMsgs(t, b)
	big := b.submit(t, modes...)
	// Deadlines bound the waits, generously: under make stress the split
	// of 5,000 chunks alone took over 20 s.
	salvagetest.Eventually(t, 2*time.Minute, func() bool {
		j, err := b.stores.Jobs.Get(b.ctx, big)
		return err == nil && j.Summary.Done > 0
	}, "the big job to start")
	small := b.submit(t, modeOK)
	b.waitJob(t, small, salvagetype.JobDone)
	j, _ := b.stores.Jobs.Get(b.ctx, big)
	t.Logf("the 1-chunk job finished when %d of the big job's %d chunks had", j.Summary.Done, n)
	if j.Summary.Done > n/2 || j.Window != salvagetype.ChunkWindowDefault {
		t.Fatalf("the small job finished only after %d of the big job's chunks (window %d): no fairness", j.Summary.Done, j.Window)
	}
	salvagetest.Eventually(t, 3*time.Minute, func() bool {
		j, _ = b.stores.Jobs.Get(b.ctx, big)
		return j.Summary.Done >= 500
	}, "500 chunks of the big job done")
	// Every message the server sent a client, over the chunks done: a
	// status derived from every checkpoint after each chunk would be
	// thousands per chunk.
	per := float64(outMsgs(t, b)-before) / float64(j.Summary.Done)
	t.Logf("%.1f messages from the server per chunk done (%d chunks)", per, j.Summary.Done)
	if per > 150 {
		t.Errorf("%.0f messages from the server per chunk done: not O(1) per chunk", per)
	}
	cancelled := time.Now()
	j, err := operator.New(b.JS, b.stores).Cancel(b.ctx, big, "tester")
	if err != nil {
		t.Fatal(err)
	}
	j = b.waitJob(t, big, salvagetype.JobCancelled)
	t.Logf("cancelled with %d chunks done; settled %s after the cancel", j.Summary.Done, time.Since(cancelled).Round(time.Millisecond))
	if j.Summary.Done+j.Summary.Cancelled != n || j.Summary.Cancelled < n/2 {
		t.Fatalf("cancelled summary = %+v", j.Summary)
	}
	for _, s := range []string{streams.Chunks, streams.Backlog} {
		if m := b.streamMsgs(t, s); m != 0 {
			t.Errorf("%d messages left in %s after the cancel", m, s)
		}
	}
	cps, err := b.stores.Parts()[0].Checkpoints.ForJobRange(b.ctx, big, n-1, n)
	if err != nil {
		t.Fatal(err)
	}
	if v := j.View(cps); v[1].Status != salvagetype.CancelledAtStage(0) {
		t.Errorf("an unstarted chunk reads %q, want cancelled-at-stage-0", v[1].Status)
	}
}

// TestSplitIsAllOrNothing: a job one of whose chunks would not fit in a
// message (the chunk's own JSON fields push it past the limit) is rejected
// whole: no record, no chunk published, the job message removed. It used
// to leave a running record whose last chunk was retried forever.
func TestSplitIsAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rejected := b.subscribe(t, "salvage.events.rejected.>")
	b.startWorker(t, "w1")
	big := make([]byte, 4000)
	for i := range big {
		big[i] = 'x'
	}
	body, _ := json.Marshal(map[string]any{"input": map[string]any{"chunks": []string{modeOK, modeOK, string(big)}}})
	if len(body) > 4096 {
		t.Fatalf("the job itself is %d bytes: over the limit", len(body))
	}
	if _, err := b.JS.Publish(b.ctx, streams.Pipeline("test").Subject(), body); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(rejected()) == 1 }, "one rejection")
	if m := rejected()[0]; m.Subject != streams.RejectedSubject(salvagetype.RejectOversizedChunk) {
		t.Fatalf("rejected on %s", m.Subject)
	}
	if jobs, _ := b.stores.Jobs.List(b.ctx); len(jobs) != 0 {
		t.Errorf("%d job records for a job that could not be split", len(jobs))
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Jobs) == 0 }, "the job message removed")
	if n := b.streamMsgs(t, streams.Chunks); n != 0 {
		t.Errorf("%d chunks published for a rejected job", n)
	}
	// Past the chunk limit: rejected too.
	b2 := setup(t, setupOpts{maxPayload: 1 << 20})
	rejected2 := b2.subscribe(t, "salvage.events.rejected.>")
	modes := make([]string, salvagetype.MaxChunksDefault+1)
	for i := range modes {
		modes[i] = modeOK
	}
	b2.submit(t, modes...)
	salvagetest.Eventually(t, time.Minute, func() bool { return len(rejected2()) == 1 }, "a too-many-chunks rejection")
	if m := rejected2()[0]; m.Subject != streams.RejectedSubject(salvagetype.RejectTooManyChunks) {
		t.Fatalf("rejected on %s", m.Subject)
	}
}

// TestRejectionsAreBounded: the rejection of a malformed 200 KB body of '<'
// used to copy it whole (1.2 MB once JSON-escaped), fail to publish, and
// leave the job message retried forever. It is now a prefix, the length
// and a hash.
func TestRejectionsAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxPayload: 512 << 10})
	rejected := b.subscribe(t, "salvage.events.rejected.>")
	body := make([]byte, 200_000)
	for i := range body {
		body[i] = '<'
	}
	if _, err := b.JS.Publish(b.ctx, streams.Pipeline("test").Subject(), body); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(rejected()) == 1 }, "the rejection")
	m := rejected()[0]
	var r salvagetype.Rejection
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatal(err)
	}
	if len(m.Data) > 2*salvagetype.RejectionDataMax || r.Size != len(body) || !r.DataTruncated || len(r.SHA256) != 64 || r.Reason != salvagetype.RejectMalformedJSON {
		t.Errorf("rejection of %d bytes: size %d, truncated %v, sha %q, reason %s", len(m.Data), r.Size, r.DataTruncated, r.SHA256, r.Reason)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Jobs) == 0 }, "the job message removed")
}

// TestSplitFailedAfterBoundedDeliveries: a job message the splitter cannot
// handle (its bucket is gone) is delivered MaxDeliver times, then reported
// as split-failed and left in SALVAGE_JOBS for an operator: never retried
// forever, never lost.
func TestSplitFailedAfterBoundedDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{splitterMaxDeliver: 2})
	rejected := b.subscribe(t, "salvage.events.rejected.>")
	if err := b.JS.DeleteKeyValue(b.ctx, kv.BucketJobs); err != nil {
		t.Fatal(err)
	}
	b.submit(t, modeOK)
	salvagetest.Eventually(t, time.Minute, func() bool { return len(rejected()) == 1 }, "the split-failed report")
	m := rejected()[0]
	var r salvagetype.Rejection
	_ = json.Unmarshal(m.Data, &r)
	if m.Subject != streams.RejectedSubject(salvagetype.RejectSplitFailed) || r.StreamSeq == 0 {
		t.Fatalf("report on %s: %+v", m.Subject, r)
	}
	cons, err := b.JS.Consumer(b.ctx, streams.Jobs, streams.Pipeline("test").Splitter())
	if err != nil {
		t.Fatal(err)
	}
	// After its last delivery the message is pending until its AckWait
	// passes; then the consumer lets it go, delivering it no more.
	var info *jetstream.ConsumerInfo
	salvagetest.Eventually(t, time.Minute, func() bool {
		info, err = cons.Info(b.ctx)
		return err == nil && info.NumAckPending == 0
	}, "the consumer to let the job message go after its last delivery")
	if b.streamMsgs(t, streams.Jobs) != 1 || info.NumAckPending != 0 || info.Delivered.Consumer != 2 {
		t.Errorf("job message kept %d, ack pending %d, deliveries %d; want kept, none pending, 2 deliveries",
			b.streamMsgs(t, streams.Jobs), info.NumAckPending, info.Delivered.Consumer)
	}
	s, _ := b.JS.Stream(b.ctx, streams.Jobs)
	if raw, err := s.GetMsg(b.ctx, r.StreamSeq); err != nil || len(raw.Data) == 0 {
		t.Errorf("the job message at %s is not readable: %v", strconv.FormatUint(r.StreamSeq, 10), err)
	}
}

// outMsgs is how many messages the server has sent its clients.
func outMsgs(t *testing.T, b *bundle) int64 {
	t.Helper()
	v, err := b.NATS.NATS().Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	return v.OutMsgs
}

// TestLostReplayIsRepublished: a replay that marked its envelope and reset
// the checkpoint, then died before publishing the chunk, used to leave
// the envelope recovering forever with nothing queued. The sweeper
// publishes the chunk; it runs, and the envelope resolves.
func TestLostReplayIsRepublished(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	stop := b.startWorker(t, "parent")
	job := b.submit(t, modeFailsInParent)
	b.waitJob(t, job, salvagetype.JobIncomplete)
	stop()
	env := b.dlq(t)[0]
	// What Operator.Replay writes before it publishes.
	if _, err := b.stores.Envelopes.Mutate(b.ctx, env.ID, func(r *kv.EnvelopeRecord) error {
		r.Replays, r.Status, r.Requeued, r.Human = 1, salvagetype.EnvelopeRecovering, true, true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var d kv.Delta
	if _, err := b.stores.Parts()[0].Checkpoints.Mutate(b.ctx, job, 1, func(cp *kv.Checkpoint) error {
		cp.Status, cp.ClaimedBy, cp.Envelope = salvagetype.ChunkPending, "", env.ID
		d = cp.Recount()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.stores.Jobs.Apply(b.ctx, job, d); err != nil {
		t.Fatal(err)
	}
	b.startChild(t, "child")
	b.waitJob(t, job, salvagetype.JobDone)
	salvagetest.Eventually(t, time.Minute, func() bool {
		rec, _, err := b.stores.Envelopes.Get(b.ctx, env.ID)
		return err == nil && rec.Status == salvagetype.EnvelopeResolved
	}, "the replayed envelope to resolve")
}

// TestReplayKilledBeforeItsCheckpointIsFinished: a replay that marked its
// envelope and died before it sent the chunk (the checkpoint still
// dead-lettered under the envelope) is finished by the sweeper — and by
// the next Replay of the envelope — instead of leaving the envelope
// recovering with nothing queued forever.
func TestReplayKilledBeforeItsCheckpointIsFinished(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	stop := b.startWorker(t, "parent")
	job := b.submit(t, modeFailsInParent)
	b.waitJob(t, job, salvagetype.JobIncomplete)
	stop()
	env := b.dlq(t)[0]
	// All Operator.Replay wrote before it died.
	if _, err := b.stores.Envelopes.Mutate(b.ctx, env.ID, func(r *kv.EnvelopeRecord) error {
		r.Replays, r.Status, r.Requeued, r.Human = 1, salvagetype.EnvelopeRecovering, true, true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if cp := b.checkpoint(t, job, 1); cp.Status != salvagetype.ChunkDeadLettered || cp.Envelope != env.ID {
		t.Fatalf("checkpoint = %+v", cp)
	}
	b.startChild(t, "child")
	b.waitJob(t, job, salvagetype.JobDone)
	salvagetest.Eventually(t, time.Minute, func() bool {
		rec, _, err := b.stores.Envelopes.Get(b.ctx, env.ID)
		return err == nil && rec.Status == salvagetype.EnvelopeResolved && rec.Replays == 1
	}, "the replayed envelope to resolve")
}
