package dashboard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/salvagehq/salvage"
)

// collector turns a summary into Prometheus metrics at scrape time. Every
// counter counts events and never goes back while the process runs (a
// restart starts from what the buckets still hold, which Prometheus reads
// as a counter reset); the gauges say what needs attention now.
type collector struct {
	s *summarizer
}

var (
	descDLQDepth   = prometheus.NewDesc("salvage_dlq_depth", "Open envelopes: open, recovering, or escalated and waiting for a person.", nil, nil)
	descOldest     = prometheus.NewDesc("salvage_dlq_oldest_unresolved_seconds", "Age of the oldest open envelope (escalations included).", nil, nil)
	descUnacked    = prometheus.NewDesc("salvage_dlq_unacknowledged", "Open escalations and COMPENSATION_NEEDED envelopes nobody acknowledged.", nil, nil)
	descEnvelopes  = prometheus.NewDesc("salvage_envelopes_total", "Envelopes created, by the category they arrived with.", []string{"category"}, nil)
	descRecoveries = prometheus.NewDesc("salvage_recoveries_total", "Envelopes that reached a final status, by strategy and that status.", []string{"strategy", "outcome"}, nil)
	descTier1      = prometheus.NewDesc("salvage_tier1_retries_total", "Tier-1 retries inside workers.", nil, nil)
	descTier2      = prometheus.NewDesc("salvage_redeliveries_total", "Tier-2 JetStream redeliveries of chunks.", nil, nil)
	descChunks     = prometheus.NewDesc("salvage_chunks_total", "Chunk outcomes by pipeline: done, cancelled, dead-lettered (every time).", []string{"pipeline", "status"}, nil)
	descJobsDone   = prometheus.NewDesc("salvage_jobs_finished_total", "Jobs reaching a final status (done, partial, incomplete, cancelled), by pipeline; a job replayed from incomplete to done counts in both.", []string{"pipeline", "status"}, nil)
	descJobs       = prometheus.NewDesc("salvage_jobs", "Job records as they stand, by pipeline and status (running included).", []string{"pipeline", "status"}, nil)
	descCalls      = prometheus.NewDesc("salvage_calls_total", "Journal row writes by tool and status, as this process saw them: at its start, each existing row's latest state once, then every write of an outcome (a retried call adds one per outcome; retention's rewrites of a row are not counted).", []string{"tool", "status"}, nil)
	descTokens     = prometheus.NewDesc("salvage_model_tokens_total", "Tokens model calls reported spending, by model and kind (prompt, completion); each call once.", []string{"model", "kind"}, nil)
	descRate       = prometheus.NewDesc("salvage_auto_recovery_rate", "Share of dead-lettered chunks that finished, or were compensated with nothing left, without a person.", nil, nil)
	descBreaker    = prometheus.NewDesc("salvage_breaker_state", "Circuit breaker state per external system: 1 for the state it is in (closed, open, half-open), 0 for the others.", []string{"system", "state"}, nil)
	descPaused     = prometheus.NewDesc("salvage_pipeline_paused", "1 while the pipeline is paused, else 0.", []string{"pipeline"}, nil)
	descParked     = prometheus.NewDesc("salvage_parked_chunks", "Chunks parked on SALVAGE_HOLD while their pipeline is paused.", []string{"pipeline"}, nil)
	descHeld       = prometheus.NewDesc("salvage_held_chunks", "Chunks waiting on SALVAGE_HOLD for their system: held at its open circuit breaker, or admitted there by their job's window while it paced their pipeline.", []string{"system"}, nil)
	descOpens      = prometheus.NewDesc("salvage_breaker_opens_total", "Times a system's circuit breaker opened.", []string{"system"}, nil)
	descLimit      = prometheus.NewDesc("salvage_limit", "A declared rate limit's bound, by key and bound (requests_per_minute, tokens_per_minute, in_flight, chunks); a bound not declared is not reported.", []string{"key", "bound"}, nil)
	descLimitHeld  = prometheus.NewDesc("salvage_limit_held", "What the processes calling a limited key hold of its bound now (the budget left unheld is salvage_limit less this).", []string{"key", "bound"}, nil)
	descRecent429s = prometheus.NewDesc("salvage_limit_recent_429s", "The provider's refusals (429s) of a limit's requests in the last ten minutes, by key: a gauge over a sliding window, not a counter.", []string{"key"}, nil)
	descHolders    = prometheus.NewDesc("salvage_limit_holders", "Processes holding a share of a limit, and (waiting=\"true\") those of them that had requests waiting.", []string{"key", "waiting"}, nil)
	descLimitPause = prometheus.NewDesc("salvage_limit_paused", "1 while a provider's 429 or rate-limit headers hold every request to the key, else 0.", []string{"key"}, nil)
)

