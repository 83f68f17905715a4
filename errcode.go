package salvage

import (
	"context"
	"errors"
	"strconv"
)

// ErrorCodeHeader carries, on a failed salvage.api request, the stable
// name of what went wrong (ErrorCode), beside the micro service's numeric
// Nats-Service-Error-Code.
const ErrorCodeHeader = "Salvage-Error-Code"

// errorCodes name the errors a caller may act on, with the numeric code
// the service answers them with (CodeMalformed, CodeUnknown,
// CodeAlreadyResolved, CodeTooLarge; CodeInternal for the rest): the one
// table the service, the dashboard (ErrorStatus) and the audit (a refusal
// is an error with a code below CodeInternal) read. The first row err
// wraps names it.
var errorCodes = []struct {
	err        error
	name, code string
}{
	{ErrUnknownJob, "unknown_job", CodeUnknown},
	{ErrUnknownEnvelope, "unknown_envelope", CodeUnknown},
	{ErrUnknownPipeline, "unknown_pipeline", CodeUnknown},
	{ErrUnknownLimit, "unknown_limit", CodeUnknown},
	{ErrAlreadyResolved, "already_resolved", CodeAlreadyResolved},
	{ErrSuperseded, string(EnvelopeSuperseded), CodeAlreadyResolved},
	{ErrReplayRefused, "replay_refused", CodeAlreadyResolved},
	{ErrNotAwaitingApproval, "not_awaiting_approval", CodeAlreadyResolved},
	{ErrJobFinished, "job_finished", CodeAlreadyResolved},
	{ErrJobExists, "job_exists", CodeAlreadyResolved},
	{ErrAuditUnavailable, "audit_unavailable", CodeInternal},
	{ErrLimitsNotProvisioned, "not_provisioned", CodeInternal},
	{ErrNotProvisioned, "not_provisioned", CodeInternal},
	{ErrBadFilter, "bad_filter", CodeMalformed},
	{ErrBadBulk, "bad_bulk", CodeMalformed},
	{ErrInvalidLimit, "invalid_limit", CodeMalformed},
	{ErrInvalidToken, "invalid_token", CodeMalformed},
	{ErrInvalidJob, "invalid_job", CodeMalformed},
	{errMalformed, "malformed", CodeMalformed},
	{errTooLarge, "too_large", CodeTooLarge},
	{context.DeadlineExceeded, "timeout", CodeInternal},
}

// errorCodeOf is err's row: its name and numeric code, and whether a row
// names it ("error" and CodeInternal when none does).
func errorCodeOf(err error) (name, code string, known bool) {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.name, c.code, true
		}
	}
	return "error", CodeInternal, false
}

// ErrorCode is the stable name of what err is, for a script: unknown_job,
// unknown_envelope, unknown_pipeline, unknown_limit, already_resolved,
// superseded, replay_refused, not_awaiting_approval, job_finished,
// job_exists, audit_unavailable, not_provisioned, bad_filter, bad_bulk,
// invalid_limit, invalid_token, invalid_job, malformed, too_large,
// timeout; "error" for anything else. The names never change; new ones
// may come.
func ErrorCode(err error) string {
	name, _, _ := errorCodeOf(err)
	return name
}

// ErrorStatus is the HTTP status of err, the numeric code the service
// answers it with: 400 malformed, 404 unknown, 409 already so or refused,
// 413 too large, 500 anything else.
func ErrorStatus(err error) int {
	_, code, _ := errorCodeOf(err)
	n, _ := strconv.Atoi(code)
	return n
}

// refusal reports whether err is a refusal by a rule (a code below
// CodeInternal: malformed, unknown, already so, too large), not a
// failure.
func refusal(err error) bool {
	_, code, _ := errorCodeOf(err)
	return code != CodeInternal
}
