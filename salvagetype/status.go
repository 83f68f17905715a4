package salvagetype

import (
	"strconv"
	"strings"
)

// JobStatus is where a job stands. Each value means one thing. A job's
// status is derived from its chunks; only cancellation is set from
// outside.
type JobStatus string

// Job statuses.
const (
	// JobRunning: some chunk has not reached an outcome.
	JobRunning JobStatus = "running"
	// JobDone: every chunk is done.
	JobDone JobStatus = "done"
	// JobPartial: every chunk is done, some without an optional stage.
	JobPartial JobStatus = "partial"
	// JobIncomplete: some chunk ended in a failure envelope; the job's
	// explanation names the chunks, stages and envelopes.
	JobIncomplete JobStatus = "incomplete"
	// JobCancelled: the job was cancelled; its chunks stopped.
	JobCancelled JobStatus = "cancelled"
)

// Finished reports whether s is an outcome (anything but JobRunning).
func (s JobStatus) Finished() bool { return s != JobRunning }

// ChunkStatus is where one chunk stands, as its checkpoint says.
type ChunkStatus string

// Chunk statuses; CancelledAtStage builds the cancelled ones.
const (
	// ChunkPending: queued, never started (or requeued).
	ChunkPending ChunkStatus = "pending"
	// ChunkRunning: a worker runs it.
	ChunkRunning ChunkStatus = "running"
	// ChunkDone: every stage ran.
	ChunkDone ChunkStatus = "done"
	// ChunkDeadLettered: its latest outcome is a failure envelope; the
	// envelope's own status says whether that is final.
	ChunkDeadLettered ChunkStatus = "dead-lettered"
	// ChunkHeld: parked while an external system's breaker is open.
	ChunkHeld ChunkStatus = "held"
	// ChunkAwaitingApproval: parked until a person approves.
	ChunkAwaitingApproval ChunkStatus = "awaiting-approval"
	// ChunkPaused: parked while its pipeline is paused.
	ChunkPaused ChunkStatus = "paused"
)

// cancelledPrefix starts every cancelled-at-stage-N status.
const cancelledPrefix = "cancelled-at-stage-"

// CancelledAtStage is the status of a chunk cancelled on entering stage
// (1-based); stage 0 means it never started.
func CancelledAtStage(stage int) ChunkStatus {
	return ChunkStatus(cancelledPrefix + strconv.Itoa(stage))
}

// Cancelled reports whether s is a cancelled-at-stage-N status, and N.
func (s ChunkStatus) Cancelled() (stage int, ok bool) {
	rest, ok := strings.CutPrefix(string(s), cancelledPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// IsCancelled reports whether s is a cancelled-at-stage-N status.
func (s ChunkStatus) IsCancelled() bool { return strings.HasPrefix(string(s), cancelledPrefix) }

// Terminal reports whether s is an outcome: done, cancelled or
// dead-lettered.
func (s ChunkStatus) Terminal() bool { return s.Outcome() != "" }

// Outcome is the outcome s counts as in its job's tallies: ChunkDone,
// ChunkDeadLettered, or OutcomeCancelled for every cancelled-at-stage-N;
// "" while the chunk has none.
func (s ChunkStatus) Outcome() ChunkStatus {
	switch {
	case s == ChunkDone, s == ChunkDeadLettered:
		return s
	case s.IsCancelled():
		return OutcomeCancelled
	}
	return ""
}

// OutcomeCancelled is the outcome every cancelled-at-stage-N status
// counts as (ChunkStatus.Outcome); no checkpoint holds it.
const OutcomeCancelled ChunkStatus = "cancelled"

// CallStatus is the state of one journaled call.
type CallStatus string

// Call statuses.
const (
	// CallInitiated: written before the call; left so by a crash, the
	// next run verifies a side effect or repeats a pure call.
	CallInitiated CallStatus = "INITIATED"
	// CallSucceeded: the call returned; its output is replayed on resume.
	CallSucceeded CallStatus = "SUCCEEDED"
	// CallFailed: the call failed; its error and class say how.
	CallFailed CallStatus = "FAILED"
	// CallUnknown: a side effect whose outcome is not known; verified
	// before anything else.
	CallUnknown CallStatus = "UNKNOWN"
	// CallCancelled: Salvage stopped the call before it was made, or a
	// pure call mid-flight (its job was cancelled or a sibling agent
	// failed). A later run makes it again.
	CallCancelled CallStatus = "CANCELLED"
	// CallCompensated: the call's effect was undone.
	CallCompensated CallStatus = "COMPENSATED"
)

// EnvelopeStatus is where a failure envelope stands. Each value means one
// thing.
type EnvelopeStatus string

// Envelope statuses.
const (
	// EnvelopeOpen: waiting for the recovery orchestrator.
	EnvelopeOpen EnvelopeStatus = "open"
	// EnvelopeRecovering: a strategy runs, or the chunk was requeued
	// (recovery or replay) and has not ended.
	EnvelopeRecovering EnvelopeStatus = "recovering"
	// EnvelopeResolved: the chunk finished (done, or cancelled with its
	// job), or a person resolved the envelope by hand.
	EnvelopeResolved EnvelopeStatus = "resolved"
	// EnvelopeSuperseded: the re-run chunk failed again; the later
	// envelope named in its superseded_by carries its fate.
	EnvelopeSuperseded EnvelopeStatus = "superseded"
	// EnvelopeEscalated: a person must act (effects left standing, or
	// recovery gave up); open until someone resolves it.
	EnvelopeEscalated EnvelopeStatus = "escalated"
	// EnvelopeDeadEnd: a permanent failure with no effects to undo.
	EnvelopeDeadEnd EnvelopeStatus = "dead-end"
	// EnvelopeAbandoned: every effect compensated, nothing left standing.
	EnvelopeAbandoned EnvelopeStatus = "abandoned"
)

// Final reports whether s is an outcome no strategy changes: resolved,
// superseded, escalated, dead-end or abandoned. An escalated envelope is
// final for Salvage and still open for a person (see Open).
func (s EnvelopeStatus) Final() bool {
	switch s {
	case EnvelopeResolved, EnvelopeSuperseded, EnvelopeEscalated, EnvelopeDeadEnd, EnvelopeAbandoned:
		return true
	}
	return false
}

// Open reports whether an envelope in s still needs Salvage or a person:
// open, recovering, or escalated and not yet resolved. The DLQ depth
// (salvage_dlq_depth) counts these.
func (s EnvelopeStatus) Open() bool {
	return s == EnvelopeOpen || s == EnvelopeRecovering || s == EnvelopeEscalated
}

// BreakerState is where an external system's circuit breaker stands.
type BreakerState string

// Breaker states, as the salvage_breakers bucket spells them.
const (
	// BreakerClosed: calls go through; failures are counted.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: calls fail at once and their chunks are held, until
	// the cool-down ends.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: one probe chunk may call; its success closes the
	// breaker, its failure opens it again.
	BreakerHalfOpen BreakerState = "half-open"
)

// PipelineState is whether a pipeline's chunks run, as `salvage
// pipelines` and the dashboard show it.
type PipelineState string

// Pipeline states.
const (
	// PipelineRunning: its chunks run.
	PipelineRunning PipelineState = "running"
	// PipelinePaused: its chunks park (ChunkPaused) until it resumes.
	PipelinePaused PipelineState = "paused"
)
