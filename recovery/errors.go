package recovery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Class says how a failed call may be retried.
type Class int

// Error classes. Classification is always by type and status code, never by
// matching words in an error message.
const (
	// ClassTransient is a failure worth retrying soon: 5xx, a reset
	// connection. Unknown errors are transient.
	ClassTransient Class = iota
	// ClassRateLimited is a 429; the wait honours Retry-After.
	ClassRateLimited
	// ClassTimeout is a call that did not answer in time; its outcome is
	// unknown.
	ClassTimeout
	// ClassPermanent is a failure retrying cannot fix: a 400, a rejected
	// card. It is never retried.
	ClassPermanent
	// ClassCancelled is a call stopped because its job was cancelled or its
	// worker is shutting down. It is never retried.
	ClassCancelled
	// classPanic is an agent, tool, split or result function that
	// panicked. Like ClassPermanent it is never retried: the chunk goes to
	// the DLQ with the panic's value and stack.
	classPanic
	// classBreakerOpen is a call refused because its system's circuit
	// breaker is open: it never reached the system. It is not retried
	// inside the worker; the chunk is held until the breaker closes.
	classBreakerOpen
)

// classLast is the highest Class.
const classLast = classBreakerOpen

// ParseClass returns the Class whose String is name, and false (with
// ClassTransient) for a name no class has.
func ParseClass(name string) (Class, bool) {
	for c := ClassTransient; c <= classLast; c++ {
		if c.String() == name {
			return c, true
		}
	}
	return ClassTransient, false
}

// Permanent reports whether errors of class c end a chunk at once:
// ClassPermanent and classPanic.
func (c Class) Permanent() bool { return c == ClassPermanent || c == classPanic }

// String is the class name used in journal rows and checkpoints.
func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassRateLimited:
		return "rate-limited"
	case ClassTimeout:
		return "timeout"
	case ClassPermanent:
		return "permanent"
	case ClassCancelled:
		return "cancelled"
	case classPanic:
		return "panic"
	case classBreakerOpen:
		return "breaker-open"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Sentinels matched with errors.Is against any *CallError of that class.
var (

	// ErrJobCancelled is returned when a job was cancelled; the chunk ends
	// cancelled-at-stage-N, never retried.
	ErrJobCancelled = errors.New("job cancelled")
	// ErrBadEnvelope is returned by DecodeEnvelope for a DLQ message that
	// is not a usable failure envelope.
	ErrBadEnvelope = errors.New("not a failure envelope")

	// errSiblingFailed matches the cancellation of an agent whose sibling
	// in the same stage failed (see siblingFailedError).
	errSiblingFailed = errors.New("sibling agent failed")
)

// siblingFailedError is the cause an agent's context is cancelled with
// when another agent of its stage failed. Its calls stop and are recorded
// CANCELLED under their own keys, never FAILED with the sibling's error.
// It deliberately does not wrap that error: the class of a stopped call
// is ClassCancelled, whatever stopped it.
type siblingFailedError struct {
	// Agent is the sibling that failed.
	Agent string
}

// Error names the sibling.
func (e *siblingFailedError) Error() string {
	return "stopped: agent " + e.Agent + " failed in the same stage"
}

// Is makes errors.Is(err, errSiblingFailed) true.
func (e *siblingFailedError) Is(target error) bool { return target == errSiblingFailed }

// AgentError is a stage's failure attributed to the agent that failed and,
// when one of its calls failed, to that call. RunStage returns it, so the
// envelope names the agent and call that broke, not a sibling.
type AgentError struct {
	Agent string
	// Tool and Call are the failing call's tool and journal key; empty
	// when the agent failed outside a call.
	Tool, Call string
	Err        error
}

// Error reads "agent <name>: <cause>".
func (e *AgentError) Error() string { return "agent " + e.Agent + ": " + e.Err.Error() }

// Unwrap returns the cause, so ClassOf and errors.Is see through it.
func (e *AgentError) Unwrap() error { return e.Err }

// CallError is a failed external call with its class. Tools and models
// return it (through the constructors below) so retries and the DLQ router
// can decide without parsing text.
type CallError struct {
	Class Class
	// Status is the HTTP-like status code, when there is one.
	Status int
	// RetryAfter is the wait a rate limiter asked for.
	RetryAfter time.Duration
	// NotApplied says the system answered without acting on the call (it
	// refused it, or it never reached the system), so a side effect is
	// made again without being verified first. See NotApplied and
	// OutcomeUnknown.
	NotApplied bool
	// Err is the underlying error.
	Err error
}

