package salvagetype

import "time"

// AuditAction names an operator action the audit records.
type AuditAction string

// The operator actions. Each one a person (or a script acting for one)
// takes through the Client, the salvage.api service, the CLI or the
// dashboard is written to SALVAGE_AUDIT before it runs and again with its
// outcome.
const (
	AuditReplay      AuditAction = "replay"
	AuditResolve     AuditAction = "resolve"
	AuditAck         AuditAction = "ack"
	AuditBulk        AuditAction = "bulk"
	AuditApprove     AuditAction = "approve"
	AuditReject      AuditAction = "reject"
	AuditCancel      AuditAction = "cancel"
	AuditPause       AuditAction = "pause"
	AuditResume      AuditAction = "resume"
	AuditLimitSet    AuditAction = "limit-set"
	AuditLimitRemove AuditAction = "limit-remove"
)

// AuditActions lists every AuditAction.
var AuditActions = []AuditAction{AuditReplay, AuditResolve, AuditAck, AuditBulk, AuditApprove,
	AuditReject, AuditCancel, AuditPause, AuditResume, AuditLimitSet, AuditLimitRemove}

// AuditOutcome is how an audited action ended.
type AuditOutcome string

// Audit outcomes.
const (
	// AuditPending is an action asked for whose outcome is not recorded:
	// it is running, or the process taking it stopped before it could
	// say (the records it acts on are then the truth).
	AuditPending AuditOutcome = "pending"
	// AuditOK is an action that was carried out.
	AuditOK AuditOutcome = "ok"
	// AuditRefused is an action a rule refused: an envelope already
	// resolved or superseded, a replay Salvage refuses, a chunk not
	// awaiting approval, a job finished, an unknown id.
	AuditRefused AuditOutcome = "refused"
	// AuditFailed is an action that could not be carried out (the
	// deployment did not answer, say); it may be tried again.
	AuditFailed AuditOutcome = "failed"
)

// Actor is who took an operator action, as the audit records it.
type Actor struct {
	// Name is the person or script: a dashboard user, the NATS user of
	// a salvage.api request, or the name a caller gave.
	Name string `json:"name"`
	// Account is the NATS account a salvage.api request came from, as
	// the server stamped it (Nats-Request-Info), when it did.
	Account string `json:"account,omitempty"`
	// Via is the way in: "dashboard", "service" (salvage.api, so the
	// CLI) or "api" (a program's Client).
	Via string `json:"via"`
	// Role is the dashboard role the action was allowed under.
	Role string `json:"role,omitempty"`
	// Verified says Name was authenticated — a dashboard sign-in with
	// the user's own secret or the trusted proxy's header, or the NATS
	// server's stamp on a request from another account — rather than
	// given by the caller.
	Verified bool `json:"verified"`
}

// AuditEntry is one operator action on SALVAGE_AUDIT: who asked, when,
// for what, why, and how it ended.
type AuditEntry struct {
	// ID is the entry's ULID; its two messages (asked, then the outcome)
	// share it and its subject. A replay published by hand, which the
	// worker that took or refused it records, is hand-<partition>-<the
	// chunk message's stream sequence>, Via "nats".
	ID     string      `json:"id"`
	At     time.Time   `json:"at"`
	Actor  Actor       `json:"actor"`
	Action AuditAction `json:"action"`
	// The target: what the action names. An envelope's action also
	// names the envelope's job and chunk.
	Job      string `json:"job_id,omitempty"`
	Chunk    int    `json:"chunk,omitempty"`
	Envelope string `json:"envelope_id,omitempty"`
	Pipeline string `json:"pipeline,omitempty"`
	Limit    string `json:"limit,omitempty"`
	// Detail is what else the action carried: a bulk's filter and
	// counts, a limit's bounds.
	Detail string `json:"detail,omitempty"`
	// Reason is why, as the actor gave it.
	Reason  string       `json:"reason,omitempty"`
	Outcome AuditOutcome `json:"outcome"`
	// Error is why an action was refused or failed.
	Error string `json:"error,omitempty"`
	// DoneAt is when the outcome was recorded.
	DoneAt time.Time `json:"done_at,omitzero"`
}
