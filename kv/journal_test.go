package kv_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

func row(job string, chunk, seq int, status salvagetype.CallStatus) kv.JournalRow {
	return kv.JournalRow{Call: salvagetype.Call{Key: kv.JournalKey(job, chunk, 0, 1, "agent", seq), Job: job, Chunk: chunk, Stage: 1, Agent: "agent", Seq: seq, Tool: "charge", Status: status, IdempotencyKey: kv.IdempotencyKey(job, chunk, 0, 1, "agent", seq)}}
}

func TestJournalPutNeverOverwritesBlindly(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	seq, err := st.Parts()[0].Journal.Put(ctx, row("J", 1, 1, salvagetype.CallInitiated), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Parts()[0].Journal.Put(ctx, row("J", 1, 1, salvagetype.CallInitiated), 0); !errors.Is(err, kv.ErrJournalConflict) {
		t.Fatalf("second create: %v, want ErrJournalConflict", err)
	}
	if _, err := st.Parts()[0].Journal.Put(ctx, row("J", 1, 1, salvagetype.CallSucceeded), seq); err != nil {
		t.Fatalf("update at the seen sequence: %v", err)
	}
	if _, err := st.Parts()[0].Journal.Put(ctx, row("J", 1, 1, salvagetype.CallFailed), seq); !errors.Is(err, kv.ErrJournalConflict) {
		t.Fatalf("stale update: %v", err)
	}
	got, err := st.Parts()[0].Journal.Get(ctx, kv.JournalKey("J", 1, 0, 1, "agent", 1))
	if err != nil || got.Status != salvagetype.CallSucceeded {
		t.Fatalf("row = %+v, %v", got, err)
	}
}

func TestJournalGroupCommitsConcurrentWrites(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := row("J", 1+i%4, i, salvagetype.CallInitiated)
			seq, err := st.Parts()[0].Journal.Put(ctx, r, 0)
			if err == nil {
				r.Status = salvagetype.CallSucceeded
				_, err = st.Parts()[0].Journal.Put(ctx, r, seq)
			}
			errs <- err
		}()
	}
	// One conflicting write rides along: only it may fail.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := st.Parts()[0].Journal.Put(ctx, row("J", 1, 0, salvagetype.CallInitiated), 12345); !errors.Is(err, kv.ErrJournalConflict) {
			errs <- fmt.Errorf("conflicting write: %v", err)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	batches, rows := st.Parts()[0].Journal.Stats()
	if rows < 2*n || batches >= rows {
		t.Fatalf("%d rows in %d flushes: no coalescing", rows, batches)
	}
	t.Logf("%d rows in %d flushes", rows, batches)
	loaded, err := st.Parts()[0].Journal.Load(ctx, "J", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != n/4 {
		t.Fatalf("Load found %d rows of chunk 1, want %d", len(loaded), n/4)
	}
	for k, r := range loaded {
		if r.Status != salvagetype.CallSucceeded || r.Key != k || r.Seq == 0 {
			t.Fatalf("row %s = %+v", k, r)
		}
	}
}

// TestJournalLoadBeyondOneBatch: more keys than the server serves in one
// multi-last direct get still load, key by key.
func TestJournalLoadBeyondOneBatch(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	const n = 1500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.Parts()[0].Journal.Put(ctx, row("BIG", 1, i+1, salvagetype.CallSucceeded), 0)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Parts()[0].Journal.Put(ctx, row("BIG", 2, 1, salvagetype.CallSucceeded), 0); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Parts()[0].Journal.Load(ctx, "BIG", 1, 0)
	if err != nil || len(rows) != n {
		t.Fatalf("Load: %d rows, %v; want %d", len(rows), err, n)
	}
	all, err := st.Parts()[0].Journal.LoadJob(ctx, "BIG", 2)
	if err != nil || len(all) != n+1 {
		t.Fatalf("LoadJob: %d rows, %v; want %d", len(all), err, n+1)
	}
}

// TestJournalRowsCarryTheTrace: a row's message carries the W3C
// traceparent of its job's trace.
func TestJournalRowsCarryTheTrace(t *testing.T) {
	t.Parallel()
	b, st := provisioned(t)
	ctx := context.Background()
	r := row("T", 1, 1, salvagetype.CallInitiated)
	r.TraceID = streams.DeriveTraceID("T")
	seq, err := st.Parts()[0].Journal.Put(ctx, r, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := b.JS.Stream(ctx, "KV_"+kv.BucketJournal)
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := streams.ParseTraceParent(m.Header.Get(salvagetype.HeaderTraceParent)); !ok || id != r.TraceID {
		t.Fatalf("traceparent %q, want trace %s", m.Header.Get(salvagetype.HeaderTraceParent), r.TraceID)
	}
}

// TestRetentionRewritesAreMarked: a row retention writes again says so
// (retention_rewrite), taking its TTL back says so too, and the next
// write through the journal — a call's new outcome — never does.
func TestRetentionRewritesAreMarked(t *testing.T) {
	t.Parallel()
	_, st := provisioned(t)
	ctx := context.Background()
	r := row("R", 1, 1, salvagetype.CallSucceeded)
	if _, err := st.Parts()[0].Journal.Put(ctx, r, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Parts()[0].Journal.Retire(ctx, "R", 1, kv.RowRetention{Calls: time.Hour, Effects: time.Hour}); err != nil || got.Kept != 1 {
		t.Fatalf("Retire = %+v, %v; want 1 kept", got, err)
	}
	kept, err := st.Parts()[0].Journal.Get(ctx, r.Key)
	if err != nil || !kept.RetentionRewrite || kept.Status != salvagetype.CallSucceeded {
		t.Fatalf("retired row = %+v, %v; want SUCCEEDED, marked a retention rewrite", kept.JournalRow, err)
	}
	if n, err := st.Parts()[0].Journal.Unretire(ctx, "R", 1); err != nil || n != 1 {
		t.Fatalf("Unretire = %d, %v; want 1", n, err)
	}
	back, err := st.Parts()[0].Journal.Get(ctx, r.Key)
	if err != nil || !back.RetentionRewrite {
		t.Fatalf("unretired row = %+v, %v; want marked a retention rewrite", back.JournalRow, err)
	}
	again := back.JournalRow
	again.Status = salvagetype.CallFailed
	if _, err := st.Parts()[0].Journal.Put(ctx, again, back.Seq); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Parts()[0].Journal.Get(ctx, r.Key); err != nil || got.RetentionRewrite || got.Status != salvagetype.CallFailed {
		t.Fatalf("row written again = %+v, %v; want FAILED, not marked", got.JournalRow, err)
	}
}

// provisioned starts a server and provisions Salvage's stores on it.
func provisioned(t *testing.T) (*salvagetest.Server, *kv.Stores) {
	t.Helper()
	b := salvagetest.StartServer(t)
	st, err := kv.Provision(context.Background(), b.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, st
}
