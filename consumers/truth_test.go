package consumers_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/salvagehq/salvage/consumers"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/streams"
)

// TestForgedChunkChangesNothing is the forged chunk of issue 33: while a
// job's pipeline is paused, someone allowed on salvage.chunks.> publishes
// chunk 2 with the job's id, source and trace and another order. After the
// resume the shop's ledger holds effects only for the orders that were
// split, the forged message was rejected as bad-chunk, and the real chunk
// 2 ran once.
func TestForgedChunkChangesNothing(t *testing.T) {
	t.Parallel()
	b, s := setupShop(t)
	rejected := b.subscribe(t, streams.RejectedSubject(streams.RejectBadChunk))
	b.pauseShop(t, true)
	job := b.submitOrders(t, shopOrder{ID: "real-1"}, shopOrder{ID: "real-2"}, shopOrder{ID: "real-3"})
	j := b.waitJob(t, job, kv.JobRunning)
	if j.ChunksRoot == "" {
		t.Fatal("the job records no chunks_root")
	}

	// The forger copies everything it can see but the input.
	forged := streams.ChunkMsg{Job: job, Chunk: 2, Pipeline: shopPipeline, TraceID: j.TraceID, SourceSeq: j.SourceSeq,
		Input: json.RawMessage(`{"id":"mallory"}`)}
	// ... and a proof lifted from chunk 1's would-be sibling does not help:
	// any proof leads to another root.
	forged.Proof = strings.Repeat("A", 43)
	data, _ := json.Marshal(forged)
	m := nats.NewMsg(streams.ChunkSubject(shopPipeline, job, 2))
	m.Data = data
	if _, err := b.JS.PublishMsg(b.ctx, m); err != nil {
		t.Fatal(err)
	}
	b.pauseShop(t, false)
	b.waitJob(t, job, kv.JobDone)

	for _, tool := range []string{"reserve", "charge", "ship"} {
		for key, id := range s.applied(tool) {
			if strings.Contains(id, "mallory") {
				t.Errorf("%s applied for the forged order (key %s)", tool, key)
			}
		}
		if n := len(s.applied(tool)); n != 3 {
			t.Errorf("%d %s effects; want one per real order", n, tool)
		}
	}
	salvagetest.Eventually(t, 30*time.Second, func() bool {
		for _, ev := range rejected() {
			var r streams.Rejection
			if json.Unmarshal(ev.Data, &r) == nil && r.JobID == job && r.Subject == m.Subject {
				return true
			}
		}
		return false
	}, "a bad-chunk rejection of the forged chunk 2")
	if cp := b.checkpoint(t, job, 2); cp.Status != kv.StatusDone || cp.Deliveries != 1 {
		t.Errorf("chunk 2: %s after %d deliveries; want done once", cp.Status, cp.Deliveries)
	}
	// Nothing was left behind: the rejection is the forged message's end.
	if n := b.streamMsgs(t, streams.Chunks); n != 0 {
		t.Errorf("%d messages left on SALVAGE_CHUNKS", n)
	}
}

