package recovery

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

func TestFailureRunOpensOnFailuresInARowWithinTheWindow(t *testing.T) {
	t.Parallel()
	p := salvagetype.BreakerPolicy{Failures: 3, Window: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	var r FailureRun
	if r.Fail(p, t0) || r.Fail(p, t0.Add(time.Second)) {
		t.Fatal("tripped before 3 failures")
	}
	r.Reset() // a success in between
	if r.Fail(p, t0.Add(2*time.Second)) || r.Fail(p, t0.Add(3*time.Second)) {
		t.Fatal("a success must start the run over")
	}
	if !r.Fail(p, t0.Add(4*time.Second)) {
		t.Fatal("3 failures in a row within 10s must trip")
	}
	var spread FailureRun
	spread.Fail(p, t0)
	spread.Fail(p, t0.Add(9*time.Second))
	if spread.Fail(p, t0.Add(11*time.Second)) {
		t.Fatal("failures spread over more than the window must not trip")
	}
}

func TestBreakerAllows(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	p := salvagetype.BreakerPolicy{CoolDown: 30 * time.Second}
	var b kv.Breaker
	if BreakerAllows(b, "j.1") != VerdictAllow {
		t.Fatal("a breaker never written is closed")
	}
	Open(&b, p, now, "503")
	if BreakerAllows(b, "j.1") != verdictRefuse || b.Opens != 1 || !b.RetryAt.Equal(now.Add(30*time.Second)) {
		t.Fatalf("open breaker %+v must refuse", b)
	}
	HalfOpen(&b, "j.2", now.Add(31*time.Second))
	if BreakerAllows(b, "j.1") != verdictRefuse || BreakerAllows(b, "j.2") != VerdictAllow {
		t.Fatal("half-open lets only its probe through")
	}
	if ProbeOverdue(b, p, now.Add(60*time.Second)) || !ProbeOverdue(b, p, now.Add(62*time.Second)) {
		t.Fatal("a probe is overdue after one cool-down")
	}
	HalfOpen(&b, "", now)
	if BreakerAllows(b, "j.3") != VerdictTakeProbe || ProbeOverdue(b, p, now.Add(time.Hour)) {
		t.Fatal("an untaken probe goes to the first caller and is never overdue")
	}
	Close(&b)
	if BreakerAllows(b, "j.1") != VerdictAllow || b.Probe != "" {
		t.Fatal("closed lets everyone through")
	}
}

func TestBreakerErrorsAreTyped(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("crm-read: %w", &salvagetype.BreakerOpenError{System: "crm", State: salvagetype.BreakerOpen})
	if !errors.Is(err, salvagetype.ErrBreakerOpen) || ClassOf(err) != salvagetype.ClassBreakerOpen {
		t.Fatalf("class %s", ClassOf(err))
	}
	if sys, ok := BreakerSystem(err); !ok || sys != "crm" {
		t.Fatalf("system %q", sys)
	}
	if _, retry := (RetryPolicy{}).NextWait(err, 0, 0); retry {
		t.Fatal("a refused call must not be retried in the worker")
	}
	if CountsAgainstBreaker(err) || CountsAgainstBreaker(salvagetype.Permanent(400, errors.New("no"))) || CountsAgainstBreaker(salvagetype.RateLimited(time.Second, nil)) {
		t.Fatal("refusals, permanent answers and rate limits do not say a system is down")
	}
	if !CountsAgainstBreaker(salvagetype.Transient(503, nil)) || !CountsAgainstBreaker(salvagetype.Timeout(nil)) {
		t.Fatal("5xx and timeouts say a system is down")
	}
	if c, ok := salvagetype.ParseClass("breaker-open"); !ok || c != salvagetype.ClassBreakerOpen {
		t.Fatal("ParseClass")
	}
}
