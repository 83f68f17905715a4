package kv_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// TestJournalWritesOutliveAServerRestart: rows written by eight writers
// while the server restarts under them all land, each at the sequence
// its write returned, in both write modes. A write the restart cut off
// failed ("nats: server is disconnected"): an optional stage was skipped
// for it, and the run counted a call its journal did not hold.
func TestJournalWritesOutliveAServerRestart(t *testing.T) {
	t.Parallel()
	for _, atomicWrites := range []bool{true, false} {
		t.Run(fmt.Sprintf("atomic=%v", atomicWrites), func(t *testing.T) {
			t.Parallel()
			b := salvagetest.StartServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := streams.Provision(ctx, b.JS, streams.Options{}); err != nil {
				t.Fatal(err)
			}
			st, err := kv.Provision(ctx, b.JS, kv.Options{})
			if err != nil {
				t.Fatal(err)
			}
			st.Parts()[0].Journal.Configure(kv.JournalConfig{Atomic: &atomicWrites})

			const writers = 8
			var (
				written  atomic.Int64
				restarts atomic.Int64
				wg       sync.WaitGroup
				mu       sync.Mutex
				failed   []error
				seqs     = map[string]uint64{}
			)
			for w := range writers {
				wg.Go(func() {
					// Each writer goes on until 40 of its rows landed after
					// the restart.
					after := 0
					for i := 1; after < 40; i++ {
						r := row(fmt.Sprintf("W%d", w), 1, i, salvagetype.CallInitiated)
						r.StartedAt = time.Now().UTC()
						wait, err := st.Parts()[0].Journal.PutAsync(r, 0)
						var seq uint64
						if err == nil {
							seq, err = wait(ctx)
						}
						mu.Lock()
						if err != nil {
							failed = append(failed, fmt.Errorf("row %s: %w", r.Key, err))
						} else {
							seqs[r.Key] = seq
						}
						mu.Unlock()
						if err != nil && ctx.Err() != nil {
							return
						}
						written.Add(1)
						if restarts.Load() > 0 {
							after++
						}
					}
				})
			}
			salvagetest.Eventually(t, time.Minute, func() bool { return written.Load() >= 100 }, "100 rows before the restart")
			b.Restart(t)
			restarts.Add(1)
			wg.Wait()
			for _, err := range failed {
				t.Error(err)
			}
			if t.Failed() {
				return
			}
			for key, seq := range seqs {
				got, err := st.Parts()[0].Journal.Get(ctx, key)
				if err != nil || got.Seq != seq {
					t.Fatalf("row %s at %d, %v; its write returned %d", key, got.Seq, err, seq)
				}
			}
			t.Logf("%d rows, the server restarted under them", len(seqs))
		})
	}
}
