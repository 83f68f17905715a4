package consumers_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/splitter"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// TestUpgradeToPoolsLosesNoChunk: a deployment provisioned before worker
// pools — one chunk consumer, `workers`, and one job consumer, `splitter`,
// for every pipeline — with chunks queued under the first (one of them
// taken by an old worker and never acked) and a job message queued under
// the second, is upgraded by a process that provisions the pools: the old
// consumers are gone, and every chunk of both jobs runs once.
func TestUpgradeToPoolsLosesNoChunk(t *testing.T) {
	t.Parallel()
	nb := salvagetest.StartServer(t)
	opts := streams.Options{AckWait: 2 * time.Second, MaxDeliver: 3, SplitterAckWait: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	if err := streams.Provision(ctx, nb.JS, opts); err != nil {
		t.Fatal(err)
	}
	stores, err := kv.Provision(ctx, nb.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{Server: nb, stores: stores, reg: mustRegistry(t), opts: opts, ctx: ctx, wg: &sync.WaitGroup{}}
	t.Cleanup(func() { cancel(); b.wg.Wait() })
	// Job A split (a splitter ran), its chunks not run yet.
	if err := provisionPipelines(ctx, nb.JS, b.reg.Names(), opts); err != nil {
		t.Fatal(err)
	}
	splitCtx, stopSplitting := context.WithCancel(ctx)
	sp, err := splitter.New(nb.JS, stores, splitter.Config{Registry: b.reg})
	if err != nil {
		t.Fatal(err)
	}
	split := make(chan error, 1)
	go func() { split <- sp.Run(splitCtx) }()
	jobA := b.submit(t, modeOK, modeOK, modeOK)
	b.waitJob(t, jobA, salvagetype.JobRunning)
	stopSplitting()
	<-split

	// The deployment as it was before pools: one consumer each.
	for _, c := range []struct{ stream, pool string }{{streams.Chunks, streams.Pipeline("test").Workers()}, {streams.Jobs, streams.Pipeline("test").Splitter()}} {
		if err := nb.JS.DeleteConsumer(ctx, c.stream, c.pool); err != nil {
			t.Fatal(err)
		}
	}
	legacy := streams.Pipeline("test").WorkersConfig(opts, 0)
	legacy.Durable, legacy.FilterSubject, legacy.Description = streams.LegacyWorkersConsumer, streams.ChunksAll, "the single chunk consumer"
	if _, err := nb.JS.CreateConsumer(ctx, streams.Chunks, legacy); err != nil {
		t.Fatal(err)
	}
	legacySplit := streams.Pipeline("test").SplitterConfig(opts)
	legacySplit.Durable, legacySplit.FilterSubject, legacySplit.Description = streams.LegacySplitterConsumer, "", "the single job consumer"
	if _, err := nb.JS.CreateConsumer(ctx, streams.Jobs, legacySplit); err != nil {
		t.Fatal(err)
	}
	jobB := b.submit(t, modeOK, modeOK)
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
	if err := provisionPipelines(ctx, nb.JS, b.reg.Names(), opts); err != nil {
		t.Fatal(err)
	}
	for stream, name := range map[string]string{streams.Chunks: streams.LegacyWorkersConsumer, streams.Jobs: streams.LegacySplitterConsumer} {
		if _, err := nb.JS.Consumer(ctx, stream, name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("the old %s consumer after the upgrade: %v", name, err)
		}
	}
	sp, err = splitter.New(nb.JS, stores, splitter.Config{Registry: b.reg})
	if err != nil {
		t.Fatal(err)
	}
	b.goRun(sp.Run)
	b.startDeadLetterer(t)
	b.startWorker(t, "upgraded")
	for job, chunks := range map[string]int{jobA: 3, jobB: 2} {
		b.waitJob(t, job, salvagetype.JobDone)
		for chunk := 1; chunk <= chunks; chunk++ {
			if n := callCount(job, chunk, 1); n != 1 {
				t.Errorf("chunk %d of %s ran stage 1 %d times, want once", chunk, job, n)
			}
		}
	}
	if n := len(b.dlq(t)); n != 0 {
		t.Fatalf("%d envelopes after the upgrade", n)
	}
}

// TestUpgradeKeepsRecoveringOldEnvelopes: an envelope published before
// worker pools (salvage.dlq.<category>.<job>.<chunk>, no pipeline token)
// under the single `recovery` consumer is still recovered after the
// upgrade: the old consumer is kept, narrowed to that shape, and the
// orchestrators work it beside their pools.
func TestUpgradeKeepsRecoveringOldEnvelopes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	legacy := streams.Pipeline("test").RecoveryConfig()
	legacy.Durable, legacy.FilterSubject, legacy.Description = streams.LegacyRecoveryConsumer, streams.DLQAll, "the single DLQ consumer"
	if _, err := b.JS.CreateConsumer(b.ctx, streams.DLQ, legacy); err != nil {
		t.Fatal(err)
	}
	job := "01JOLDENVELOPE000000000000"
	if err := b.stores.Jobs.Create(b.ctx, kv.Job{Job: salvagetype.Job{ID: job, Pipeline: "test", Status: salvagetype.JobRunning, Chunks: 1}}); err != nil {
		t.Fatal(err)
	}
	env := salvagetype.Envelope{ID: "01JOLDENVELOPE0000000000EN", Job: job, Chunk: 1, Pipeline: "test",
		Category: salvagetype.CategoryUnrecoverable, Strategy: salvagetype.StrategyDeadEnd, CreatedAt: time.Now().UTC(),
		CompletedEntries: []string{}, InFlightEntries: []string{}, PendingCompensations: []string{},
		Original: salvagetype.OriginalMessage{Stream: streams.Chunks, Subject: streams.ChunkRef{Pipeline: "test", Job: job, Chunk: 1}.Subject(), Data: json.RawMessage(`{"job_id":"` + job + `","chunk":1,"pipeline":"test"}`)}}
	data, _ := json.Marshal(env)
	ack, err := b.JS.Publish(b.ctx, "salvage.dlq."+string(env.Category)+"."+job+".1", data)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.stores.Envelopes.Put(b.ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: env.ID, Job: job, Chunk: 1, Category: env.Category, Strategy: env.Strategy, Status: salvagetype.EnvelopeOpen, DLQSeq: ack.Sequence}}); err != nil {
		t.Fatal(err)
	}
	// The upgrade.
	if err := provisionPipelines(b.ctx, b.JS, b.reg.Names(), b.opts); err != nil {
		t.Fatal(err)
	}
	c, err := b.JS.Consumer(b.ctx, streams.DLQ, streams.LegacyRecoveryConsumer)
	if err != nil || c.CachedInfo().Config.FilterSubject != streams.DLQLegacy {
		t.Fatalf("the old DLQ consumer after the upgrade: %v, %v", c, err)
	}
	b.startOrchestrator(t, "upgraded")
	salvagetest.Eventually(t, time.Minute, func() bool {
		rec, _, err := b.stores.Envelopes.Get(b.ctx, env.ID)
		return err == nil && rec.Status == salvagetype.EnvelopeDeadEnd
	}, "the old envelope to be recovered")
}
