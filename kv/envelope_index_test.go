package kv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

func ids(recs []kv.EnvelopeRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// TestEnvelopePagesFollowTheIndex: a listing pages through the records in
// the order they entered their status, by status, category and job, from
// either end, and a record that moved is listed under its new status only.
func TestEnvelopePagesFollowTheIndex(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	var all []string
	for i := range 30 {
		r := kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: fmt.Sprintf("01JENV%020d", i), Job: fmt.Sprintf("job%d", i%3), Chunk: i, Category: []salvagetype.Category{salvagetype.CategoryToolTimeout, salvagetype.CategoryTransientNetwork}[i%2], Status: salvagetype.EnvelopeOpen}}
		if err := st.Envelopes.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
		all = append(all, r.ID)
	}
	// Ten move on: they leave "open" and enter "dead-end", in this order.
	var moved []string
	for i := 0; i < 30; i += 3 {
		if _, err := st.Envelopes.Mutate(ctx, all[i], func(r *kv.EnvelopeRecord) error { r.Status = salvagetype.EnvelopeDeadEnd; return nil }); err != nil {
			t.Fatal(err)
		}
		moved = append(moved, all[i])
	}
	// One changes without moving: it keeps its place.
	if _, err := st.Envelopes.Mutate(ctx, all[1], func(r *kv.EnvelopeRecord) error { r.Attempts = 9; return nil }); err != nil {
		t.Fatal(err)
	}
	var open []string
	for _, id := range all {
		if !slices.Contains(moved, id) {
			open = append(open, id)
		}
	}
	page := func(f kv.IndexFilter, offset, limit int, newest bool) kv.EnvelopePage {
		t.Helper()
		pg, err := st.Envelopes.Page(ctx, f, 0, offset, limit, newest)
		if err != nil {
			t.Fatal(err)
		}
		return pg
	}
	if pg := page(kv.IndexFilter{}, 0, 100, false); !slices.Equal(ids(pg.Records), append(slices.Clone(open), moved...)) || pg.Total != 30 {
		t.Errorf("everything, oldest first = %v (total %d); want the open ones then the moved ones, 30", ids(pg.Records), pg.Total)
	}
	if pg := page(kv.IndexFilter{Status: salvagetype.EnvelopeOpen}, 5, 7, false); !slices.Equal(ids(pg.Records), open[5:12]) || pg.Total != 20 {
		t.Errorf("open [5,12) = %v (total %d); want %v of 20", ids(pg.Records), pg.Total, open[5:12])
	}
	newest := slices.Clone(open)
	slices.Reverse(newest)
	if pg := page(kv.IndexFilter{Status: salvagetype.EnvelopeOpen}, 15, 10, true); !slices.Equal(ids(pg.Records), newest[15:]) {
		t.Errorf("open newest first, [15,20) = %v; want %v", ids(pg.Records), newest[15:])
	}
	if pg := page(kv.IndexFilter{Status: salvagetype.EnvelopeDeadEnd, Job: "job0"}, 0, 100, true); pg.Total != 10 || len(pg.Records) != 10 || pg.Records[0].ID != moved[9] {
		t.Errorf("dead ends of job0, newest first = %v (total %d); want %s first of 10", ids(pg.Records), pg.Total, moved[9])
	}
	if pg := page(kv.IndexFilter{Category: "TOOL_TIMEOUT", Status: salvagetype.EnvelopeOpen}, 0, 100, false); pg.Total != 10 {
		t.Errorf("open TOOL_TIMEOUT: %d; want 10", pg.Total)
	}
	if pg := page(kv.IndexFilter{Status: salvagetype.EnvelopeOpen}, 20, 10, false); len(pg.Records) != 0 || pg.Total != 20 {
		t.Errorf("past the end: %v of %d", ids(pg.Records), pg.Total)
	}
	for _, r := range page(kv.IndexFilter{}, 0, 100, false).Records {
		if r.IndexSeq == 0 || (r.Status == salvagetype.EnvelopeDeadEnd && !r.StatusAt.After(r.CreatedAt)) {
			t.Errorf("%s: index entry %d, in its status since %s, created %s", r.ID, r.IndexSeq, r.StatusAt, r.CreatedAt)
		}
	}
	// In their status at least an hour: none.
	if pg, err := st.Envelopes.Page(ctx, kv.IndexFilter{}, time.Hour, 0, 100, false); err != nil || pg.Total != 0 || len(pg.Records) != 0 {
		t.Errorf("an hour in status: %v of %d, %v", ids(pg.Records), pg.Total, err)
	}
}

