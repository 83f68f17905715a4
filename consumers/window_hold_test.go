package consumers_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/consumers/worker"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// While a system's breaker is open, the chunk a start lets in waits on
// that system's hold, not in the work queue, once the worker has parked a
// chunk there: a job has at most its window of chunks parked on
// SALVAGE_HOLD and its window admitted behind them (and what the worker's
// slots let in before its first park), and the rest waits in its backlog
// — instead of passing one after another through the work queue onto the
// hold (each letting the next in as it started) and coming back, in the
// order they were parked, ahead of every other job's. Once the breaker
// closes every chunk of both jobs finishes, only the chunks that started
// while it was open were ever held, and crm gets one request per chunk.
// Counted from the streams and the checkpoints.
func TestHeldChunksKeepTheirJobsWindow(t *testing.T) {
	t.Parallel()
	crm, extra := &extSystem{}, &extSystem{}
	b := setup(t, setupOpts{pipelines: []*recovery.Plan{outagePipeline(t, crm, extra)}})
	const slots = 4
	b.startWorkerWith(t, "w1", func(c *worker.Config) { c.Concurrency = slots })

	// The breaker is open before any chunk exists; the worker's holder
	// pausing the hold consumer says its view of the breakers has it.
	if _, _, err := b.stores.Breakers.Mutate(b.ctx, "crm", "test", func(br *kv.Breaker) error {
		br.Open(salvagetype.BreakerPolicy{CoolDown: time.Hour}, time.Now(), "taken down by the test")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.waitPaused(t, streams.Hold, streams.System("crm").HoldConsumer(), true)

	const large, small, window = 60, 4, salvagetype.ChunkWindowDefault
	a := submitOutage(t, b, large)
	// Nothing of a's queued or running (a parked chunk's message is acked),
	// and every start's admission made (it may follow its chunk's park):
	// no chunk of it can start again, so nothing more is let in. Either
	// twice its window is on the hold, or its backlog ran dry.
	salvagetest.Eventually(t, time.Minute, func() bool {
		held, backlog := b.streamMsgs(t, streams.Hold), b.streamMsgs(t, streams.Backlog)
		return b.streamMsgs(t, streams.Chunks) == 0 && held+backlog == large && (held >= 2*window || backlog == 0)
	}, "job a's chunks to settle between the hold and the backlog")
	// Before its first park the worker admits to the work queue: at most
	// one chunk a slot, which start and park in turn.
	if held, backlog := b.streamMsgs(t, streams.Hold), b.streamMsgs(t, streams.Backlog); held > 2*window+slots || backlog < large-2*window-slots {
		t.Fatalf("with crm's breaker open: %d of a's chunks on the hold and %d in its backlog; want at most twice its window and a slot each, %d, on the hold and at least %d waiting",
			held, backlog, 2*window+slots, large-2*window-slots)
	}
	t.Logf("crm's breaker open: %d of a's chunks on the hold, %d in its backlog", b.streamMsgs(t, streams.Hold), b.streamMsgs(t, streams.Backlog))
	if n := crm.requests.Load(); n != 0 {
		t.Fatalf("crm got %d requests through an open breaker", n)
	}

	s := submitOutage(t, b, small)
	salvagetest.Eventually(t, time.Minute, func() bool {
		for c := 1; c <= small; c++ {
			if cp, _, err := b.stores.Parts()[0].Checkpoints.Get(b.ctx, s, c); err != nil || cp.Status != salvagetype.ChunkHeld {
				return false
			}
		}
		return true
	}, "job b's chunks to be held too")

	// crm is back: its cool-down ends now, the holder releases one held
	// chunk as the probe, whose call closes the breaker. The probe is a
	// chunk parked at its call to crm, not one its job's window admitted
	// onto the hold, which has not run yet.
	bucket, err := b.JS.KeyValue(b.ctx, kv.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := bucket.Watch(b.ctx, "crm", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Stop() }()
	if _, _, err := b.stores.Breakers.Mutate(b.ctx, "crm", "test", func(br *kv.Breaker) error {
		br.RetryAt = time.Now().UTC()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Every state the record passes through, in order: the half-open one
	// names the probe (the close clears it).
	var probe string
	for probe == "" {
		select {
		case e := <-watch.Updates():
			var br kv.Breaker
			if e != nil && json.Unmarshal(e.Value(), &br) == nil && br.State == salvagetype.BreakerHalfOpen {
				probe = br.Probe
			}
		case <-time.After(time.Minute):
			t.Fatal("no probe released within a minute of the cool-down's end")
		}
	}
	pj, pc, ok := kv.ParseChunkKey(probe)
	if !ok {
		t.Fatalf("probe %q is no chunk key", probe)
	}
	// Read before the probe's run can write: a chunk admitted onto the hold
	// has no checkpoint yet.
	if cp, _, err := b.stores.Parts()[0].Checkpoints.Get(b.ctx, pj, pc); err != nil || cp.Holds == 0 {
		t.Errorf("the probe, chunk %d of job %s, never ran to crm (%v, holds %d); want a chunk parked at its call", pc, pj, err, cp.Holds)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.breaker(t, "crm").State == salvagetype.BreakerClosed }, "the probe to close crm's breaker")
	for _, j := range []struct {
		id               string
		chunks           int
		heldMin, heldMax int
	}{{a, large, window, window + slots}, {s, small, small, small}} {
		got := b.waitJob(t, j.id, salvagetype.JobDone)
		if got.Summary.Done != j.chunks || got.Summary.DeadLetters != 0 {
			t.Fatalf("job %s: summary %+v; want %d done, no dead letters", j.id, got.Summary, j.chunks)
		}
		everHeld := 0
		for c := 1; c <= j.chunks; c++ {
			if b.checkpoint(t, j.id, c).Holds > 0 {
				everHeld++
			}
		}
		if everHeld < j.heldMin || everHeld > j.heldMax {
			t.Errorf("job %s: %d of its %d chunks were ever held; want %d to %d (those queued when the breaker was open, and what the slots let in before the first park)",
				j.id, everHeld, j.chunks, j.heldMin, j.heldMax)
		}
	}
	if got, want := crm.requests.Load(), int64(large+small); got != want {
		t.Fatalf("crm got %d requests; want one per chunk, %d", got, want)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Hold) == 0 && b.streamMsgs(t, streams.Backlog) == 0 },
		"SALVAGE_HOLD and SALVAGE_BACKLOG to be empty")
}
