package salvage_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
)

// BenchmarkJobSearch is issue 38's row: a search by a metadata value over
// 10,000 jobs answers a page of 50 (the customer of 100 of them), and a
// value one job has, each from that pair's index; beside it the same page
// by tenant and, for scale, the first page of every job. The server runs
// sync_interval default: the setup writes 30,000 messages.
//
//	go test -run '^$' -bench BenchmarkJobSearch -benchtime 20x .
func BenchmarkJobSearch(b *testing.B) {
	const jobs = 10_000
	srv := salvagetest.StartServer(b, salvagetest.WithSyncInterval(0))
	c := srv.Client(b, &salvage.Config{Roles: []salvage.Role{salvage.RoleNone}})
	ctx := context.Background()
	if err := c.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	st, err := kv.Provision(ctx, srv.JS, kv.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < jobs; i += 8 {
				j := kv.Job{Job: salvagetype.Job{ID: ulid.Make().String(), Pipeline: "words", Chunks: 1, Tenant: fmt.Sprintf("t%d", i%10),
					Metadata: map[string]any{"customer": fmt.Sprintf("c-%d", i%100), "order": fmt.Sprintf("o-%d", i)}}}
				if err := st.Jobs.Create(ctx, j); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		q    salvage.JobQuery
		want int
	}{
		{"metadata-100-of-10000", salvage.JobQuery{MetaKey: "customer", MetaValue: "c-7", Limit: 50}, 50},
		{"metadata-1-of-10000", salvage.JobQuery{MetaKey: "order", MetaValue: "o-4242", Limit: 50}, 1},
		{"tenant-1000-of-10000", salvage.JobQuery{Tenant: "t3", Limit: 50}, 50},
		{"metadata-and-tenant", salvage.JobQuery{MetaKey: "customer", MetaValue: "c-7", Tenant: "t7", Limit: 50}, 50},
		{"every-job-first-page", salvage.JobQuery{Limit: 50}, 50},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				p, err := c.JobSearch(ctx, bc.q)
				if err != nil || len(p.Items) != bc.want {
					b.Fatalf("%+v: %d jobs, %v; want %d", bc.q, len(p.Items), err, bc.want)
				}
			}
		})
	}
}
