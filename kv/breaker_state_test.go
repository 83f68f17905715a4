package kv

import (
	"testing"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
)

func TestBreakerAllows(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	p := salvagetype.BreakerPolicy{CoolDown: 30 * time.Second}
	var b Breaker
	if b.Allows("j.1") != VerdictAllow {
		t.Fatal("a breaker never written is closed")
	}
	b.Open(p, now, "503")
	if b.Allows("j.1") != verdictRefuse || b.Opens != 1 || !b.RetryAt.Equal(now.Add(30*time.Second)) {
		t.Fatalf("open breaker %+v must refuse", b)
	}
	b.HalfOpen("j.2", now.Add(31*time.Second))
	if b.Allows("j.1") != verdictRefuse || b.Allows("j.2") != VerdictAllow {
		t.Fatal("half-open lets only its probe through")
	}
	if b.ProbeOverdue(p, now.Add(60*time.Second)) || !b.ProbeOverdue(p, now.Add(62*time.Second)) {
		t.Fatal("a probe is overdue after one cool-down")
	}
	b.HalfOpen("", now)
	if b.Allows("j.3") != VerdictTakeProbe || b.ProbeOverdue(p, now.Add(time.Hour)) {
		t.Fatal("an untaken probe goes to the first caller and is never overdue")
	}
	b.Close()
	if b.Allows("j.1") != VerdictAllow || b.Probe != "" {
		t.Fatal("closed lets everyone through")
	}
}
