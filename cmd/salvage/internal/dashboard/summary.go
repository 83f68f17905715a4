// Package dashboard serves what an operator watches: a live page, the
// JSON behind it, Prometheus metrics and a health check. It binds to
// loopback by default and changes nothing without a token.
package dashboard

import (
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
)

// Summary is the state of a deployment at one moment (GET /api/summary).
type Summary struct {
	At time.Time `json:"at"`
	// DLQDepth counts open envelopes: open, recovering, or escalated and
	// waiting for a person.
	DLQDepth uint64 `json:"dlq_depth"`
	// Unacknowledged counts open envelopes that need a person's
	// acknowledgement (escalations, COMPENSATION_NEEDED) and have none.
	Unacknowledged int `json:"unacknowledged"`
	// Envelopes counts envelope records, whatever their status.
	Envelopes int `json:"envelopes"`
	// ByCategory and ByStatus count the records as they stand.
	ByCategory map[string]int `json:"by_category"`
	ByStatus   map[string]int `json:"by_status"`
	// CategoryEvents counts envelopes by the category they arrived with;
	// Recoveries counts moves into a final status by strategy. Both only
	// grow.
	CategoryEvents          map[string]int            `json:"category_events"`
	Recoveries              map[string]map[string]int `json:"recoveries"` // strategy -> outcome -> n
	OldestUnresolvedSeconds float64                   `json:"oldest_unresolved_seconds"`
	recovery.RecoveryStats
	Tier1Retries int `json:"tier1_retries"`
	Redeliveries int `json:"redeliveries"`
	// Chunks counts chunks as they stand: done, cancelled, dead-lettered,
	// unfinished.
	Chunks map[string]int `json:"chunks"`
	// ChunkEvents counts chunk outcomes as events (dead-lettered counts
	// every time): they only grow.
	ChunkEvents map[string]int            `json:"chunk_events"`
	Jobs        []JobProgress             `json:"jobs"`
	Calls       map[string]map[string]int `json:"calls"` // tool -> status -> n
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

// summarizer computes summaries from in-memory indexes of the job and
// envelope buckets and the journal, each kept current by a watch, at most
// once per second: a summary reads no store.
type summarizer struct {
	js    jetstream.JetStream
	jobs  *jobIndex
	envs  *envelopeIndex
	calls *callStats

	mu     sync.Mutex
	cached Summary
}

const summaryTTL = time.Second

func (s *summarizer) summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.cached.At) < summaryTTL {
		return s.cached
	}
	sum := Summary{At: time.Now().UTC(), ByCategory: map[string]int{}, ByStatus: map[string]int{},
		Chunks: map[string]int{}, ChunkEvents: map[string]int{}, Jobs: []JobProgress{}}
	recs, cats, outcomes := s.envs.snapshot()
	sum.CategoryEvents, sum.Recoveries = cats, outcomes
	var oldest time.Time
	for _, r := range recs {
		sum.Envelopes++
		sum.ByCategory[r.Category]++
		sum.ByStatus[r.Status]++
		if !r.Open() {
			continue
		}
		sum.DLQDepth++
		if oldest.IsZero() || r.CreatedAt.Before(oldest) {
			oldest = r.CreatedAt
		}
		if r.AckedBy == "" && (r.Status == kv.EnvelopeEscalated || r.Category == recovery.CategoryCompensationNeeded) {
			sum.Unacknowledged++
		}
	}
	if !oldest.IsZero() {
		sum.OldestUnresolvedSeconds = time.Since(oldest).Seconds()
	}
	sum.RecoveryStats = recovery.AutoRecoveryRate(recs)
	jobs, events := s.jobs.snapshot()
	sum.Tier1Retries, sum.Redeliveries = events.Tier1Retries, events.Redeliveries
	sum.ChunkEvents[kv.StatusDone] = events.Done
	sum.ChunkEvents[kv.OutcomeCancelled] = events.Cancelled
	sum.ChunkEvents[kv.StatusDeadLettered] = events.DeadLetters
	for _, j := range jobs {
		sum.Chunks[kv.StatusDone] += j.Summary.Done
		sum.Chunks[kv.OutcomeCancelled] += j.Summary.Cancelled
		sum.Chunks[kv.StatusDeadLettered] += j.Summary.DeadLettered
		sum.Chunks["unfinished"] += max(j.Chunks-j.Summary.Terminal(), 0)
		if j.Status == kv.JobRunning {
			sum.Jobs = append(sum.Jobs, JobProgress{ID: j.ID, Pipeline: j.Pipeline, Status: j.Status, Chunks: j.Chunks,
				Done: j.Summary.Done, Failed: j.Summary.DeadLettered})
		}
	}
	sort.Slice(sum.Jobs, func(i, k int) bool { return sum.Jobs[i].ID > sum.Jobs[k].ID })
	sum.Calls = s.calls.counts()
	s.cached = sum
	return sum
}
