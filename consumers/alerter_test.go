package consumers_test

import (
	"sync"
	"testing"
	"time"

	"github.com/salvagehq/salvage/consumers/alerter"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
)

// TestAlertsFireOnceAtTheirThresholds drives the alerter with an injected
// clock over real envelope records on a real server.
func TestAlertsFireOnceAtTheirThresholds(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noDeadLetter: true})
	alerts := b.subscribe(t, "salvage.alerts.>")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	put := func(id string, at time.Duration, status salvagetype.EnvelopeStatus, acked bool, left ...string) {
		r := kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: id, Job: "J", Chunk: 1, Category: salvagetype.CategoryPartialExecution, Status: status, CreatedAt: t0.Add(at)}}
		if acked {
			r.AckedBy = "ops"
		}
		for _, sys := range left {
			r.Left = append(r.Left, salvagetype.LeftEffect{Tool: "charge-payment", System: sys, JournalKey: "k"})
		}
		if err := b.stores.Envelopes.Put(b.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	put("E1", 0, salvagetype.EnvelopeResolved, false)
	put("E2", time.Minute, salvagetype.EnvelopeAbandoned, false)
	put("E3", 2*time.Minute, salvagetype.EnvelopeDeadEnd, false)
	put("E4", 2*time.Minute, salvagetype.EnvelopeOpen, false)
	put("E5", 2*time.Minute, salvagetype.EnvelopeEscalated, false, "payments")
	put("E6", 2*time.Minute, salvagetype.EnvelopeEscalated, true, "payments")
	put("E7", 2*time.Minute, salvagetype.EnvelopeEscalated, false, "wms")

	var mu sync.Mutex
	now := t0.Add(3 * time.Minute)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(d time.Duration) { mu.Lock(); now = t0.Add(d); mu.Unlock() }
	a := alerter.New(b.JS, b.stores, alerter.Config{Now: clock})

	check := func(want map[string]int) {
		t.Helper()
		raised, err := a.Check(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, al := range raised {
			got[al.Kind]++
		}
		for k, n := range want {
			if got[k] != n {
				t.Fatalf("raised %v, want %v", got, want)
			}
		}
		if len(raised) != sum(want) {
			t.Fatalf("raised %v, want %v", got, want)
		}
	}
	// 3 minutes in: five envelopes within five minutes is a burst; nothing
	// has been open 30 minutes or unacknowledged 15.
	check(map[string]int{recovery.AlertBurst: 1})
	// 14 minutes after the escalations: still quiet below the thresholds.
	set(16 * time.Minute)
	check(map[string]int{})
	// 17 minutes: the unacknowledged escalation with a charge left (E5);
	// E6 was acknowledged, E7 involves no money.
	set(17 * time.Minute)
	check(map[string]int{recovery.AlertUnacknowledged: 1})
	// 32 minutes: E4 open for 30 minutes.
	set(32 * time.Minute)
	check(map[string]int{recovery.AlertUnresolved: 1})
	// Nothing fires twice.
	set(2 * time.Hour)
	check(map[string]int{})

	salvagetest.Eventually(t, time.Minute, func() bool { return len(alerts()) == 3 }, "three alert events")
	for _, m := range alerts() {
		if m.Header.Get(salvagetype.HeaderMsgID) == "" {
			t.Errorf("alert %s without a dedup id", m.Subject)
		}
	}
	if rec, _, _ := b.stores.Envelopes.Get(b.ctx, "E5"); !rec.Alerted(recovery.AlertUnacknowledged) {
		t.Errorf("E5 does not remember its alert: %+v", rec)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
