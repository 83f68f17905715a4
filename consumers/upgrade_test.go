package consumers_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/streams"
)

// TestUpgradeToPoolsLosesNoChunk: a deployment provisioned before worker
// pools — one chunk consumer, `workers`, for every pipeline — with chunks
// queued under it, one of them taken by an old worker and never acked,
// is upgraded by a process that provisions the pools: the old consumer is
// gone, and every chunk runs once in the new pool.
func TestUpgradeToPoolsLosesNoChunk(t *testing.T) {
	nb := salvagetest.StartServer(t)
	opts := streams.Options{AckWait: 2 * time.Second, MaxDeliver: 3, SplitterAckWait: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	if err := streams.Provision(ctx, nb.JS, opts); err != nil {
		t.Fatal(err)
	}
	// The deployment as it was.
	legacy := streams.WorkersConfig(opts, "test")
	legacy.Durable, legacy.FilterSubject, legacy.Description = streams.LegacyWorkersConsumer, streams.ChunksAll, "the single chunk consumer"
	if _, err := nb.JS.CreateConsumer(ctx, streams.Chunks, legacy); err != nil {
		t.Fatal(err)
	}
	stores, err := kv.Provision(ctx, nb.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{Server: nb, stores: stores, reg: mustRegistry(t), opts: opts, ctx: ctx, wg: &sync.WaitGroup{}}
	t.Cleanup(func() { cancel(); b.wg.Wait() })
	sp, err := consumers.NewSplitter(nb.JS, stores, consumers.SplitterConfig{Registry: b.reg})
	if err != nil {
		t.Fatal(err)
	}
	b.goRun(sp.Run)
	job := b.submit(t, modeOK, modeOK, modeOK)
	b.waitJob(t, job, kv.JobRunning)
	if n := b.streamMsgs(t, streams.Chunks); n != 3 {
		t.Fatalf("%d chunks queued, want 3", n)
	}
	// An old worker took one under the old consumer and never acked it.
	old, err := nb.JS.Consumer(ctx, streams.Chunks, streams.LegacyWorkersConsumer)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := old.FetchNoWait(1)
	if err != nil {
		t.Fatal(err)
	}
	taken := 0
	for range batch.Messages() {
		taken++
	}
	if taken != 1 {
		t.Fatalf("the old worker took %d chunks, want 1", taken)
	}

	// The upgrade: a new process provisions its pools and runs.
	if err := streams.ProvisionPipelines(ctx, nb.JS, b.reg.Names(), opts); err != nil {
		t.Fatal(err)
	}
	if _, err := nb.JS.Consumer(ctx, streams.Chunks, streams.LegacyWorkersConsumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the old consumer after the upgrade: %v", err)
	}
	b.startDeadLetterer(t)
	b.startWorker(t, "upgraded")
	b.waitJob(t, job, kv.JobDone)
	for chunk := 1; chunk <= 3; chunk++ {
		if n := callCount(job, chunk, 1); n != 1 {
			t.Errorf("chunk %d ran stage 1 %d times, want once", chunk, n)
		}
	}
	if n := len(b.dlq(t)); n != 0 {
		t.Fatalf("%d envelopes after the upgrade", n)
	}
}
