package dashboard

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// History bounds: a point every historyInterval, an hour of them.
const (
	historyInterval = 10 * time.Second
	historyPoints   = int(time.Hour / historyInterval)
	// arrivalMinutes is how far back envelope arrivals are counted.
	arrivalMinutes = 60
)

// HistoryPoint is the deployment's counters at one moment.
type HistoryPoint struct {
	At           time.Time `json:"at"`
	Tier1Retries int       `json:"tier1_retries"`
	Redeliveries int       `json:"redeliveries"`
	Envelopes    int       `json:"envelopes"`
	DLQDepth     uint64    `json:"dlq_depth"`
}

// History is what GET /api/history serves: the counters sampled by this
// process every IntervalSeconds for the last hour (kept in memory,
// bounded), and envelope arrivals per minute over the last hour, from
// the envelopes' own creation times (so they survive a restart).
type History struct {
	IntervalSeconds     int            `json:"interval_seconds"`
	Points              []HistoryPoint `json:"points"`
	EnvelopesPerMinute  []int          `json:"envelopes_per_minute"`
	EnvelopesPerMinEnds time.Time      `json:"envelopes_per_minute_ends"`
}

// history is a ring of the last historyPoints samples.
type history struct {
	mu     sync.Mutex
	points []HistoryPoint
}

func (h *history) add(p HistoryPoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.points = append(h.points, p)
	if over := len(h.points) - historyPoints; over > 0 {
		h.points = append(h.points[:0], h.points[over:]...)
	}
}

func (h *history) snapshot() []HistoryPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]HistoryPoint{}, h.points...)
}

// sample records the summary every historyInterval until ctx ends.
func (s *Server) sample(ctx context.Context) {
	t := time.NewTicker(historyInterval)
	defer t.Stop()
	for {
		sum := s.sum.summary()
		total := 0
		for _, n := range sum.CategoryEvents {
			total += n
		}
		s.hist.add(HistoryPoint{At: sum.At, Tier1Retries: sum.Tier1Retries, Redeliveries: sum.Redeliveries, Envelopes: total, DLQDepth: sum.DLQDepth})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) apiHistory(w http.ResponseWriter, _ *http.Request) {
	now := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	per := s.sum.envs.arrivalsPerMinute(now, arrivalMinutes)
	writeJSON(w, http.StatusOK, History{IntervalSeconds: int(historyInterval / time.Second), Points: s.hist.snapshot(),
		EnvelopesPerMinute: per, EnvelopesPerMinEnds: now})
}
