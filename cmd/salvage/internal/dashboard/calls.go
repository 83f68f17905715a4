package dashboard

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/salvagehq/salvage"
)

// callStats follows salvage_journal and counts row writes by tool and
// status. At its start it counts each existing row's latest state once
// (with its tokens); from then on each write is an event (a call began,
// succeeded, failed, was cancelled or compensated), so a replay that
// rewrites a FAILED row as SUCCEEDED adds a success and takes nothing
// away; retention's rewrites of a row (Call.RetentionRewrite) are not
// events. It also observes the latency of every call that finished while
// it watched. Its memory does not grow with the journal: a watch restart
// delivers every key's latest row again, in stream order like everything
// it delivers, so a write is counted once by counting only revisions past
// the highest one counted.
type callStats struct {
	mu       sync.Mutex
	high     uint64 // the highest revision counted
	started  bool   // the rows that existed at the start are counted
	byStatus map[string]map[string]int
	latency  *prometheus.HistogramVec
	// limitWait observes how long calls waited for a rate limit's budget.
	limitWait *prometheus.HistogramVec
	// tokens counts model usage by model and kind (prompt, completion):
	// at the start from each row that carries usage, then from the row
	// that records a call's success.
	tokens map[string]map[string]int64
}

func newCallStats() *callStats {
	return &callStats{
		byStatus: map[string]map[string]int{}, tokens: map[string]map[string]int64{},
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "salvage_call_duration_seconds", Help: "Latency of journaled calls that succeeded or failed, retries included, by tool and external system (empty for a tool without one).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"tool", "system"}),
		limitWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "salvage_limit_wait_seconds", Help: "How long journaled calls that succeeded or failed waited for a rate limit's budget (part of salvage_call_duration_seconds), by tool and external system; calls that did not wait are not observed.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"tool", "system"}),
	}
}

// update applies one journal change (removals and the caught-up mark
// carry no row).
func (c *callStats) update(ch salvage.Change[salvage.Call]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch.CaughtUp {
		c.started = true
	}
	if ch.Deleted || ch.CaughtUp {
		return
	}
	r := ch.Value
	if ch.Revision <= c.high {
		// Delivered again by a restarted watch: counted already, or
		// replaced before this process saw it.
		return
	}
	c.high = ch.Revision
	if c.started && r.RetentionRewrite {
		return
	}
	if c.byStatus[r.Tool] == nil {
		c.byStatus[r.Tool] = map[string]int{}
	}
	c.byStatus[r.Tool][string(r.Status)]++
	if (r.Status == salvage.CallSucceeded || r.Status == salvage.CallFailed) && r.LatencyMS > 0 && !r.Verified {
		c.latency.WithLabelValues(r.Tool, r.System).Observe(r.LatencyMS / 1000)
		if r.LimitWaitMS > 0 {
			c.limitWait.WithLabelValues(r.Tool, r.System).Observe(r.LimitWaitMS / 1000)
		}
	}
	// A call's usage is written once, with its success; the rows that
	// carry it on (a compensation, an orphan's mark) are not new spending
	// — unless this process never saw that success: a row that existed at
	// its start. (A success and such a mark both written while a watch
	// was down are missed: the restart delivers only the mark.)
	if u := r.Usage; u != nil && (!c.started || r.Status == salvage.CallSucceeded && !r.Orphan) {
		if c.tokens[u.Model] == nil {
			c.tokens[u.Model] = map[string]int64{}
		}
		c.tokens[u.Model]["prompt"] += u.PromptTokens
		c.tokens[u.Model]["completion"] += u.CompletionTokens
	}
}

// tokenCounts returns a copy of the token counts: model -> kind -> n.
func (c *callStats) tokenCounts() map[string]map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]map[string]int64, len(c.tokens))
	for model, m := range c.tokens {
		out[model] = map[string]int64{"prompt": m["prompt"], "completion": m["completion"]}
	}
	return out
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
