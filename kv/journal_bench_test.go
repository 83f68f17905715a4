package kv_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
)

const benchConcurrency = 64

// BenchmarkJournal measures journaled calls per second (two durable rows
// per call, INITIATED then SUCCEEDED, as a call with a side effect writes
// them) at 64 concurrent calls, and in the
// same run the raw JetStream floor: synchronous publishes at the same
// concurrency. ratio = journaled calls/s over floor publishes/s.
func BenchmarkJournal(b *testing.B) {
	for _, si := range []time.Duration{natsconf.SyncAlways, 0} {
		for _, atomicBatch := range []bool{true, false} {
			name := fmt.Sprintf("sync_interval=%s/atomic=%v", natsconf.SyncIntervalString(si), atomicBatch)
			b.Run(name, func(b *testing.B) { benchJournal(b, si, atomicBatch) })
		}
	}
}

func benchJournal(b *testing.B, si time.Duration, atomicBatch bool) {
	nb := salvagetest.StartServer(b, salvagetest.WithSyncInterval(si))
	ctx := context.Background()
	st, err := kv.Provision(ctx, nb.JS, kv.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st.Parts()[0].Journal.Configure(kv.JournalConfig{Atomic: &atomicBatch})
	if _, err := nb.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"}}); err != nil {
		b.Fatal(err)
	}
	const calls = 4000
	payload := make([]byte, 64)
	b.ResetTimer()
	var journalSecs, floorSecs float64
	for range b.N {
		// As the executor does: a call waits for its INITIATED row; its
		// SUCCEEDED row is waited for at the end of the stage.
		var mu sync.Mutex
		var waits []func(context.Context) (uint64, error)
		journalSecs += parallel(b, calls, func(i int) error {
			r := kv.JournalRow{Call: salvagetype.Call{Key: kv.JournalKey("B", i%50, 0, 1, "a", i), Tool: "t", Status: salvagetype.CallInitiated}}
			seq, err := st.Parts()[0].Journal.Put(ctx, r, 0)
			if err != nil {
				return err
			}
			r.Status = salvagetype.CallSucceeded
			wait, err := st.Parts()[0].Journal.PutAsync(r, seq)
			if err != nil {
				return err
			}
			mu.Lock()
			waits = append(waits, wait)
			mu.Unlock()
			return nil
		}, func() error {
			for _, w := range waits {
				if _, err := w(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		_ = nb.JS.DeleteStream(ctx, "KV_"+kv.BucketJournal)
		if _, err := kv.Provision(ctx, nb.JS, kv.Options{}); err != nil {
			b.Fatal(err)
		}
		floorSecs += parallel(b, calls, func(i int) error {
			_, err := nb.JS.Publish(ctx, fmt.Sprintf("floor.%d", i%50), payload)
			return err
		}, nil)
	}
	callsPerSec := float64(calls*b.N) / journalSecs
	floorPerSec := float64(calls*b.N) / floorSecs
	batches, rows := st.Parts()[0].Journal.Stats()
	b.ReportMetric(callsPerSec, "calls/s")
	b.ReportMetric(floorPerSec, "floor_pubs/s")
	b.ReportMetric(callsPerSec/floorPerSec, "ratio")
	b.ReportMetric(float64(rows)/float64(max(batches, 1)), "rows/flush")
	b.ReportMetric(0, "ns/op")
}

// parallel runs n operations on benchConcurrency goroutines, then done
// (if any), and returns the seconds it all took.
func parallel(b *testing.B, n int, op func(i int) error, done func() error) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if done != nil {
		if err := done(); err != nil {
			b.Error(err)
		}
	}
	return time.Since(start).Seconds()
}
