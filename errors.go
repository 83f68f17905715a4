package salvage

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
)

// Errors a tool or agent returns, built with the constructors below, say
// how a failure may be retried. Salvage classifies them by type and status
// code, never by the words in their messages.
var (
	// ErrTransient matches errors built with Transient: retried with
	// backoff (tier 1), then redelivered (tier 2).
	ErrTransient = salvagetype.ErrTransient
	// ErrRateLimited matches errors built with RateLimited.
	ErrRateLimited = salvagetype.ErrRateLimited
	// ErrTimeout matches errors built with Timeout: the outcome is
	// unknown, so a side effect is verified before it is repeated.
	ErrTimeout = salvagetype.ErrTimeout
	// ErrPermanent matches errors built with Permanent, and panics: never
	// retried; the chunk goes to the DLQ.
	ErrPermanent = salvagetype.ErrPermanent
	// ErrPanic matches a panic Salvage recovered in an agent, tool, split
	// or result function; the error carries the panic's value and stack.
	ErrPanic = salvagetype.ErrPanic
	// ErrBadInput is what a Split returns, wrapped, for input it cannot
	// use; the job is rejected (bad-input).
	ErrBadInput = salvagetype.ErrBadInput
	// ErrRetriesExhausted is returned by Turn.Tool when tier 1 gave up on
	// a retryable error; the chunk goes to tier 2.
	ErrRetriesExhausted = salvagetype.ErrRetriesExhausted
	// ErrBreakerOpen is returned by Turn.Tool, at once, for a call to a
	// system whose circuit breaker is open: the call never reached it.
	// An agent should return it as it is: its chunk is then held until
	// the breaker closes (or, in an optional stage, the stage is skipped).
	ErrBreakerOpen = salvagetype.ErrBreakerOpen
	// ErrOutputTooLarge matches a call or agent whose output is past
	// MaxOutput: it can never be journaled, so it fails permanently at
	// once (a side effect that answered so is verified, not taken as
	// undone).
	ErrOutputTooLarge = salvagetype.ErrOutputTooLarge
	// ErrBadUsage matches a reply whose usage is not a count of tokens
	// (negative, not a number, or past MaxUsageTokens): it fails the call
	// permanently, and is never counted.
	ErrBadUsage = salvagetype.ErrBadUsage
)

// Bounds of what one call may answer.
const (
	// MaxOutput is the largest output (encoded JSON) of one call or agent
	// the journal and checkpoints keep: 256 KiB.
	MaxOutput = salvagetype.MaxOutput
	// MaxUsageTokens bounds each count of tokens one call may report.
	MaxUsageTokens = salvagetype.MaxUsageTokens
	// ErrorTextMax is the longest error text a journal row, checkpoint,
	// envelope, event or reply keeps: 8 KiB (room for a panic's stack).
	ErrorTextMax = salvagetype.ErrorTextMax
)

// DefinitionError is the error behind ErrDefinitionDiffers: the pipeline,
// the fingerprint its workers run (Registered) and this process's (Ours),
// who registered the first and when, and the definition lines only one of
// them has (Diff).
type DefinitionError = salvagetype.DefinitionError

// BreakerOpenError is the error behind ErrBreakerOpen: which system's
// breaker refused the call, its state and when it lets a probe through.
type BreakerOpenError = salvagetype.BreakerOpenError

