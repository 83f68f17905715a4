package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// The listing part's shape: envelope records written through the real
// record path, then pages read through the public API.
const (
	listingEnvelopes = 100_000
	listingPage      = 100
	listingRepeats   = 5
	targetListing    = time.Second
)

// listingRow is what the listing part measured: each page's median time
// and the bytes it brought the client, and reading every record the way
// listings did before the index, for comparison.
type listingRow struct {
	Envelopes    int           `json:"envelopes"`
	SyncInterval string        `json:"sync_interval"`
	Pages        []listingRead `json:"pages"`
	ScanTime     time.Duration `json:"scan_every_record_ns"`
	ScanBytes    uint64        `json:"scan_every_record_bytes"`
}

type listingRead struct {
	What  string        `json:"what"`
	Time  time.Duration `json:"median_ns"`
	Bytes uint64        `json:"bytes"`
	Got   int           `json:"records"`
}

func (r listingRow) verdict() string {
	worst := time.Duration(0)
	for _, p := range r.Pages {
		worst = max(worst, p.Time)
	}
	return fmt.Sprintf("every page < %s: %s", targetListing, verdict(len(r.Pages) > 0 && worst < targetListing))
}

// listing writes listingEnvelopes envelope records (a fifth open, the
// rest settled, 100 per job), then times pages of listingPage at the
// newest end, the middle and the oldest end, by status and by job.
func (b *bench) listing(ctx context.Context) (listingRow, error) {
	row := listingRow{Envelopes: listingEnvelopes, SyncInterval: "default"}
	s, c, stores, stop, err := b.startStores(ctx)
	if err != nil {
		return row, err
	}
	defer stop()
	if err := putEnvelopes(ctx, stores, 0, listingEnvelopes); err != nil {
		return row, err
	}
	for _, q := range []struct {
		what   string
		f      salvage.EnvelopeFilter
		offset int
	}{
		{"newest first, first page", salvage.EnvelopeFilter{Newest: true}, 0},
		{"newest first, offset 50,000", salvage.EnvelopeFilter{Newest: true}, 50_000},
		{"oldest first, last page", salvage.EnvelopeFilter{}, listingEnvelopes - listingPage},
		{"open ones, offset 10,000", salvage.EnvelopeFilter{Status: salvage.EnvelopeOpen}, 10_000},
		{"one job's", salvage.EnvelopeFilter{Job: "listing0500"}, 0},
		{"one job's dead ends", salvage.EnvelopeFilter{Job: "listing0500", Status: salvage.EnvelopeDeadEnd}, 0},
	} {
		p := listingRead{What: q.what}
		var times []time.Duration
		for range listingRepeats {
			before := s.nc.Stats().InBytes
			start := time.Now()
			l, err := c.EnvelopeList(ctx, q.f, &salvage.Page{Offset: q.offset, Limit: listingPage})
			if err != nil {
				return row, fmt.Errorf("%s: %w", q.what, err)
			}
			times = append(times, time.Since(start))
			p.Bytes, p.Got = s.nc.Stats().InBytes-before, len(l.Envelopes)
		}
		slices.Sort(times)
		p.Time = times[len(times)/2]
		row.Pages = append(row.Pages, p)
	}
	before := s.nc.Stats().InBytes
	start := time.Now()
	if _, err := stores.Envelopes.List(ctx); err != nil {
		return row, err
	}
	row.ScanTime, row.ScanBytes = time.Since(start), s.nc.Stats().InBytes-before
	return row, nil
}

// startStores starts an embedded server (the server default
// sync_interval) provisioned by a client that runs no role, and opens its
// stores; stop stops both.
func (b *bench) startStores(ctx context.Context) (s *benchServer, c *salvage.Client, stores *kv.Stores, stop func(), err error) {
	if s, err = startBenchServer(0); err != nil {
		return nil, nil, nil, nil, err
	}
	c, stopClient, err := b.startClient(ctx, s, &salvage.Config{Roles: []salvage.Role{salvage.RoleNone}})
	if err != nil {
		s.close()
		return nil, nil, nil, nil, err
	}
	stop = func() { stopClient(); s.close() }
	if stores, err = kv.Open(ctx, s.js); err != nil {
		stop()
		return nil, nil, nil, nil, err
	}
	return s, c, stores, stop, nil
}

// putEnvelopes writes envelope records from..to-1 through the real record
// path, 64 at a time: a fifth open, the rest settled, 100 per job.
func putEnvelopes(ctx context.Context, stores *kv.Stores, from, to int) error {
	statuses := []salvagetype.EnvelopeStatus{salvagetype.EnvelopeDeadEnd, salvagetype.EnvelopeResolved, salvagetype.EnvelopeAbandoned, salvagetype.EnvelopeSuperseded, salvagetype.EnvelopeOpen}
	return putAll(ctx, from, to, func(i int) error {
		return stores.Envelopes.Put(ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: ulid.Make().String(), Job: fmt.Sprintf("listing%04d", i/100), Chunk: i%100 + 1, Category: salvagetype.CategoryToolTimeout, Strategy: salvagetype.StrategyResume, Status: statuses[i%len(statuses)]}})
	})
}

// putAll calls put for from..to-1, 64 at a time, and returns the first
// error.
func putAll(ctx context.Context, from, to int, put func(i int) error) error {
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 64 {
		wg.Go(func() {
			for i := range next {
				if err := put(i); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := from; i < to && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return cmp.Or(first, ctx.Err())
}
