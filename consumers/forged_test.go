package consumers_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
