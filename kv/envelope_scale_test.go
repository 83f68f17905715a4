//go:build !race

// The scale tests: what holds at a volume, not under concurrency. They
// build without the race detector, which made seeding 100,000 records
// cost 37 CPU-seconds instead of 6; the race detector checks the same
// code in the package's other tests. make test runs them in a go test
// without -race beside the suite (SCALE_TESTS in the Makefile); go test
// ./kv runs them too.

package kv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// seedEnvelopes writes records from..to (and their index entries) the
// way Put would, pipelined (a window of seedWindow records at a time,
// under the client's limit of outstanding async publishes): the scale
// test's fixture.
func seedEnvelopes(t *testing.T, js jetstream.JetStream, from, to int) {
	t.Helper()
	const seedWindow = 500
	statuses := []salvagetype.EnvelopeStatus{salvagetype.EnvelopeDeadEnd, salvagetype.EnvelopeResolved, salvagetype.EnvelopeAbandoned, salvagetype.EnvelopeSuperseded, salvagetype.EnvelopeOpen}
	drain := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			t.Fatal("seeding stalled")
		}
	}
	for i := from; i < to; i++ {
		r := kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: fmt.Sprintf("01JENV%020d", i), Job: fmt.Sprintf("job%d", i/100), Chunk: i % 100, Category: "TOOL_TIMEOUT", Status: statuses[i%len(statuses)], CreatedAt: time.Now()}}
		// The entries' sequences are known before they are written:
		// nothing else writes SALVAGE_INDEX here.
		r.IndexSeq, r.JobIndexSeq = uint64(2*i+1), uint64(2*i+2)
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []struct {
			subj string
			data []byte
		}{{kv.IndexEnvelope(r.Status, r.Category), []byte(r.ID)}, {kv.IndexJobEnvelopes(r.Job), []byte(r.ID)},
			{"$KV." + kv.BucketEnvelopes + "." + r.ID, data}} {
			if _, err := js.PublishAsync(m.subj, m.data); err != nil {
				t.Fatal(err)
			}
		}
		if i%seedWindow == seedWindow-1 {
			drain()
		}
	}
	drain()
}

// pageBytes is how many bytes one page brings to the client: all it can
// hold. (The embedded server allocates in this process too, so the
// client's heap cannot be told apart from the server's.)
func pageBytes(t *testing.T, nc *nats.Conn, st *kv.Stores, f kv.IndexFilter, offset int) (uint64, kv.EnvelopePage) {
	t.Helper()
	before := nc.Stats()
	pg, err := st.Envelopes.Page(context.Background(), f, 0, offset, 100, true)
	if err != nil {
		t.Fatal(err)
	}
	return nc.Stats().InBytes - before.InBytes, pg
}

// TestEnvelopeListingStaysFlatAt100000: a page of 100 newest-first records
// out of 100,000, at the start, the middle and the end, by status and by
// job, is the right one and brings the client what a page out of 1,000
// does: the listing reads the index, never every record. (The time a
// page takes is a benchmark's figure: salvage bench's listing row.)
func TestEnvelopeListingStaysFlatAt100000(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 100,000 records")
	}
	t.Parallel()
	b := salvagetest.StartServer(t, salvagetest.WithSyncInterval(time.Minute))
	if err := streams.Provision(context.Background(), b.JS, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Provision(context.Background(), b.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	seedEnvelopes(t, b.JS, 0, 1000)
	small, _ := pageBytes(t, b.Conn, st, kv.IndexFilter{}, 500)
	seedEnvelopes(t, b.JS, 1000, 100_000)
	for _, tc := range []struct {
		f      kv.IndexFilter
		offset int
		total  int
		first  int // the index of the newest record on the page
	}{
		{kv.IndexFilter{}, 0, 100_000, 99_999},
		{kv.IndexFilter{}, 50_000, 100_000, 49_999},
		{kv.IndexFilter{}, 99_950, 100_000, 49},
		{kv.IndexFilter{Status: salvagetype.EnvelopeOpen}, 10_000, 20_000, 49_999}, // every fifth is open: 4, 9, …
		{kv.IndexFilter{Job: "job500"}, 0, 100, 50_099},
	} {
		start := time.Now()
		n, pg := pageBytes(t, b.Conn, st, tc.f, tc.offset)
		took := time.Since(start)
		want := fmt.Sprintf("01JENV%020d", tc.first)
		if pg.Total != tc.total || len(pg.Records) == 0 || pg.Records[0].ID != want {
			var got string
			if len(pg.Records) > 0 {
				got = pg.Records[0].ID
			}
			t.Errorf("%+v at %d: total %d, first %s; want %d, %s", tc.f, tc.offset, pg.Total, got, tc.total, want)
		}
		if n > 2*small {
			t.Errorf("%+v at %d: a page out of 100,000 brought %d bytes, one out of 1,000 %d: the listing grows with the records", tc.f, tc.offset, n, small)
		}
		t.Logf("%+v at %d: %d records, %d bytes, %s", tc.f, tc.offset, len(pg.Records), n, took)
	}
}
