package recovery

import (
	"context"
	"errors"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
)

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
