package consumers_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// TestRedeliveryMeetingLiveHolderSpendsNoDelivery: while the holder lives
// (renewing its claim), a redelivered copy waits in progress instead of
// naking, so the delivery count stays put and nothing is dead-lettered.
func TestRedeliveryMeetingLiveHolderSpendsNoDelivery(t *testing.T) {
	t.Parallel()
	// AckWait 3 s: the waiter's in-progress beats (every AckWait/3) keep
	// its copy while the holder lives; at 1 s, a beat a loaded machine
	// sent late spent a delivery the test would blame on the waiter.
	b := setup(t, setupOpts{ackWait: 3 * time.Second})
	job := b.submit(t, modeOK)
	cons, err := b.JS.Consumer(b.ctx, streams.Chunks, streams.Pipeline("test").Workers())
	if err != nil {
		t.Fatal(err)
	}
	var held jetstream.Msg
	salvagetest.Eventually(t, time.Minute, func() bool {
		batch, err := cons.FetchNoWait(1)
		if err != nil {
			return false
		}
		for m := range batch.Messages() {
			held = m
		}
		return held != nil
	}, "the holder to take the chunk")
	lease, err := b.stores.Parts()[0].Claims.Acquire(b.ctx, job, 1, "holder", 1, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The holder renews its claim but sends no in-progress: JetStream
	// redelivers the message to the real worker after AckWait.
	b.startWorker(t, "waiter")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if lease, err = b.stores.Parts()[0].Claims.Renew(b.ctx, lease, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the fault: a holder alive for 10 s that renews and sends no in-progress
	}
	info, err := cons.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 1 || info.Delivered.Consumer != 2 {
		t.Fatalf("deliveries spent while the holder lived: redelivered %d, delivered %d", info.NumRedelivered, info.Delivered.Consumer)
	}
	if callCount(job, 1, 1) != 0 {
		t.Fatal("waiter ran a chunk held by a live worker")
	}
	// The holder finishes: the waiter acks its copy without running it.
	_, fence, err := b.stores.Parts()[0].Checkpoints.Take(b.ctx, job, 1, "holder", lease.Revision, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp := b.checkpoint(t, job, 1)
	cp.Status = salvagetype.ChunkDone
	if err := b.stores.Parts()[0].Checkpoints.Write(b.ctx, &fence, cp); err != nil {
		t.Fatal(err)
	}
	_ = held.Ack()
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Chunks) == 0 }, "message gone")
	if n := len(b.dlq(t)); n != 0 || callCount(job, 1, 1) != 0 {
		t.Fatalf("envelopes %d, calls %d", n, callCount(job, 1, 1))
	}
}

// TestAdvisoryBeforeDeadHoldersLeaseExpires: the max-deliveries advisory
// of a chunk whose last holder died can arrive a moment before that
// holder's lease runs out. The dead-letterer must not drop it: the
// sweeper cannot see such a message while the work queue is busy (the
// ack floor stays below it). It asks again once the lease is over and
// writes the envelope then.
func TestAdvisoryBeforeDeadHoldersLeaseExpires(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noDeadLetter: true})
	job := b.submit(t, modeOK)
	s, err := b.JS.Stream(b.ctx, streams.Chunks)
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	salvagetest.Eventually(t, time.Minute, func() bool {
		m, err := s.GetLastMsgForSubject(b.ctx, streams.ChunkRef{Pipeline: "test", Job: job, Chunk: 1}.Subject())
		if err == nil {
			seq = m.Sequence
		}
		return err == nil
	}, "the chunk message")
	// The dead holder's lease, with two seconds left.
	if _, err := b.stores.Parts()[0].Claims.Acquire(b.ctx, job, 1, "dead-worker", 3, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	adv, _ := json.Marshal(streams.Advisory{Stream: streams.Chunks, Consumer: streams.Pipeline("test").Workers(), StreamSeq: seq, Deliveries: 3})
	if _, err := b.JS.Publish(b.ctx, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.SALVAGE_CHUNKS."+streams.Pipeline("test").Workers(), adv); err != nil {
		t.Fatal(err)
	}
	b.startDeadLetterer(t)
	salvagetest.Eventually(t, time.Minute, func() bool { return len(b.dlq(t)) == 1 }, "the envelope once the lease ran out")
	if e := b.dlq(t)[0]; e.Job != job || e.Chunk != 1 {
		t.Errorf("envelope for %s.%d, want %s.1", e.Job, e.Chunk, job)
	}
}

// TestNoWorkerFollowsTheClaims is what a worker costs at any fleet size:
// with workers running, no one follows salvage_claims (every claim write
// of the fleet delivered to every worker, as a takeover watch did) nor
// salvage_jobs but the dead-letter process's repairer (every job record
// write delivered to every worker, as the cancellation watch did: the
// workers follow only the cancelled events now), and salvage_workers is
// followed by the dead-letter process's reaper alone.
func TestNoWorkerFollowsTheClaims(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for _, id := range []string{"w1", "w2", "w3"} {
		b.startWorker(t, id)
	}
	job := b.submit(t, modeOK, modeOK, modeOK, modeOK)
	b.waitJob(t, job, salvagetype.JobDone)
	consumersOf := func(stream string) int {
		s, err := b.JS.Stream(b.ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	if n := consumersOf("KV_" + kv.BucketClaims); n != 0 {
		t.Errorf("%d consumers follow salvage_claims with three workers running; want none", n)
	}
	if n := consumersOf("KV_" + kv.BucketWorkers); n != 1 {
		t.Errorf("%d consumers follow salvage_workers; want one, the reaper's", n)
	}
	if n := consumersOf("KV_" + kv.BucketJobs); n != 1 {
		t.Errorf("%d consumers follow salvage_jobs; want one, the repairer's", n)
	}
}

// TestCancelledEventIsCheckedAgainstTheRecord: a cancelled event no
// cancel wrote (the job's record says running) stops nothing. The worker
// handles events in order, so once a real cancel of another job, published
// after the forged one, has stopped that job's chunk, the forged event was
// read; the first job then finishes done.
func TestCancelledEventIsCheckedAgainstTheRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.startWorker(t, "w1")
	forged := b.submit(t, modeGate)
	real := b.submit(t, modeWaitCancel)
	salvagetest.Eventually(t, time.Minute, func() bool {
		return callCount(real, 1, 2) == 1 && b.checkpoint(t, forged, 1).Stage == 2
	}, "both chunks in stage 2")
	ev, _ := json.Marshal(salvagetype.JobEvent{Job: forged, Kind: streams.EventCancelled, Reason: "forged"})
	if _, err := b.JS.Publish(b.ctx, streams.JobRef{Job: forged}.Event(streams.EventCancelled), ev); err != nil {
		t.Fatal(err)
	}
	if _, err := operator.New(b.JS, b.stores).Cancel(b.ctx, real, "ann"); err != nil {
		t.Fatal(err)
	}
	b.waitJob(t, real, salvagetype.JobCancelled)
	close(gate(forged, 1))
	if j := b.waitJob(t, forged, salvagetype.JobDone); j.Summary.Done != 1 {
		t.Errorf("job with a forged cancelled event = %+v; want its chunk done", j.Summary)
	}
}

// logSays returns a logger, and a channel closed once a line it wrote
// has the message msg: a test waits for what a role did by what it said.
func logSays(msg string) (*zerolog.Logger, <-chan struct{}) {
	w := &saysWriter{msg: msg, said: make(chan struct{})}
	log := zerolog.New(w)
	return &log, w.said
}