// TestPurgedDLQStrandsNothing is the purged DLQ of issue 33: with no
// orchestrator running, an order refused at shipping leaves its envelope
// open with a reservation and a charge standing; SALVAGE_DLQ is purged.
// The envelope still shows (from its record's body), and an orchestrator
// started afterwards finds it on its own, publishes it again and settles
// it: both effects compensated, the envelope abandoned.
func TestPurgedDLQStrandsNothing(t *testing.T) {
	t.Parallel()
	b, s := setupShop(t)
	job := b.submitOrders(t, shopOrder{ID: "kept"}, shopOrder{ID: "refused", Fail: true})
	b.waitJob(t, job, kv.JobIncomplete)
	rec := b.envelopeOf(t, job, 2, func(r kv.EnvelopeRecord) bool { return r.Status == kv.EnvelopeOpen }, "open")

	str, err := b.JS.Stream(b.ctx, streams.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	if err := str.Purge(b.ctx); err != nil {
		t.Fatal(err)
	}
	op := consumers.NewOperator(b.JS, b.stores)
	d, err := op.Show(b.ctx, rec.ID)
	if err != nil || d.Envelope.ID != rec.ID || len(d.Envelope.Original.Data) == 0 {
		t.Fatalf("show after the purge: %+v, %v", d.Envelope, err)
	}

	o, err := consumers.NewOrchestrator(b.JS, b.stores, consumers.OrchestratorConfig{ID: "o1", Registry: b.reg, Retry: testRetry, RestoreInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.goRun(o.Run)
	final := b.envelopeOf(t, job, 2, func(r kv.EnvelopeRecord) bool { return r.Final() }, "final")
	if final.Status != kv.EnvelopeAbandoned || final.DLQSeq == rec.DLQSeq {
		t.Fatalf("envelope after the purge: %s at SALVAGE_DLQ %d (was %d); want abandoned from a new message", final.Status, final.DLQSeq, rec.DLQSeq)
	}
	s.mu.Lock()
	undone := append([]string(nil), s.undone...)
	s.mu.Unlock()
	if len(undone) != 2 || !strings.HasPrefix(undone[0], "refund:") || !strings.HasPrefix(undone[1], "release:") {
		t.Fatalf("compensations = %v; want the refused order's refund, then its release", undone)
	}
	if d, err := op.Show(b.ctx, rec.ID); err != nil || d.Envelope.ID != rec.ID {
		t.Fatalf("show after the restore: %+v, %v", d.Envelope, err)
	}
	if envs := b.dlq(t); len(envs) != 1 || envs[0].ID != rec.ID {
		t.Fatalf("SALVAGE_DLQ holds %d envelopes; want the restored one", len(envs))
	}
}

// TestClaimsNoHolderWroteHoldNothing are the forged and the garbage claim
// of issue 33. A claim written by hand with an expiry in 2099 on a queued
// chunk holds it one lease past its write at most (it held the chunk until
// the job was cancelled); a value that is not a claim on a queued chunk is
// replaced at once; and one written over a running chunk's claim is taken
// back by its holder at the next renewal: the chunk finishes on its first
// delivery with no envelope (it was dead-lettered as "worker stopped
// without a result").
func TestClaimsNoHolderWroteHoldNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	claims, err := b.JS.KeyValue(b.ctx, kv.BucketClaims)
	if err != nil {
		t.Fatal(err)
	}
	// Before any worker runs: two queued jobs of one chunk each, one
	// with a forged claim, one with garbage.
	forged := b.submit(t, modeOK)
	garbage := b.submit(t, modeOK)
	b.waitJob(t, forged, kv.JobRunning)
	b.waitJob(t, garbage, kv.JobRunning)
	ghost := `{"claimed_by":"ghost","delivery":1,"claimed_at":"2026-01-01T00:00:00Z","expires_at":"2099-01-01T00:00:00Z"}`
	if _, err := claims.Put(b.ctx, kv.ChunkKey(forged, 1), []byte(ghost)); err != nil {
		t.Fatal(err)
	}
	if _, err := claims.Put(b.ctx, kv.ChunkKey(garbage, 1), []byte("not a claim")); err != nil {
		t.Fatal(err)
	}
	b.startWorker(t, "w1")
	b.waitJob(t, forged, kv.JobDone)
	b.waitJob(t, garbage, kv.JobDone)

	// A running chunk whose claim is overwritten with garbage.
	running := b.submit(t, modeGate)
	key := kv.ChunkKey(running, 1)
	salvagetest.Eventually(t, 30*time.Second, func() bool { return callCount(running, 1, 2) > 0 }, "chunk 1 to reach stage 2")
	if _, err := claims.Put(b.ctx, key, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, 30*time.Second, func() bool {
		l, err := b.stores.Claims.Get(b.ctx, running, 1)
		return err == nil && l.Unreadable == "" && l.ClaimedBy == "w1"
	}, "the holder to take its claim back")
	close(gate(running, 1))
	b.waitJob(t, running, kv.JobDone)
	if cp := b.checkpoint(t, running, 1); cp.Deliveries != 1 || cp.Redeliveries != 0 {
		t.Fatalf("the running chunk: %d deliveries, %d redeliveries; want its first delivery to finish it", cp.Deliveries, cp.Redeliveries)
	}
	if envs := b.dlq(t); len(envs) != 0 {
		t.Fatalf("%d envelopes; want none", len(envs))
	}
}