// TestIndexRepairsAfterACrashBetweenItsWrites: an entry written by a
// writer that died before its record write is skipped, and deleted once
// the record moves past it; records written before the index existed get
// their entries from BuildIndex, once.
func TestIndexRepairsAfterACrashBetweenItsWrites(t *testing.T) {
	t.Parallel()
	b := salvagetest.StartServer(t)
	ctx := context.Background()
	if err := streams.Provision(ctx, b.JS, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Provision(ctx, b.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: "01JCRASHED0000000000000000", Job: "jobA", Category: "TOOL_TIMEOUT", Status: salvagetype.EnvelopeOpen}}
	if err := st.Envelopes.Put(ctx, r); err != nil {
		t.Fatal(err)
	}
	// A writer moving it to recovering wrote the entries, then died.
	for _, subj := range []string{kv.IndexEnvelope(salvagetype.EnvelopeRecovering, r.Category), kv.IndexJobEnvelopes(r.Job)} {
		if _, err := b.JS.Publish(ctx, subj, []byte(r.ID)); err != nil {
			t.Fatal(err)
		}
	}
	list := func(f kv.IndexFilter) kv.EnvelopePage {
		t.Helper()
		pg, err := st.Envelopes.Page(ctx, f, 0, 0, 100, false)
		if err != nil {
			t.Fatal(err)
		}
		return pg
	}
	// A page that holds every entry counts records, not entries: the
	// dead writer's (or a live writer's, mid-move) is not one.
	if pg := list(kv.IndexFilter{Status: salvagetype.EnvelopeRecovering}); len(pg.Records) != 0 || pg.Total != 0 {
		t.Errorf("recovering: %v, total %d; the dead writer's entry is not the record's", ids(pg.Records), pg.Total)
	}
	if pg := list(kv.IndexFilter{Job: "jobA"}); len(pg.Records) != 1 || pg.Records[0].Status != salvagetype.EnvelopeOpen || pg.Total != 1 {
		t.Errorf("jobA: %+v, total %d; want the record once, open", pg.Records, pg.Total)
	}
	// The record moves on (to dead-end): the dead writer's entries are
	// behind it, and the first listing that meets them deletes them.
	if _, err := st.Envelopes.Mutate(ctx, r.ID, func(r *kv.EnvelopeRecord) error { r.Status = salvagetype.EnvelopeDeadEnd; return nil }); err != nil {
		t.Fatal(err)
	}
	list(kv.IndexFilter{})
	list(kv.IndexFilter{Job: "jobA"})
	if pg := list(kv.IndexFilter{}); pg.Total != 1 || len(pg.Records) != 1 || pg.Records[0].Status != salvagetype.EnvelopeDeadEnd {
		t.Errorf("after the move: %d entries, %+v; want one, dead-end", pg.Total, pg.Records)
	}
	if pg := list(kv.IndexFilter{Job: "jobA"}); pg.Total != 1 {
		t.Errorf("jobA after the move: %d entries; want one", pg.Total)
	}

	// Records of before the index: written straight to the bucket.
	for i := range 3 {
		old := kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: fmt.Sprintf("01JOLD%020d", i), Job: "jobOld", Category: "TOOL_TIMEOUT", Status: salvagetype.EnvelopeEscalated, CreatedAt: time.Now().Add(time.Duration(i-10) * time.Minute)}}
		data, _ := json.Marshal(old)
		if _, err := b.JS.Publish(ctx, "$KV."+kv.BucketEnvelopes+"."+old.ID, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: "jobNew", Pipeline: "p", Chunks: 1}}); err != nil {
		t.Fatal(err)
	}
	oldJob, _ := json.Marshal(kv.Job{Job: salvagetype.Job{ID: "jobOld", Pipeline: "p", Chunks: 1, Status: salvagetype.JobRunning, CreatedAt: time.Now().Add(-time.Hour)}})
	if _, err := b.JS.Publish(ctx, "$KV."+kv.BucketJobs+".jobOld", oldJob); err != nil {
		t.Fatal(err)
	}
	if pg := list(kv.IndexFilter{Status: salvagetype.EnvelopeEscalated}); pg.Total != 0 {
		t.Fatalf("escalated before the build: %d", pg.Total)
	}
	n, err := st.BuildIndex(ctx)
	if err != nil || n != 4 {
		t.Fatalf("BuildIndex = %d, %v; want the 3 envelopes and the job of before", n, err)
	}
	if pg := list(kv.IndexFilter{Status: salvagetype.EnvelopeEscalated}); len(pg.Records) != 3 || pg.Records[0].ID != "01JOLD00000000000000000000" {
		t.Errorf("escalated after the build: %v; want the three, oldest first", ids(pg.Records))
	}
	if jobs, err := st.Jobs.Page(ctx, 0, 10); err != nil || len(jobs.Jobs) != 2 {
		t.Errorf("jobs after the build: %+v, %v; want both", jobs, err)
	}
	if n, err := st.BuildIndex(ctx); err != nil || n != 0 {
		t.Errorf("BuildIndex again = %d, %v; want nothing: it was built", n, err)
	}
}

// TestJobPagesNewestFirst: jobs are listed newest first, once each however
// often their creation is tried.
func TestJobPagesNewestFirst(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := context.Background()
	var want []string
	for i := range 25 {
		id := fmt.Sprintf("job-%02d", i)
		if err := st.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: id, Pipeline: "p", Chunks: 1}}); err != nil {
			t.Fatal(err)
		}
		want = append([]string{id}, want...)
	}
	// A redelivered job message tries again: refused, and listed once.
	if err := st.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: "job-03", Pipeline: "p", Chunks: 1}}); !errors.Is(err, kv.ErrJobExists) {
		t.Fatalf("second create: %v", err)
	}
	var got []string
	for offset := 0; ; offset += 10 {
		pg, err := st.Jobs.Page(ctx, offset, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range pg.Jobs {
			got = append(got, j.ID)
		}
		if pg.Total != 25 {
			t.Errorf("total %d; want 25", pg.Total)
		}
		if offset+10 >= pg.Total {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("jobs = %v; want %v", got, want)
	}
}
