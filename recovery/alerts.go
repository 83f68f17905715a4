package recovery

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
)

// Alert kinds: the last token of salvage.alerts.<kind>.
const (
	AlertBurst          = "dlq-burst"
	AlertUnresolved     = "unresolved"
	AlertUnacknowledged = "unacknowledged-escalation"
	// AlertNoRecovery: a pipeline's envelopes wait and no live process
	// recovers that pipeline (none runs the recovery role with it).
	AlertNoRecovery = "no-recovery"
)

// AlertSubject is the envelope fields the alert rules read.
type AlertSubject struct {
	ID          string
	Category    salvagetype.Category
	Status      salvagetype.EnvelopeStatus
	CreatedAt   time.Time
	Acked       bool
	LeftSystems []string
}

// Alert is one raised alert. Key identifies it so it fires once.
type Alert struct {
	Kind     string    `json:"kind"`
	Key      string    `json:"key"`
	Message  string    `json:"message"`
	Envelope string    `json:"envelope_id,omitempty"`
	Count    int       `json:"count,omitempty"`
	At       time.Time `json:"at"`
}

// EvaluateAlerts returns the alerts the rules raise at now over envs. It is
// pure: the caller remembers which keys already fired.
func EvaluateAlerts(now time.Time, envs []AlertSubject, rules salvagetype.AlertRules) []Alert {
	rules = rules.WithDefaults()
	var out []Alert
	// Burst: BurstCount envelopes whose arrivals fit in one window. The
	// alert is keyed by the first of them and covers every envelope of
	// its window, so one burst fires once.
	sorted := slices.Clone(envs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].CreatedAt.Before(sorted[j].CreatedAt) })
	for i := 0; i+rules.BurstCount-1 < len(sorted); i++ {
		first, last := sorted[i], sorted[i+rules.BurstCount-1]
		if last.CreatedAt.Sub(first.CreatedAt) > rules.BurstWindow {
			continue
		}
		n := rules.BurstCount
		for i+n < len(sorted) && sorted[i+n].CreatedAt.Sub(first.CreatedAt) <= rules.BurstWindow {
			n++
		}
		if now.Sub(last.CreatedAt) <= rules.BurstWindow {
			out = append(out, Alert{Kind: AlertBurst, Key: AlertBurst + "." + first.ID, Count: n, At: now,
				Message: fmt.Sprintf("%d envelopes within %s (first %s)", n, rules.BurstWindow, first.ID)})
		}
		i += n - 1
	}
	for _, e := range envs {
		open := e.Status == salvagetype.EnvelopeOpen || e.Status == salvagetype.EnvelopeRecovering
		if open && now.Sub(e.CreatedAt) >= rules.UnresolvedAfter {
			out = append(out, Alert{Kind: AlertUnresolved, Key: AlertUnresolved + "." + e.ID, Envelope: e.ID, At: now,
				Message: fmt.Sprintf("envelope %s (%s) unresolved for %s", e.ID, e.Category, now.Sub(e.CreatedAt).Round(time.Second))})
		}
		money := e.Status == salvagetype.EnvelopeEscalated && anyIn(e.LeftSystems, rules.MoneySystems)
		if (money || e.Category == salvagetype.CategoryCompensationNeeded) && !e.Acked && now.Sub(e.CreatedAt) >= rules.UnackedAfter {
			out = append(out, Alert{Kind: AlertUnacknowledged, Key: AlertUnacknowledged + "." + e.ID, Envelope: e.ID, At: now,
				Message: fmt.Sprintf("envelope %s (%s, %v left) not acknowledged for %s", e.ID, e.Category, e.LeftSystems, now.Sub(e.CreatedAt).Round(time.Second))})
		}
	}
	return out
}

func anyIn(have, want []string) bool {
	for _, h := range have {
		if slices.Contains(want, h) {
			return true
		}
	}
	return false
}
