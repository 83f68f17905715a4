package dashboard

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collector turns a summary into Prometheus metrics at scrape time, so
// every figure is read from the streams and buckets, not from one
// process's memory.
type collector struct {
	s *summarizer
}

var (
	descDLQDepth   = prometheus.NewDesc("salvage_dlq_depth", "Envelopes in SALVAGE_DLQ.", nil, nil)
	descOldest     = prometheus.NewDesc("salvage_dlq_oldest_unresolved_seconds", "Age of the oldest envelope not yet resolved, escalated, abandoned or at a dead end.", nil, nil)
	descEnvelopes  = prometheus.NewDesc("salvage_envelopes_total", "Envelopes by category.", []string{"category"}, nil)
	descRecoveries = prometheus.NewDesc("salvage_recoveries_total", "Envelopes by recovery strategy and outcome (their status).", []string{"strategy", "outcome"}, nil)
	descTier1      = prometheus.NewDesc("salvage_tier1_retries_total", "Tier-1 retries inside workers, from chunk checkpoints.", nil, nil)
	descTier2      = prometheus.NewDesc("salvage_redeliveries_total", "Tier-2 JetStream redeliveries, from chunk checkpoints.", nil, nil)
	descChunks     = prometheus.NewDesc("salvage_chunks_total", "Chunks by status.", []string{"status"}, nil)
	descCalls      = prometheus.NewDesc("salvage_calls_total", "Journaled calls by tool and status.", []string{"tool", "status"}, nil)
	descRate       = prometheus.NewDesc("salvage_auto_recovery_rate", "Fraction of final envelopes settled without a human.", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDLQDepth, descOldest, descEnvelopes, descRecoveries, descTier1, descTier2, descChunks, descCalls, descRate} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sum, err := c.s.summary(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descDLQDepth, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(descDLQDepth, prometheus.GaugeValue, float64(sum.DLQDepth))
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, sum.OldestUnresolvedSeconds)
	ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, sum.AutoRecoveryRate)
	for cat, n := range sum.ByCategory {
		ch <- prometheus.MustNewConstMetric(descEnvelopes, prometheus.CounterValue, float64(n), cat)
	}
	for strategy, outcomes := range sum.Recoveries {
		for outcome, n := range outcomes {
			ch <- prometheus.MustNewConstMetric(descRecoveries, prometheus.CounterValue, float64(n), strategy, outcome)
		}
	}
	ch <- prometheus.MustNewConstMetric(descTier1, prometheus.CounterValue, float64(sum.Tier1Retries))
	ch <- prometheus.MustNewConstMetric(descTier2, prometheus.CounterValue, float64(sum.Redeliveries))
	for status, n := range sum.Chunks {
		ch <- prometheus.MustNewConstMetric(descChunks, prometheus.CounterValue, float64(n), status)
	}
	for tool, byStatus := range sum.Calls {
		for status, n := range byStatus {
			ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(n), tool, status)
		}
	}
}
