package dashboard

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/salvagehq/salvage/kv"
)

// callStats follows salvage_journal: calls by tool and status, and the
// latency of every call that finished while it watched.
type callStats struct {
	mu       sync.Mutex
	status   map[string]string // journal key -> tool + "\x00" + status
	byStatus map[string]map[string]int
	latency  prometheus.Histogram
}

func newCallStats() *callStats {
	return &callStats{
		status: map[string]string{}, byStatus: map[string]map[string]int{},
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "salvage_call_duration_seconds", Help: "Latency of journaled calls, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
	}
}

// update applies one journal entry (deletes and the end-of-initial-values
// marker carry no row).
func (c *callStats) update(e jetstream.KeyValueEntry) {
	if e != nil && e.Operation() == jetstream.KeyValuePut {
		c.observe(e.Key(), e.Value())
	}
}

func (c *callStats) observe(key string, value []byte) {
	var r kv.JournalRow
	if json.Unmarshal(value, &r) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.status[key]; ok {
		tool, status, _ := strings.Cut(prev, "\x00")
		c.byStatus[tool][status]--
	}
	c.status[key] = r.Tool + "\x00" + r.Status
	if c.byStatus[r.Tool] == nil {
		c.byStatus[r.Tool] = map[string]int{}
	}
	c.byStatus[r.Tool][r.Status]++
	if (r.Status == kv.CallSucceeded || r.Status == kv.CallFailed) && r.LatencyMS > 0 && !r.Verified {
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
			if n > 0 {
				out[tool][s] = n
			}
		}
	}
	return out
}
