package salvagetype

import (
	"errors"
	"fmt"
	"time"
)

// CallError is a failed external call with its class. Tools and models
// return it (through the constructors below, which the root package
// re-exports: Transient, RateLimited, Overloaded, Timeout, Permanent,
// NotApplied) so retries and the DLQ
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

// Transient is a failure worth retrying soon (a 5xx, a reset connection),
// with its status code if it has one.
func Transient(status int, err error) error {
	return &CallError{Class: ClassTransient, Status: status, Err: err}
}

// RateLimited is a 429: retried no sooner than after (a Retry-After).
func RateLimited(after time.Duration, err error) error {
	return &CallError{Class: ClassRateLimited, Status: 429, RetryAfter: after, Err: err}
}

// Overloaded is a 529 (the server is overloaded): retried no sooner than
// after, like a rate limit.
func Overloaded(after time.Duration, err error) error {
	return &CallError{Class: ClassRateLimited, Status: 529, RetryAfter: after, Err: err}
}

// Timeout is a call that did not answer in time: its outcome is unknown.
func Timeout(err error) error {
	return &CallError{Class: ClassTimeout, Err: err}
}

// Permanent is a failure retrying cannot fix (a 400, a refused card): the
// chunk goes to the DLQ at once.
func Permanent(status int, err error) error {
	return &CallError{Class: ClassPermanent, Status: status, Err: err}
}

// NotApplied marks err (built with the constructors here, or a plain
// error, which becomes transient) as a failure the system answered without
// acting on the call: the request never reached it, or it refused it
// before doing anything. A side effect that failed with it is asked again
// without a verify. Any other failure of a side effect — no answer, a
// 5xx, 408 or 409, a transient error, a panic — may have taken effect and
// is verified before the call is made again.
func NotApplied(err error) error {
	var ce *CallError
	if errors.As(err, &ce) {
		c := *ce
		c.NotApplied = true
		return &c
	}
	return &CallError{Class: ClassTransient, NotApplied: true, Err: err}
}
