package streams

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// AuditRetentionDefault is how long SALVAGE_AUDIT keeps an operator
// action: a year.
const AuditRetentionDefault = 365 * 24 * time.Hour

// The audit's subjects: salvage.audit.<scope>.<key>.<action>.<id>, where
// scope is job, pipeline, limit or bulk, key the job id, pipeline name,
// limit key (<kind>.<name>: two tokens) or bulk action, action an
// AuditAction and id the entry's ULID. An action's two messages (asked,
// then the outcome) share the subject, and the stream keeps one message a
// subject: the outcome replaces the asking.
const (
	auditPrefix = "salvage.audit."
	auditAll    = auditPrefix + ">"
)

// Audit scopes: the first token after salvage.audit.
const (
	AuditScopeJob      = "job"
	AuditScopePipeline = "pipeline"
	AuditScopeLimit    = "limit"
	AuditScopeBulk     = "bulk"
)

// AuditSubject is the subject of audit entry id: an action on key of
// scope. key and action must be valid tokens (a limit key is two).
func AuditSubject(scope, key, action, id string) string {
	return auditPrefix + scope + "." + key + "." + action + "." + id
}

// AuditFilter filters the audit entries of key in scope; an empty key
// filters the whole scope, an empty scope every entry.
func AuditFilter(scope, key string) string {
	switch {
	case scope == "":
		return auditAll
	case key == "":
		return auditPrefix + scope + ".>"
	}
	return auditPrefix + scope + "." + key + ".>"
}

// AuditIDOf is the entry id a subject of the audit ends with.
func AuditIDOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// auditConfig is SALVAGE_AUDIT: limits retention for its own MaxAge, one
// message a subject so an action's outcome replaces its asking.
func auditConfig(retention time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: Audit, Description: "Operator actions: who, when, what, why and the outcome.",
		Subjects: []string{auditAll}, Retention: jetstream.LimitsPolicy, MaxAge: retention,
		MaxMsgsPerSubject: 1, AllowDirect: true, Duplicates: duplicateWindowDefault,
	}
}