// Errors the Client returns.
var (
	// ErrInvalidConfig is returned by NewClient for a Config or Pipeline
	// that cannot run; the message names the field.
	ErrInvalidConfig = errors.New("salvage: invalid config")
	// ErrUnknownPipeline is returned by Submit for a pipeline this client
	// does not know; the job would be rejected.
	ErrUnknownPipeline = salvagetype.ErrUnknownPipeline
	// ErrUnknownJob is returned for a job id no record has.
	ErrUnknownJob = salvagetype.ErrUnknownJob
	// ErrJobFinished is returned by Cancel (409 from jobs.cancel, exit 1
	// from salvage cancel) for a job that already finished: nothing of it
	// runs, and a cancel would only forbid replaying its envelopes.
	ErrJobFinished = salvagetype.ErrJobFinished
	// ErrUnknownEnvelope is returned for an envelope id no record has.
	ErrUnknownEnvelope = salvagetype.ErrUnknownEnvelope
	// ErrAlreadyResolved is returned when replaying or resolving an
	// envelope that is resolved.
	ErrAlreadyResolved = salvagetype.ErrAlreadyResolved
	// ErrSuperseded is returned when replaying or resolving an envelope a
	// later one replaced; act on that one.
	ErrSuperseded = salvagetype.ErrSuperseded
	// ErrRejected is returned by Wait when the splitter rejected the job;
	// the message gives the reason.
	ErrRejected = errors.New("salvage: job rejected")
	// ErrNotStarted is returned by Stop on a client that was not started.
	ErrNotStarted = errors.New("salvage: client not started")
	// ErrInvalidToken is returned for an id (pipeline, job, envelope) that
	// cannot stand in a subject or key; see ValidateToken.
	ErrInvalidToken = salvagetype.ErrInvalidToken
	// ErrInvalidJob is returned by Submit for a job it cannot publish:
	// input that does not encode, a budget that is not a cap, or a
	// message over MaxPayload.
	ErrInvalidJob = salvagetype.ErrInvalidJob
	// ErrJobExists is returned by Submit (409 from jobs.submit, exit 1
	// from salvage submit) for a job id that already names another input:
	// a job id names one input. Submitting the same input again is not an
	// error: it returns the id.
	ErrJobExists = salvagetype.ErrJobExists
	// ErrDefinitionDiffers is returned by Start when a pipeline this
	// client runs (as a worker or recovery) is registered with another
	// definition: its stages, agents, tools, effects or Version differ
	// from what the pool's processes run. The error (a *DefinitionError)
	// names both fingerprints and what differs; Config.Upgrades rolls a
	// new definition out on purpose.
	ErrDefinitionDiffers = salvagetype.ErrDefinitionDiffers
	// ErrReplayRefused is returned by Replay (409 from dlq.replay) for a
	// replay Salvage will not run because it could leak or repeat an
	// effect: the chunk's job was cancelled, a recovery strategy is
	// running on the envelope right now, or some of the chunk's effects
	// were compensated while others still stand. The message says which.
	ErrReplayRefused = salvagetype.ErrReplayRefused
	// ErrAuditUnavailable is returned for an operator action that could
	// not be put on record in SALVAGE_AUDIT first (provision the
	// deployment again if the stream is missing): the action is not
	// taken.
	ErrAuditUnavailable = salvagetype.ErrAuditUnavailable
)

// Transient is a failure worth retrying soon (a 5xx, a reset connection),
// with its status code if it has one.
func Transient(status int, err error) error { return salvagetype.Transient(status, err) }

// RateLimited is a 429: retried no sooner than after (a Retry-After).
func RateLimited(after time.Duration, err error) error { return salvagetype.RateLimited(after, err) }

// Overloaded is a 529 (the server is overloaded): retried no sooner than
// after, like a rate limit.
func Overloaded(after time.Duration, err error) error { return salvagetype.Overloaded(after, err) }

// Timeout is a call that did not answer in time: its outcome is unknown.
func Timeout(err error) error { return salvagetype.Timeout(err) }

// NotApplied marks err (built with the constructors here, or a plain
// error, which becomes transient) as a failure the system answered without
// acting on the call: the request never reached it, or it refused it
// before doing anything. A side effect that failed with it is asked again
// without a verify. Any other failure of a side effect — no answer, a
// 5xx, 408 or 409, a transient error, a panic — may have taken effect and
// is verified before the call is made again.
func NotApplied(err error) error { return salvagetype.NotApplied(err) }

// Permanent is a failure retrying cannot fix (a 400, a refused card): the
// chunk goes to the DLQ at once.
func Permanent(status int, err error) error { return salvagetype.Permanent(status, err) }

// CallError is the error the constructors above build: its Status is the
// HTTP-like status code and RetryAfter the wait a rate limiter asked for.
// Use errors.As to read them, errors.Is with ErrTransient and the others
// to test the class.
type CallError = salvagetype.CallError

// RetryAfter reads how long a server asked to wait in h, as of now:
// Retry-After-Ms, else Retry-After in seconds or as an HTTP date (a date
// past is no wait). A tool that calls an HTTP API passes it to
// RateLimited or Overloaded; false when h asks for nothing.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms >= 0 {
		return time.Duration(ms * float64(time.Millisecond)), true
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
