package salvage

import (
	"context"
	"errors"
)

// ErrorCodeHeader carries, on a failed salvage.api request, the stable
// name of what went wrong (ErrorCode), beside the micro service's numeric
// Nats-Service-Error-Code.
const ErrorCodeHeader = "Salvage-Error-Code"

// errorCodes name the errors a script may act on; the first that err
// wraps names it.
var errorCodes = []struct {
	err  error
	code string
}{
	{ErrUnknownJob, "unknown_job"},
	{ErrUnknownEnvelope, "unknown_envelope"},
	{ErrUnknownPipeline, "unknown_pipeline"},
	{ErrUnknownLimit, "unknown_limit"},
	{ErrAlreadyResolved, "already_resolved"},
	{ErrSuperseded, string(EnvelopeSuperseded)},
	{ErrReplayRefused, "replay_refused"},
	{ErrNotAwaitingApproval, "not_awaiting_approval"},
	{ErrJobFinished, "job_finished"},
	{ErrJobExists, "job_exists"},
	{ErrAuditUnavailable, "audit_unavailable"},
	{ErrLimitsNotProvisioned, "not_provisioned"},
	{ErrNotProvisioned, "not_provisioned"},
	{ErrBadFilter, "bad_filter"},
	{ErrBadBulk, "bad_bulk"},
	{ErrInvalidLimit, "invalid_limit"},
	{ErrInvalidToken, "invalid_token"},
	{ErrInvalidJob, "invalid_job"},
	{errMalformed, "malformed"},
	{errTooLarge, "too_large"},
	{context.DeadlineExceeded, "timeout"},
}

// ErrorCode is the stable name of what err is, for a script: unknown_job,
// unknown_envelope, unknown_pipeline, unknown_limit, already_resolved,
// superseded, replay_refused, not_awaiting_approval, job_finished,
// job_exists, audit_unavailable, not_provisioned, bad_filter, bad_bulk,
// invalid_limit, invalid_token, invalid_job, malformed, too_large,
// timeout; "error" for anything else. The names never change; new ones
// may come.
func ErrorCode(err error) string {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "error"
}
