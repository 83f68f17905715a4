package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestJournalRowsNobodyWaitsForShareAFlush: rows written with PutAsync
// and not yet waited for wait for each other — a process running one chunk
// writes a stage's calls in one flush, not a write each (issue 35) — and
// are flushed at once when someone waits, when a batch's worth is queued,
// or after the linger.
func TestJournalRowsNobodyWaitsForShareAFlush(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := setup(t)
	// A linger longer than the test: only a wait or a full batch flushes.
	st.Journal.Configure(kv.JournalConfig{Linger: time.Hour})

	var waits []func(context.Context) (uint64, error)
	for i := range 5 {
		wait, err := st.Journal.PutAsync(row("L", 1, i+1, kv.CallSucceeded), 0)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, wait)
	}
	if batches, rows := st.Journal.Stats(); batches != 0 || rows != 0 {
		t.Fatalf("%d rows flushed in %d batches before anyone waited, want none", rows, batches)
	}
	// Waiting for the last row flushes all five, in one flush.
	if _, err := waits[4](ctx); err != nil {
		t.Fatal(err)
	}
	for _, wait := range waits {
		if seq, err := wait(ctx); err != nil || seq == 0 {
			t.Fatalf("row: %d, %v", seq, err)
		}
	}
	if batches, rows := st.Journal.Stats(); batches != 1 || rows != 5 {
		t.Fatalf("%d rows in %d flushes, want 5 in 1", rows, batches)
	}

	// A batch's worth is flushed with nobody waiting.
	for i := range 16 {
		if _, err := st.Journal.PutAsync(row("L", 2, i+1, kv.CallSucceeded), 0); err != nil {
			t.Fatal(err)
		}
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		rows, err := st.Journal.Load(ctx, "L", 2, 0)
		return err == nil && len(rows) == 16
	}, "16 queued rows flushed without a wait")
	if batches, rows := st.Journal.Stats(); batches != 2 || rows != 21 {
		t.Fatalf("%d rows in %d flushes, want 21 in 2", rows, batches)
	}
}

// TestJournalLingerEnds: a row nobody ever waits for is durable after the
// linger.
func TestJournalLingerEnds(t *testing.T) {
	t.Parallel()
	st := setup(t)
	st.Journal.Configure(kv.JournalConfig{Linger: 20 * time.Millisecond})
	if _, err := st.Journal.PutAsync(row("L", 3, 1, kv.CallSucceeded), 0); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		got, err := st.Journal.Get(t.Context(), kv.JournalKey("L", 3, 0, 1, "agent", 1))
		return err == nil && got.Status == kv.CallSucceeded
	}, "the row nobody waited for is written")
}