// breakerStates are the values of salvage_breaker_state's state label.
var breakerStates = []salvage.BreakerState{salvage.BreakerClosed, salvage.BreakerOpen, salvage.BreakerHalfOpen}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDLQDepth, descOldest, descUnacked, descEnvelopes, descRecoveries, descTier1, descTier2, descChunks, descJobsDone, descJobs, descCalls, descTokens, descRate, descBreaker, descHeld, descOpens, descPaused, descParked, descLimit, descLimitHeld, descHolders, descLimitPause, descRecent429s} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	sum := c.s.summary()
	ch <- prometheus.MustNewConstMetric(descDLQDepth, prometheus.GaugeValue, float64(sum.DLQDepth))
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, sum.OldestUnresolvedSeconds)
	ch <- prometheus.MustNewConstMetric(descUnacked, prometheus.GaugeValue, float64(sum.Unacknowledged))
	ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, sum.Rate)
	for cat, n := range sum.CategoryEvents {
		ch <- prometheus.MustNewConstMetric(descEnvelopes, prometheus.CounterValue, float64(n), cat)
	}
	for strategy, outcomes := range sum.Recoveries {
		for outcome, n := range outcomes {
			ch <- prometheus.MustNewConstMetric(descRecoveries, prometheus.CounterValue, float64(n), strategy, outcome)
		}
	}
	ch <- prometheus.MustNewConstMetric(descTier1, prometheus.CounterValue, float64(sum.Tier1Retries))
	ch <- prometheus.MustNewConstMetric(descTier2, prometheus.CounterValue, float64(sum.Redeliveries))
	byPipeline(ch, descChunks, prometheus.CounterValue, sum.ChunkEventsByPipeline)
	byPipeline(ch, descJobsDone, prometheus.CounterValue, sum.JobsFinished)
	byPipeline(ch, descJobs, prometheus.GaugeValue, sum.JobsByStatus)
	for model, kinds := range sum.Tokens {
		for kind, n := range kinds {
			ch <- prometheus.MustNewConstMetric(descTokens, prometheus.CounterValue, float64(n), model, kind)
		}
	}
	for _, b := range sum.Breakers {
		for _, st := range breakerStates {
			v := 0.0
			if b.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, v, b.System, string(st))
		}
		ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(b.Held), b.System)
		ch <- prometheus.MustNewConstMetric(descOpens, prometheus.CounterValue, float64(b.Opens), b.System)
	}
	for _, p := range sum.Pipelines {
		v := 0.0
		if p.Paused {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, v, p.Pipeline)
		ch <- prometheus.MustNewConstMetric(descParked, prometheus.GaugeValue, float64(p.Parked), p.Pipeline)
	}
	for tool, byStatus := range sum.Calls {
		for status, n := range byStatus {
			ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(n), tool, status)
		}
	}
	for _, l := range sum.Limits {
		for _, b := range []struct {
			name        string
			bound, held float64
		}{
			{"requests_per_minute", float64(l.RequestsPerMinute), l.HeldRequestsPerMinute},
			{"tokens_per_minute", float64(l.TokensPerMinute), l.HeldTokensPerMinute},
			{"in_flight", float64(l.InFlight), float64(l.HeldInFlight)},
			{"chunks", float64(l.Chunks), float64(l.HeldChunks)},
		} {
			if b.bound > 0 {
				ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, b.bound, l.Key, b.name)
				ch <- prometheus.MustNewConstMetric(descLimitHeld, prometheus.GaugeValue, b.held, l.Key, b.name)
			}
		}
		ch <- prometheus.MustNewConstMetric(descHolders, prometheus.GaugeValue, float64(l.Holders-l.Waiting), l.Key, "false")
		ch <- prometheus.MustNewConstMetric(descHolders, prometheus.GaugeValue, float64(l.Waiting), l.Key, "true")
		paused := 0.0
		if !l.PausedUntil.IsZero() {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(descLimitPause, prometheus.GaugeValue, paused, l.Key)
		ch <- prometheus.MustNewConstMetric(descRecent429s, prometheus.GaugeValue, float64(l.Recent429s), l.Key)
	}
}

// byPipeline sends one metric of desc per pipeline and status of counts
// (pipeline -> status -> n).
func byPipeline(ch chan<- prometheus.Metric, desc *prometheus.Desc, kind prometheus.ValueType, counts map[string]map[string]int) {
	for pipeline, byStatus := range counts {
		for status, n := range byStatus {
			ch <- prometheus.MustNewConstMetric(desc, kind, float64(n), pipeline, status)
		}
	}
}
