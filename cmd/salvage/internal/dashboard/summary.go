// Package dashboard serves what an operator watches: a live page, the
// JSON behind it, Prometheus metrics and a health check. It binds to
// loopback by default and changes nothing without a token.
package dashboard

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/streams"
)

// Summary is the state of a deployment at one moment (GET /api/summary).
type Summary struct {
	At                      time.Time                 `json:"at"`
	DLQDepth                uint64                    `json:"dlq_depth"`
	Envelopes               int                       `json:"envelopes"`
	ByCategory              map[string]int            `json:"by_category"`
	ByStatus                map[string]int            `json:"by_status"`
	Recoveries              map[string]map[string]int `json:"recoveries"` // strategy -> outcome -> n
	OldestUnresolvedSeconds float64                   `json:"oldest_unresolved_seconds"`
	AutoRecoveryRate        float64                   `json:"auto_recovery_rate"`
	Tier1Retries            int                       `json:"tier1_retries"`
	Redeliveries            int                       `json:"redeliveries"`
	Chunks                  map[string]int            `json:"chunks"`
	Jobs                    []JobProgress             `json:"jobs"`
	Calls                   map[string]map[string]int `json:"calls"` // tool -> status -> n
}

// JobProgress is one job on the page.
type JobProgress struct {
	ID       string `json:"job_id"`
	Pipeline string `json:"pipeline"`
	Status   string `json:"status"`
	Chunks   int    `json:"chunks"`
	Done     int    `json:"done"`
	Failed   int    `json:"failed"`
}

// summarizer computes summaries from the streams and buckets, at most once
// per second, and follows the journal for call counts and latencies.
type summarizer struct {
	js     jetstream.JetStream
	stores *kv.Stores

	mu     sync.Mutex
	cached Summary
	calls  *callStats
	jobs   *jobIndex
}

// addSummary adds a job's chunk counts under their status names.
func addSummary(chunks map[string]int, s kv.Summary) {
	for status, n := range map[string]int{
		kv.StatusDone: s.Done, "cancelled": s.Cancelled, kv.StatusDeadLettered: s.DeadLettered,
		kv.StatusRunning: s.Running, kv.StatusPending: s.Pending, "parked": s.Parked,
	} {
		if n > 0 {
			chunks[status] += n
		}
	}
}

const summaryTTL = time.Second

func (s *summarizer) summary(ctx context.Context) (Summary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.cached.At) < summaryTTL {
		return s.cached, nil
	}
	sum := Summary{At: time.Now().UTC(), ByCategory: map[string]int{}, ByStatus: map[string]int{},
		Recoveries: map[string]map[string]int{}, Chunks: map[string]int{}, Jobs: []JobProgress{}}
	st, err := s.js.Stream(ctx, streams.DLQ)
	if err != nil {
		return sum, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return sum, err
	}
	sum.DLQDepth = info.State.Msgs
	recs, err := s.stores.Envelopes.List(ctx)
	if err != nil {
		return sum, err
	}
	auto, final := 0, 0
	var oldest time.Time
	for _, r := range recs {
		sum.Envelopes++
		sum.ByCategory[r.Category]++
		sum.ByStatus[r.Status]++
		if sum.Recoveries[r.Strategy] == nil {
			sum.Recoveries[r.Strategy] = map[string]int{}
		}
		sum.Recoveries[r.Strategy][r.Status]++
		if r.Final() {
			final++
			if r.Status != kv.EnvelopeEscalated {
				auto++
			}
		} else if oldest.IsZero() || r.CreatedAt.Before(oldest) {
			oldest = r.CreatedAt
		}
	}
	if !oldest.IsZero() {
		sum.OldestUnresolvedSeconds = time.Since(oldest).Seconds()
	}
	sum.AutoRecoveryRate = 1
	if final > 0 {
		sum.AutoRecoveryRate = float64(auto) / float64(final)
	}
	// Finished jobs answer from their records (kept current by a watch);
	// only running ones are read chunk by chunk.
	for _, j := range s.jobs.snapshot() {
		if j.Status != kv.JobRunning {
			addSummary(sum.Chunks, j.Summary)
			sum.Tier1Retries += j.Summary.Tier1Retries
			sum.Redeliveries += j.Summary.Redeliveries
			continue
		}
		cps, err := s.stores.Checkpoints.ForJob(ctx, j.ID, j.Chunks)
		if err != nil {
			return sum, err
		}
		_, live, _ := kv.Derive(false, cps)
		addSummary(sum.Chunks, live)
		sum.Tier1Retries += live.Tier1Retries
		sum.Redeliveries += live.Redeliveries
		sum.Jobs = append(sum.Jobs, JobProgress{ID: j.ID, Pipeline: j.Pipeline, Status: j.Status, Chunks: j.Chunks,
			Done: live.Done, Failed: live.DeadLettered})
	}
	sort.Slice(sum.Jobs, func(i, k int) bool { return sum.Jobs[i].ID > sum.Jobs[k].ID })
	sum.Calls = s.calls.counts()
	s.cached = sum
	return sum, nil
}
