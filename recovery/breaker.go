package recovery

import (
	"context"
	"errors"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// BreakerSystem returns the system whose breaker refused err's call, and
// whether err is such a refusal.
func BreakerSystem(err error) (string, bool) {
	var be *salvagetype.BreakerOpenError
	if errors.As(err, &be) {
		return be.System, true
	}
	return "", false
}

// Gate guards the calls to external systems: a process's view of the
// breakers every worker shares. Turn.Tool asks it before each attempt of
// a call to a tool with a System, and tells it how the attempt went.
type Gate interface {
	// Allow returns nil when chunk (<job>.<chunk>) may call system now,
	// or an error wrapping ErrBreakerOpen.
	Allow(ctx context.Context, system, chunk string) error
	// Done reports the outcome of an attempt Allow let through.
	Done(ctx context.Context, system, chunk string, err error)
}

// CountsAgainstBreaker reports whether a failed call says its system is
// down: a transient failure (5xx, a reset connection) or a timeout. A rate
// limit, a permanent answer (the system worked and said no) and a call
// Salvage stopped do not count.
func CountsAgainstBreaker(err error) bool {
	if err == nil || errors.Is(err, salvagetype.ErrBreakerOpen) {
		return false
	}
	switch ClassOf(err) {
	case salvagetype.ClassTransient, salvagetype.ClassTimeout:
		return true
	}
	return false
}

// FailureRun counts one system's failures in a row in one process: a
// success starts it over, and so does a gap longer than the window
// between two failures. It is not safe for concurrent use.
type FailureRun struct {
	n     int
	first time.Time
}

// Fail counts a failure at now and reports whether p's threshold is
// reached: Failures in a row, the first no more than Window ago.
func (r *FailureRun) Fail(p salvagetype.BreakerPolicy, now time.Time) bool {
	p = p.WithDefaults()
	if r.n == 0 || now.Sub(r.first) > p.Window {
		r.n, r.first = 0, now
	}
	r.n++
	return r.n >= p.Failures
}

// Reset starts the run over: the system answered.
func (r *FailureRun) Reset() { r.n = 0 }

// breakerVerdict is what a breaker says of one call.
type breakerVerdict int

// Verdicts of BreakerAllows.
const (
	// VerdictAllow lets the call through.
	VerdictAllow breakerVerdict = iota
	// verdictRefuse fails the call fast: the breaker is open, or
	// half-open with another chunk as the probe.
	verdictRefuse
	// VerdictTakeProbe lets the call through once the caller has made
	// its chunk the probe of a half-open breaker, by CAS.
	VerdictTakeProbe
)

// BreakerAllows decides whether chunk may call the system of b now. A
// missing breaker (the zero value) is closed. An open breaker refuses
// even after its cool-down, until a holder moves it to half-open and
// picks the probe: only then may one chunk call.
func BreakerAllows(b kv.Breaker, chunk string) breakerVerdict {
	switch b.State {
	case salvagetype.BreakerOpen:
		return verdictRefuse
	case salvagetype.BreakerHalfOpen:
		switch b.Probe {
		case chunk:
			return VerdictAllow
		case "":
			return VerdictTakeProbe
		}
		return verdictRefuse
	}
	return VerdictAllow
}

// Open moves b to open at now for p's cool-down, for reason.
func Open(b *kv.Breaker, p salvagetype.BreakerPolicy, now time.Time, reason string) {
	p = p.WithDefaults()
	b.State, b.OpenedAt, b.RetryAt = salvagetype.BreakerOpen, now.UTC(), now.Add(p.CoolDown).UTC()
	b.Probe, b.ProbeAt, b.ProbePipeline, b.Reason = "", time.Time{}, "", reason
	b.Opens++
}

// Close moves b to closed.
func Close(b *kv.Breaker) {
	b.State, b.Probe, b.ProbeAt, b.ProbePipeline = salvagetype.BreakerClosed, "", time.Time{}, ""
}

// HalfOpen moves b to half-open with probe (empty: the first chunk to
// call takes it) at now.
func HalfOpen(b *kv.Breaker, probe string, now time.Time) {
	b.State, b.Probe, b.ProbeAt, b.ProbePipeline = salvagetype.BreakerHalfOpen, probe, now.UTC(), ""
}

// ProbeOverdue reports whether b's probe has had a whole cool-down
// without an answer (its worker died, or its chunk never called the
// system again): it counts as failed, and the breaker opens again. A
// half-open breaker nobody has called yet is not overdue.
func ProbeOverdue(b kv.Breaker, p salvagetype.BreakerPolicy, now time.Time) bool {
	p = p.WithDefaults()
	return b.State == salvagetype.BreakerHalfOpen && b.Probe != "" && now.Sub(b.ProbeAt) > p.CoolDown
}
