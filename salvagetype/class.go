package salvagetype

import "fmt"

// Class says how a failed call may be retried. Its String is the
// error_class journal rows, checkpoints and envelopes carry.
type Class int

// Permanent reports whether errors of class c end a chunk at once:
// ClassPermanent and ClassPanic.
func (c Class) Permanent() bool { return c == ClassPermanent || c == ClassPanic }

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
	case ClassPanic:
		return "panic"
	case ClassBreakerOpen:
		return "breaker-open"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

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
	// ClassPanic is an agent, tool, split or result function that
	// panicked. Like ClassPermanent it is never retried: the chunk goes to
	// the DLQ with the panic's value and stack.
	ClassPanic
	// ClassBreakerOpen is a call refused because its system's circuit
	// breaker is open: it never reached the system. It is not retried
	// inside the worker; the chunk is held until the breaker closes.
	ClassBreakerOpen
)

// classLast is the highest Class.
const classLast = ClassBreakerOpen

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
