package recovery

import (
	"errors"
	"fmt"
	"testing"
	"time"

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

func TestBreakerErrorsAreTyped(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("crm-read: %w", &salvagetype.BreakerOpenError{System: "crm", State: salvagetype.BreakerOpen})
	if !errors.Is(err, salvagetype.ErrBreakerOpen) || ClassOf(err) != salvagetype.ClassBreakerOpen {
		t.Fatalf("class %s", ClassOf(err))
	}
	if be := (*salvagetype.BreakerOpenError)(nil); !errors.As(err, &be) || be.System != "crm" {
		t.Fatalf("system of %v", err)
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