// Error describes the class, status, wait and cause.
func (e *CallError) Error() string {
	msg := e.Class.String()
	if e.Status != 0 {
		msg = fmt.Sprintf("%s (status %d)", msg, e.Status)
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" retry after %s", e.RetryAfter)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying error.
func (e *CallError) Unwrap() error { return e.Err }

// Is matches the class sentinels.
func (e *CallError) Is(target error) bool {
	switch target {
	case salvagetype.ErrTransient:
		return e.Class == ClassTransient
	case salvagetype.ErrRateLimited:
		return e.Class == ClassRateLimited
	case salvagetype.ErrTimeout:
		return e.Class == ClassTimeout
	case salvagetype.ErrPermanent:
		return e.Class.Permanent()
	case salvagetype.ErrPanic:
		return e.Class == classPanic
	}
	return false
}

// Transient wraps err as a retryable failure with an optional status code.
func Transient(status int, err error) error {
	return &CallError{Class: ClassTransient, Status: status, Err: err}
}

// RateLimited wraps err as a 429 that asks to wait at least after.
func RateLimited(after time.Duration, err error) error {
	return &CallError{Class: ClassRateLimited, Status: 429, RetryAfter: after, Err: err}
}

// Timeout wraps err as a call whose outcome is unknown.
func Timeout(err error) error { return &CallError{Class: ClassTimeout, Err: err} }

// Permanent wraps err as a failure that must not be retried.
func Permanent(status int, err error) error {
	return &CallError{Class: ClassPermanent, Status: status, Err: err}
}

// NotApplied marks err as an answer the system gave without acting on the
// call: the request never reached it (no responders), or it refused the
// call before doing anything. A side-effect call that failed with it is
// retried without a verify. A plain error becomes a transient one.
func NotApplied(err error) error {
	var ce *CallError
	if errors.As(err, &ce) {
		c := *ce
		c.NotApplied = true
		return &c
	}
	return &CallError{Class: ClassTransient, NotApplied: true, Err: err}
}

// OutcomeUnknown reports whether a side-effect call that failed with err
// may have taken effect all the same, so that it must be verified before
// it is made again (invariant 9). Only a definite "not applied" is not
// unknown: an error marked NotApplied, a rate limit (the system refused
// the call), an open breaker (it never reached the system), and a
// permanent refusal other than 408, 409 or 5xx. No answer, a deadline
// passed, a 5xx, 408 or 409, a transient error and a panic are unknown.
func OutcomeUnknown(err error) bool {
	var ce *CallError
	if errors.As(err, &ce) && ce.NotApplied {
		return false
	}
	switch ClassOf(err) {
	case ClassRateLimited, classBreakerOpen:
		return false
	case ClassPermanent:
		s := StatusOf(err)
		return s == http.StatusRequestTimeout || s == http.StatusConflict || s >= 500
	}
	return true
}

// recovered turns a value recovered from a panic in where (an agent, a
// tool, a split or result function) into a classPanic error carrying the
// value and the stack, cut to streams.ErrorTextMax.
func recovered(where string, v any) error {
	msg := fmt.Sprintf("%s panicked: %v\n%s", where, v, debug.Stack())
	return &CallError{Class: classPanic, Err: errors.New(streams.Clip(msg, streams.ErrorTextMax))}
}

// ClassOf classifies err. A call stopped because a sibling agent failed
// is ClassCancelled; a call an open breaker refused is classBreakerOpen; a *CallError carries its class; a cancelled context
// is ClassCancelled; an expired context deadline is ClassTimeout; anything
// else is transient.
func ClassOf(err error) Class {
	var ce *CallError
	switch {
	case errors.Is(err, errSiblingFailed):
		return ClassCancelled
	case errors.Is(err, salvagetype.ErrBreakerOpen):
		return classBreakerOpen
	case errors.As(err, &ce):
		return ce.Class
	case errors.Is(err, ErrJobCancelled), errors.Is(err, context.Canceled):
		return ClassCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	}
	return ClassTransient
}

// retryAfter returns the wait a rate-limited error asked for.
func retryAfter(err error) time.Duration {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.RetryAfter
	}
	return 0
}

// StatusOf returns the status code a *CallError carries, or 0.
func StatusOf(err error) int {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.Status
	}
	return 0
}
