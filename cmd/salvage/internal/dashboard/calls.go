package dashboard

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/salvagehq/salvage"
)

// callStats follows salvage_journal and counts row writes by tool and
// status: each write is an event (a call began, succeeded, failed, was
// cancelled or compensated), so a replay that rewrites a FAILED row as
// SUCCEEDED adds a success and takes nothing away. It also observes the
// latency of every call that finished while it watched. A watch restart
// delivers every key's latest row again; those are not counted twice.
type callStats struct {
	mu       sync.Mutex
	seen     map[string]uint64 // journal key -> revision last counted
	byStatus map[string]map[string]int
	latency  prometheus.Histogram
}

func newCallStats() *callStats {
	return &callStats{
		seen: map[string]uint64{}, byStatus: map[string]map[string]int{},
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "salvage_call_duration_seconds", Help: "Latency of journaled calls, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
	}
}

// update applies one journal change (removals and the caught-up mark
// carry no row).
func (c *callStats) update(ch salvage.Change[salvage.Call]) {
	if ch.Deleted || ch.CaughtUp {
		return
	}
	r := ch.Value
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[ch.Key] >= ch.Revision {
		return
	}
	c.seen[ch.Key] = ch.Revision
	if c.byStatus[r.Tool] == nil {
		c.byStatus[r.Tool] = map[string]int{}
	}
	c.byStatus[r.Tool][string(r.Status)]++
	if (r.Status == salvage.CallSucceeded || r.Status == salvage.CallFailed) && r.LatencyMS > 0 && !r.Verified {
		c.latency.Observe(r.LatencyMS / 1000)
	}
}

func (c *callStats) counts() map[string]map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]map[string]int, len(c.byStatus))
	for tool, m := range c.byStatus {
		out[tool] = map[string]int{}
		for s, n := range m {
			out[tool][s] = n
		}
	}
	return out
}
