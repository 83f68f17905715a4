package contractreview_test

import (
	"context"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
)

// BenchmarkWorkers pushes 100-chunk contract-review jobs through a
// salvage.Client — the real splitter, workers, KV stores and journal — on
// the zero-latency model and reports chunks and model calls per second,
// under each sync_interval.
func BenchmarkWorkers(b *testing.B) {
	for _, si := range []time.Duration{natsconf.SyncAlways, 0} {
		b.Run("sync_interval="+natsconf.SyncIntervalString(si), func(b *testing.B) {
			benchWorkers(b, si, 100)
		})
	}
}

func benchWorkers(b *testing.B, si time.Duration, chunks int) {
	model, err := simmodel.New(simmodel.Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	mode := salvage.JournalPipelined
	if si == natsconf.SyncAlways {
		mode = salvage.JournalAtomic
	}
	c := salvagetest.StartServer(b, salvagetest.WithSyncInterval(si)).Client(b, &salvage.Config{
		Pipelines: []*salvage.Pipeline{contractreview.New(model.Tool("model"))}, Roles: []salvage.Role{salvage.RoleWorker, salvage.RoleDeadLetter},
		Concurrency: 16, Retries: -1, JournalWrites: mode,
	})
	ctx := context.Background()
	input := contractreview.Input{Text: contractreview.Contract(chunks, 1)}
	b.ResetTimer()
	start := time.Now()
	calls := 0
	for range b.N {
		id, err := c.JobSubmit(ctx, contractreview.Name, input, nil)
		if err != nil {
			b.Fatal(err)
		}
		if j := salvagetest.WaitJob(b, c, id, 5*time.Minute); j.Status != salvage.JobDone {
			b.Fatalf("job %s ended %s", id, j.Status)
		}
		st, err := c.ChunkList(ctx, id, &salvage.Page{Limit: chunks})
		if err != nil {
			b.Fatal(err)
		}
		for _, ch := range st.Chunks {
			calls += ch.Calls
		}
	}
	secs := time.Since(start).Seconds()
	b.ReportMetric(float64(chunks*b.N)/secs, "chunks/s")
	b.ReportMetric(float64(calls)/secs, "calls/s")
	flushes, rows := c.JournalStats()
	b.ReportMetric(float64(rows)/float64(max(flushes, 1)), "rows/flush")
	b.ReportMetric(0, "ns/op")
	if calls != chunks*b.N*contractreview.CallsPerChunk {
		b.Fatalf("%d calls, want %d", calls, chunks*b.N*contractreview.CallsPerChunk)
	}
}
