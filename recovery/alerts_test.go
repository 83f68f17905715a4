package recovery_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

func kinds(as []recovery.Alert) map[string]int {
	out := map[string]int{}
	for _, a := range as {
		out[a.Kind]++
	}
	return out
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	env := func(i int, at time.Duration, status salvagetype.EnvelopeStatus, category salvagetype.Category, acked bool, left ...string) recovery.AlertSubject {
		return recovery.AlertSubject{ID: fmt.Sprint("E", i), CreatedAt: t0.Add(at), Status: status, Category: category, Acked: acked, LeftSystems: left}
	}
	tests := []struct {
		name string
		now  time.Duration
		envs []recovery.AlertSubject
		want map[string]int
	}{
		{"three envelopes within five minutes", 4 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "resolved", "", false), env(2, time.Minute, "resolved", "", false), env(3, 4*time.Minute, "resolved", "", false)},
			map[string]int{recovery.AlertBurst: 1}},
		{"two within five minutes is quiet", 4 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "resolved", "", false), env(2, time.Minute, "resolved", "", false)},
			map[string]int{}},
		{"three spread over six minutes is quiet", 6 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "resolved", "", false), env(2, 3*time.Minute, "resolved", "", false), env(3, 6*time.Minute, "resolved", "", false)},
			map[string]int{}},
		{"six in one window fire once", 2 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "resolved", "", false), env(2, 0, "resolved", "", false), env(3, 0, "resolved", "", false),
				env(4, time.Minute, "resolved", "", false), env(5, time.Minute, "resolved", "", false), env(6, time.Minute, "resolved", "", false)},
			map[string]int{recovery.AlertBurst: 1}},
		{"two bursts six minutes apart fire twice", 7 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "resolved", "", false), env(2, time.Minute, "resolved", "", false), env(3, 2*time.Minute, "resolved", "", false),
				env(4, 6*time.Minute, "resolved", "", false), env(5, 7*time.Minute, "resolved", "", false), env(6, 7*time.Minute, "resolved", "", false)},
			map[string]int{recovery.AlertBurst: 2}},
		{"open for thirty minutes", 30 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "open", "TRANSIENT_NETWORK", false)}, map[string]int{recovery.AlertUnresolved: 1}},
		{"open for 29 minutes is quiet", 29 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "recovering", "TRANSIENT_NETWORK", false)}, map[string]int{}},
		{"resolved long ago is quiet", 5 * time.Hour,
			[]recovery.AlertSubject{env(1, 0, "resolved", "TRANSIENT_NETWORK", false)}, map[string]int{}},
		{"escalated charge unacknowledged for 15 minutes", 15 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "escalated", "PARTIAL_EXECUTION", false, "payments", "erp")}, map[string]int{recovery.AlertUnacknowledged: 1}},
		{"escalated charge acknowledged is quiet", time.Hour,
			[]recovery.AlertSubject{env(1, 0, "escalated", "PARTIAL_EXECUTION", true, "payments")}, map[string]int{}},
		{"escalation without money is quiet", time.Hour,
			[]recovery.AlertSubject{env(1, 0, "escalated", "PARTIAL_EXECUTION", false, "wms")}, map[string]int{}},
		{"COMPENSATION_NEEDED unacknowledged", 16 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "escalated", salvagetype.CategoryCompensationNeeded, false, "email")}, map[string]int{recovery.AlertUnacknowledged: 1}},
		{"escalated charge at 14 minutes is quiet", 14 * time.Minute,
			[]recovery.AlertSubject{env(1, 0, "escalated", "PARTIAL_EXECUTION", false, "payments")}, map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := kinds(recovery.EvaluateAlerts(t0.Add(tt.now), tt.envs, salvagetype.AlertRules{}))
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("alerts = %v, want %v", got, tt.want)
			}
		})
	}
	// Thresholds are settings.
	got := recovery.EvaluateAlerts(t0.Add(time.Minute), []recovery.AlertSubject{env(1, 0, "open", "X", false)}, salvagetype.AlertRules{UnresolvedAfter: time.Minute})
	if len(got) != 1 || got[0].Kind != recovery.AlertUnresolved {
		t.Fatalf("custom threshold: %v", got)
	}
}
