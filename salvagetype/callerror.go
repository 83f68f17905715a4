package salvagetype

import (
	"fmt"
	"time"
)

// CallError is a failed external call with its class. Tools and models
// return it (through the root package's constructors: salvage.Transient,
// RateLimited, Timeout, Permanent, NotApplied) so retries and the DLQ
// router decide without parsing text.
type CallError struct {
	Class Class
	// Status is the HTTP-like status code, when there is one.
	Status int
	// RetryAfter is the wait a rate limiter asked for.
	RetryAfter time.Duration
	// NotApplied says the system answered without acting on the call (it
	// refused it, or it never reached the system), so a side effect is
	// made again without being verified first.
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
	case ErrTransient:
		return e.Class == ClassTransient
	case ErrRateLimited:
		return e.Class == ClassRateLimited
	case ErrTimeout:
		return e.Class == ClassTimeout
	case ErrPermanent:
		return e.Class.Permanent()
	case ErrPanic:
		return e.Class == ClassPanic
	}
	return false
}
