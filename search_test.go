package salvage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestJobSearch: jobs are found by a metadata pair (a string, a number),
// by tenant, narrowed by pipeline, status and creation time, newest first,
// a page at a time; a query that cannot run says why.
func TestJobSearch(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := context.Background()
	submit := func(meta map[string]any, tenant string) string {
		t.Helper()
		id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"fine"}}, &salvage.SubmitOpts{Metadata: meta, Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		salvagetest.WaitJob(t, c, id, time.Minute)
		return id
	}
	a := submit(map[string]any{"customer": "acme", "priority": 1}, "")
	mid := time.Now()
	b := submit(map[string]any{"customer": "acme", "contract": map[string]any{"nested": true}}, "t1")
	g := submit(map[string]any{"customer": "globex"}, "t1")
	ids := func(p *salvage.JobSearchPage) []string {
		out := []string{}
		for _, j := range p.Items {
			out = append(out, j.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    salvage.JobQuery
		want []string
	}{
		{"customer=acme", salvage.JobQuery{MetaKey: "customer", MetaValue: "acme"}, []string{b, a}},
		{"priority=1, a number", salvage.JobQuery{MetaKey: "priority", MetaValue: "1"}, []string{a}},
		{"customer=initech", salvage.JobQuery{MetaKey: "customer", MetaValue: "initech"}, []string{}},
		{"tenant t1", salvage.JobQuery{Tenant: "t1"}, []string{g, b}},
		{"acme of t1", salvage.JobQuery{MetaKey: "customer", MetaValue: "acme", Tenant: "t1"}, []string{b}},
		{"created after the first", salvage.JobQuery{CreatedAfter: mid}, []string{g, b}},
		{"created before the second", salvage.JobQuery{MetaKey: "customer", MetaValue: "acme", CreatedBefore: mid}, []string{a}},
		{"done", salvage.JobQuery{Statuses: []salvage.JobStatus{salvage.JobDone}, Pipeline: "words"}, []string{g, b, a}},
		{"another pipeline", salvage.JobQuery{Pipeline: "orders"}, []string{}},
		{"finished since the second began", salvage.JobQuery{FinishedAfter: mid}, []string{g, b}},
		{"finished before it", salvage.JobQuery{FinishedBefore: mid}, []string{a}},
	} {
		p, err := c.JobSearch(ctx, tc.q)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := ids(p); len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) || (len(got) > 1 && got[1] != tc.want[1]) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A page of one, then the next.
	first, err := c.JobSearch(ctx, salvage.JobQuery{MetaKey: "customer", MetaValue: "acme", Limit: 1})
	if err != nil || len(first.Items) != 1 || first.Items[0].ID != b || first.NextOffset == 0 || first.Total != 2 {
		t.Fatalf("first page: %+v, %v", first, err)
	}
	next, err := c.JobSearch(ctx, salvage.JobQuery{MetaKey: "customer", MetaValue: "acme", Limit: 1, Offset: first.NextOffset})
	if err != nil || len(next.Items) != 1 || next.Items[0].ID != a || next.NextOffset != 0 {
		t.Fatalf("second page: %+v, %v", next, err)
	}
	for _, q := range []salvage.JobQuery{{MetaValue: "acme"}, {Statuses: []salvage.JobStatus{"exploded"}}, {Limit: salvage.PageMax + 1}, {Tenant: "a.b"},
		{CreatedAfter: mid, CreatedBefore: mid.Add(-time.Second)}} {
		if _, err := c.JobSearch(ctx, q); !errors.Is(err, salvage.ErrBadFilter) {
			t.Errorf("JobSearch(%+v): %v, want ErrBadFilter", q, err)
		}
	}
}
