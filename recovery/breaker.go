package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// BreakerOpenError is the error a refused call returns.
type BreakerOpenError struct {
	// System is the external system whose breaker refused the call.
	System string
	// State is the breaker's state (open or half-open).
	State salvagetype.BreakerState
	// RetryAt ends the breaker's cool-down.
	RetryAt time.Time
}

// Error names the system and when the breaker may let a probe through.
func (e *BreakerOpenError) Error() string {
	return fmt.Sprintf("circuit breaker of %s is %s (probe after %s)", e.System, e.State, e.RetryAt.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrBreakerOpen) true.
func (e *BreakerOpenError) Is(target error) bool { return target == salvagetype.ErrBreakerOpen }

// BreakerSystem returns the system whose breaker refused err's call, and
// whether err is such a refusal.
func BreakerSystem(err error) (string, bool) {
	var be *BreakerOpenError
	if errors.As(err, &be) {
		return be.System, true
	}
	return "", false
}

// BreakerPolicy is when a breaker opens and how long it stays open. Zero
// fields take the defaults.
type BreakerPolicy struct {
	// Failures in a row, within Window, open the breaker. Default 5.
	Failures int
	// Window bounds how far apart those failures may be. Default 10s.
	Window time.Duration
	// CoolDown is how long the breaker stays open before one probe may
	// call the system. Default 30s.
	CoolDown time.Duration
}

// WithDefaults returns p with zero fields set to their defaults.
func (p BreakerPolicy) WithDefaults() BreakerPolicy {
	if p.Failures <= 0 {
		p.Failures = salvagetype.BreakerFailuresDefault
	}
	if p.Window <= 0 {
		p.Window = salvagetype.BreakerWindowDefault
	}
	if p.CoolDown <= 0 {
		p.CoolDown = salvagetype.BreakerCoolDownDefault
	}
	return p
}

// Validate reports a setting out of range.
func (p BreakerPolicy) Validate() error {
	if p.Failures < 0 || p.Window < 0 || p.CoolDown < 0 {
		return fmt.Errorf("recovery: BreakerPolicy fields must not be negative")
	}
	return nil
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
	case ClassTransient, ClassTimeout:
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
func (r *FailureRun) Fail(p BreakerPolicy, now time.Time) bool {
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
func Open(b *kv.Breaker, p BreakerPolicy, now time.Time, reason string) {
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
func ProbeOverdue(b kv.Breaker, p BreakerPolicy, now time.Time) bool {
	p = p.WithDefaults()
	return b.State == salvagetype.BreakerHalfOpen && b.Probe != "" && now.Sub(b.ProbeAt) > p.CoolDown
}
