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
	// ErrInvalidTool is returned by NewTools for a tool that cannot be
	// registered: no name, no call, a reversible effect without a compensation
	// tool, a side effect without a way to verify it.
	ErrInvalidTool = errors.New("invalid tool")
	// ErrDiverged is returned when an agent makes a different call (another
	// tool or another input) at a journal key that already holds a row: the
	// old row is kept, never overwritten.
	ErrDiverged = errors.New("agent diverged from its journal")
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

// OutcomeUnknown reports whether a side-effect call that failed with err
// may have taken effect all the same, so that it must be verified before
// it is made again (invariant 9). Only a definite "not applied" is not
// unknown: an error marked NotApplied, a rate limit (the system refused
// the call), an open breaker (it never reached the system), and a
// permanent refusal other than 408, 409 or 5xx. No answer, a deadline
// passed, a 5xx, 408 or 409, a transient error and a panic are unknown.
func OutcomeUnknown(err error) bool {
	var ce *salvagetype.CallError
	if errors.As(err, &ce) && ce.NotApplied {
		return false
	}
	switch ClassOf(err) {
	case salvagetype.ClassRateLimited, salvagetype.ClassBreakerOpen:
		return false
	case salvagetype.ClassPermanent:
		s := StatusOf(err)
		return s == http.StatusRequestTimeout || s == http.StatusConflict || s >= 500
	}
	return true
}

// recovered turns a value recovered from a panic in where (an agent, a
// tool, a split or result function) into a ClassPanic error carrying the
// value and the stack, cut to salvagetype.ErrorTextMax.
func recovered(where string, v any) error {
	msg := fmt.Sprintf("%s panicked: %v\n%s", where, v, debug.Stack())
	return &salvagetype.CallError{Class: salvagetype.ClassPanic, Err: errors.New(streams.Clip(msg, salvagetype.ErrorTextMax))}
}

// ClassOf classifies err. A call stopped because a sibling agent failed
// is ClassCancelled; a call an open breaker refused is ClassBreakerOpen; a *CallError carries its class; a cancelled context
// is ClassCancelled; an expired context deadline is ClassTimeout; anything
// else is transient.
func ClassOf(err error) salvagetype.Class {
	var ce *salvagetype.CallError
	switch {
	case errors.Is(err, errSiblingFailed):
		return salvagetype.ClassCancelled
	case errors.Is(err, salvagetype.ErrBreakerOpen):
		return salvagetype.ClassBreakerOpen
	case errors.As(err, &ce):
		return ce.Class
	case errors.Is(err, ErrJobCancelled), errors.Is(err, context.Canceled):
		return salvagetype.ClassCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return salvagetype.ClassTimeout
	}
	return salvagetype.ClassTransient
}

// retryAfter returns the wait a rate-limited error asked for.
func retryAfter(err error) time.Duration {
	var ce *salvagetype.CallError
	if errors.As(err, &ce) {
		return ce.RetryAfter
	}
	return 0
}

// StatusOf returns the status code a *CallError carries, or 0.
func StatusOf(err error) int {
	var ce *salvagetype.CallError
	if errors.As(err, &ce) {
		return ce.Status
	}
	return 0
}
