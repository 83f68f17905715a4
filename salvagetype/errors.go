package salvagetype

import (
	"errors"
	"fmt"
)

// Errors a caller matches with errors.Is. The root package re-exports each
// under the same name (salvage.ErrTransient).
var (
	// ErrBreakerOpen matches a call refused because its system's circuit
	// breaker is open (or half-open, and the call is not the probe). The call
	// never reached the system. A chunk that meets it is held, not retried;
	// an optional stage that meets it is skipped.
	ErrBreakerOpen = errors.New("circuit breaker open")
	// ErrTransient matches transient call errors.
	ErrTransient = errors.New("transient error")
	// ErrRateLimited matches rate-limited call errors.
	ErrRateLimited = errors.New("rate limited")
	// ErrTimeout matches call timeouts.
	ErrTimeout = errors.New("call timed out")
	// ErrPermanent matches permanent call errors, panics included.
	ErrPermanent = errors.New("permanent error")
	// ErrPanic matches a recovered panic: an agent, tool, split or result
	// function that panicked fails its chunk permanently, with the stack.
	ErrPanic = errors.New("panic")
	// ErrRetriesExhausted is returned by the executor when tier 1 gave up on
	// a retryable error; the chunk goes to tier 2.
	ErrRetriesExhausted = errors.New("tier-1 retries exhausted")
	// ErrUnknownPipeline is returned for a pipeline name nobody registered.
	ErrUnknownPipeline = errors.New("unknown pipeline")
	// ErrBadInput is returned when a pipeline cannot use a job's input.
	ErrBadInput = errors.New("bad job input")
	// ErrOutputTooLarge matches a call or agent whose output is past
	// MaxOutput: it can never be journaled, so it fails
	// permanently at once (status 502 for a call: a reply that breaks the
	// contract, whose effect, if it has one, may stand and is verified).
	ErrOutputTooLarge = errors.New("output too large to journal")
	// ErrBadUsage matches a reply whose reported usage is not a count of
	// tokens (negative, or past MaxUsageTokens): a broken reply,
	// failed permanently with status 502.
	ErrBadUsage = errors.New("usage out of range")

	// ErrNeedsProvisioning is returned when a stream, bucket or consumer is
	// missing or configured otherwise than this version of Salvage asks,
	// and the server refused this user the request that would create or
	// update it: an administrator runs `salvage provision` (Client.Provision).
	ErrNeedsProvisioning = errors.New("needs provisioning by an administrator (salvage provision)")
	// ErrInvalidJob is returned when a job message cannot be submitted: no
	// input, or a job_id that is not a string.
	ErrInvalidJob = errors.New("bad job message")
	// ErrJobExists is returned for a submission under a job id that
	// already names another input (another pipeline or another input;
	// see InputHash): a job id names one input, so it is refused.
	ErrJobExists = errors.New("job id names another input")

	// ErrNotAwaitingApproval is returned by Approve for a chunk that does not
	// wait for a person's approval (or whose message is not parked yet).
	ErrNotAwaitingApproval = errors.New("chunk is not awaiting approval")
	// ErrBadBulk is returned for a bulk action that cannot run: an unknown
	// action, a limit out of range, or no filter (a bulk action on every
	// envelope is too easy to run by mistake; the rule is the same for the
	// API, the CLI and the dashboard).
	ErrBadBulk = errors.New("bad bulk action")
	// ErrUnknownJob is returned for a job id no record has.
	ErrUnknownJob = errors.New("unknown job")
	// ErrJobFinished is returned by Cancel for a job that already finished
	// (done, partial, incomplete): nothing of it runs, and a cancel would
	// only forbid replaying its envelopes. Resolve those instead.
	ErrJobFinished = errors.New("job already finished")
	// ErrUnknownEnvelope is returned for an envelope id no record has.
	ErrUnknownEnvelope = errors.New("unknown envelope")
	// ErrAlreadyResolved is returned when replaying or resolving an
	// envelope that is already resolved.
	ErrAlreadyResolved = errors.New("envelope already resolved")
	// ErrSuperseded is returned when replaying or resolving an envelope a
	// later envelope of the same chunk replaced; act on that one.
	ErrSuperseded = errors.New("envelope superseded")
	// ErrReplayRefused is returned for a replay Salvage will not run because
	// it could leak or repeat an effect: the chunk's job was cancelled, a
	// recovery strategy is running on the envelope right now, or the chunk's
	// effects were compensated while others of it still stand (resuming would
	// finish on undone effects; running it fresh would repeat those that
	// stand). The message says which; a person resolves such an envelope.
	ErrReplayRefused = errors.New("replay refused")
	// ErrAuditUnavailable is returned for an operator action that could
	// not be put on record in SALVAGE_AUDIT (the stream is missing: the
	// deployment was provisioned before it existed; or the server did not
	// answer). The action is not taken: nothing happens off the record.
	ErrAuditUnavailable = errors.New("the audit stream SALVAGE_AUDIT cannot record the action")

	// ErrDefinitionDiffers is returned when a pipeline is registered with
	// another definition than this process runs; the error says what
	// differs.
	ErrDefinitionDiffers = errors.New("pipeline definition differs from the registered one")
	// ErrLimitsNotProvisioned is returned by the limit methods of a
	// deployment provisioned before salvage_limits existed; its workers run
	// unlimited until it is provisioned again (salvage provision).
	// It wraps ErrNotProvisioned (the same text as before).
	ErrLimitsNotProvisioned = fmt.Errorf("salvage_limits is %w", ErrNotProvisioned)
	// ErrNotProvisioned is returned when a stream or bucket a call needs
	// does not exist: the deployment was never provisioned (salvage
	// provision, or a process allowed to provision), or it was removed.
	ErrNotProvisioned = errors.New("not provisioned: run salvage provision (or start a process allowed to provision)")
)
