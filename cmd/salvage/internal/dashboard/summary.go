// Package dashboard serves what an operator watches: a live page, the
// JSON behind it, Prometheus metrics and a health check. It binds to
// loopback by default and changes nothing without a token.
package dashboard

import (
	"sort"
	"sync"
	"time"

	"github.com/salvagehq/salvage"
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
	salvage.RecoveryStats
	Tier1Retries int `json:"tier1_retries"`
	Redeliveries int `json:"redeliveries"`
	// Chunks counts chunks as they stand: done, cancelled, dead-lettered,
	// unfinished.
	Chunks map[string]int `json:"chunks"`
	// ChunkEvents counts chunk outcomes as events (dead-lettered counts
	// every time): they only grow. ChunkEventsByPipeline splits them by
	// pipeline: pipeline -> outcome -> n.
	ChunkEvents           map[string]int            `json:"chunk_events"`
	ChunkEventsByPipeline map[string]map[string]int `json:"chunk_events_by_pipeline"`
	// JobsFinished counts jobs reaching a final status, by pipeline (a
	// job replayed from incomplete to done counts in both); JobsByStatus
	// counts job records as they stand: pipeline -> status -> n.
	JobsFinished map[string]map[string]int `json:"jobs_finished"`
	JobsByStatus map[string]map[string]int `json:"jobs_by_status"`
	Jobs         []JobProgress             `json:"jobs"`
	Calls        map[string]map[string]int `json:"calls"` // tool -> status -> n
	// Tokens counts model usage: model -> prompt|completion -> tokens.
	Tokens map[string]map[string]int64 `json:"model_tokens"`
	// Breakers are the systems whose circuit breaker ever opened, with
	// the chunks each holds; Held adds those up.
	Breakers []salvage.Breaker `json:"breakers"`
	// Limits are the declared rate limits, with what the processes
	// calling each hold of it.
	Limits []salvage.LimitState `json:"limits"`
	Held   int                  `json:"held"`
	// Pipelines are the pipelines the workers run, paused or not.
	Pipelines []salvage.PipelineStatus `json:"pipelines"`
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

// summarizer computes summaries from what watches of the job and envelope
// buckets and the journal keep in memory (the job records, the envelopes'
// counts), at most once per second: a summary reads no store.
type summarizer struct {
	jobs     *jobIndex
	envs     *envelopeStats
	calls    *callStats
	breakers *breakerPoll

	mu     sync.Mutex
	cached Summary
}

const summaryTTL = time.Second

// The outcome labels of salvage_chunks_total and the summary's counts.
const (
	outcomeDone         = string(salvage.ChunkDone)
	outcomeCancelled    = string(salvage.OutcomeCancelled)
	outcomeDeadLettered = string(salvage.ChunkDeadLettered)
)

func (s *summarizer) summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.cached.At) < summaryTTL {
		return s.cached
	}
	sum := Summary{At: time.Now().UTC(), ByCategory: map[string]int{}, ByStatus: map[string]int{},
		Chunks: map[string]int{}, ChunkEvents: map[string]int{}, Jobs: []JobProgress{}}
	envs := s.envs.counts()
	sum.Envelopes, sum.ByCategory, sum.ByStatus, sum.DLQDepth, sum.Unacknowledged = envs.total, envs.byCategory, envs.byStatus, uint64(envs.depth), envs.unacknowledged
	sum.CategoryEvents, sum.Recoveries, sum.RecoveryStats = envs.arrived, envs.outcomes, envs.RecoveryStats
	if !envs.oldest.IsZero() {
		sum.OldestUnresolvedSeconds = time.Since(envs.oldest).Seconds()
	}
	jobs, byPipeline := s.jobs.snapshot()
	sum.ChunkEventsByPipeline, sum.JobsFinished, sum.JobsByStatus = map[string]map[string]int{}, map[string]map[string]int{}, map[string]map[string]int{}
	for pipeline, events := range byPipeline {
		sum.Tier1Retries += events.Tier1Retries
		sum.Redeliveries += events.Redeliveries
		sum.ChunkEvents[outcomeDone] += events.Done
		sum.ChunkEvents[outcomeCancelled] += events.Cancelled
		sum.ChunkEvents[outcomeDeadLettered] += events.DeadLetters
		sum.ChunkEventsByPipeline[pipeline] = map[string]int{outcomeDone: events.Done, outcomeCancelled: events.Cancelled, outcomeDeadLettered: events.DeadLetters}
		finished := map[string]int{}
		for st, n := range events.Finished {
			finished[string(st)] = n
		}
		sum.JobsFinished[pipeline] = finished
	}
	for _, j := range jobs {
		if sum.JobsByStatus[j.Pipeline] == nil {
			sum.JobsByStatus[j.Pipeline] = map[string]int{}
		}
		sum.JobsByStatus[j.Pipeline][string(j.Status)]++
		sum.Chunks[outcomeDone] += j.Summary.Done
		sum.Chunks[outcomeCancelled] += j.Summary.Cancelled
		sum.Chunks[outcomeDeadLettered] += j.Summary.DeadLettered
		sum.Chunks["unfinished"] += max(j.Chunks-j.Summary.Terminal(), 0)
		if j.Status == salvage.JobRunning {
			sum.Jobs = append(sum.Jobs, JobProgress{ID: j.ID, Pipeline: j.Pipeline, Status: string(j.Status), Chunks: j.Chunks,
				Done: j.Summary.Done, Failed: j.Summary.DeadLettered})
		}
	}
	sort.Slice(sum.Jobs, func(i, k int) bool { return sum.Jobs[i].ID > sum.Jobs[k].ID })
	sum.Calls = s.calls.counts()
	sum.Tokens = s.calls.tokenCounts()
	sum.Breakers = s.breakers.snapshot()
	for _, b := range sum.Breakers {
		sum.Held += b.Held
	}
	sum.Pipelines = s.breakers.pipelineSnapshot()
	sum.Limits = s.breakers.limitSnapshot()
	s.cached = sum
	return sum
}
