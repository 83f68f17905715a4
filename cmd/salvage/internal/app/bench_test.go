package app_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/cmd/salvage/internal/app"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/natsconf/natstest"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/streams"
)

// BenchmarkWorkers pushes contract-review jobs through the real splitter,
// workers and KV stores on the zero-latency model and reports chunks and
// model calls per second, under each sync_interval.
func BenchmarkWorkers(b *testing.B) {
	for _, si := range []time.Duration{natsconf.SyncAlways, 0} {
		b.Run("sync_interval="+natsconf.SyncIntervalString(si), func(b *testing.B) {
			benchWorkers(b, si, 100)
		})
	}
}

func benchWorkers(b *testing.B, si time.Duration, chunks int) {
	nb := natstest.Start(b, natstest.WithSyncInterval(si))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := app.Config{Roles: []string{app.RoleWorker, app.RoleDeadLetter}, Concurrency: 16, Logger: zerolog.Nop(), Retry: recovery.RetryPolicy{MaxRetries: -1},
		JournalWrites: app.JournalMode(si == natsconf.SyncAlways)}
	stores, err := app.Provision(ctx, nb.JS, cfg)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = app.Run(ctx, nb.JS, stores, cfg, nil) }()
	defer func() { cancel(); wg.Wait() }()

	text := contractreview.Contract(chunks, 1)
	in, _ := json.Marshal(map[string]any{"input": contractreview.Input{Text: text}})
	b.ResetTimer()
	start := time.Now()
	var calls int
	for range b.N {
		id := ulid.Make().String()
		m := nats.NewMsg(streams.JobSubject(contractreview.Name))
		m.Header.Set(streams.HeaderMsgID, id)
		m.Data = in
		if _, err := nb.JS.PublishMsg(ctx, m); err != nil {
			b.Fatal(err)
		}
		for {
			j, err := stores.Jobs.Get(ctx, id)
			if err == nil && j.Finished() {
				if j.Status != kv.JobDone {
					b.Fatalf("job %s ended %s", id, j.Status)
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cps, err := stores.Checkpoints.ForJob(ctx, id, chunks)
		if err != nil {
			b.Fatal(err)
		}
		for _, cp := range cps {
			calls += cp.Calls
		}
	}
	secs := time.Since(start).Seconds()
	b.ReportMetric(float64(chunks*b.N)/secs, "chunks/s")
	b.ReportMetric(float64(calls)/secs, "calls/s")
	batches, rows := stores.Journal.Stats()
	b.ReportMetric(float64(rows)/float64(max(batches, 1)), "rows/flush")
	b.ReportMetric(0, "ns/op")
	if calls != chunks*b.N*contractreview.CallsPerChunk {
		b.Fatalf("%d calls, want %d", calls, chunks*b.N*contractreview.CallsPerChunk)
	}
}
