package salvage

import (
	"strconv"
	"strings"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
)

// JobStatus is where a job stands. Each value means one thing.
type JobStatus string

// Job statuses.
const (
	// JobRunning: some chunk has not reached an outcome.
	JobRunning JobStatus = kv.JobRunning
	// JobDone: every chunk is done.
	JobDone JobStatus = kv.JobDone
	// JobPartial: every chunk is done, some without an optional stage.
	JobPartial JobStatus = kv.JobPartial
	// JobIncomplete: some chunk ended in a failure envelope; the job's
	// Explanation names the chunks, stages and envelopes.
	JobIncomplete JobStatus = kv.JobIncomplete
	// JobCancelled: the job was cancelled; its chunks stopped.
	JobCancelled JobStatus = kv.JobCancelled
)

// Finished reports whether s is an outcome (anything but JobRunning).
func (s JobStatus) Finished() bool { return s != JobRunning }

// ChunkStatus is where one chunk stands, as its checkpoint says.
type ChunkStatus string

// Chunk statuses; CancelledAtStage builds the cancelled ones.
const (
	// ChunkPending: queued, never started (or requeued).
	ChunkPending ChunkStatus = kv.StatusPending
	// ChunkRunning: a worker runs it.
	ChunkRunning ChunkStatus = kv.StatusRunning
	// ChunkDone: every stage ran.
	ChunkDone ChunkStatus = kv.StatusDone
	// ChunkDeadLettered: its latest outcome is a failure envelope.
	ChunkDeadLettered ChunkStatus = kv.StatusDeadLettered
	// ChunkHeld: parked while an external system's breaker is open.
	ChunkHeld ChunkStatus = kv.StatusHeld
	// ChunkAwaitingApproval: parked until a person approves.
	ChunkAwaitingApproval ChunkStatus = kv.StatusAwaitingApproval
)

// CancelledAtStage is the status of a chunk cancelled on entering stage
// (1-based); stage 0 means it never started.
func CancelledAtStage(stage int) ChunkStatus { return ChunkStatus(kv.CancelledAtStage(stage)) }

// Cancelled reports whether s is a cancelled-at-stage-N status, and N.
func (s ChunkStatus) Cancelled() (stage int, ok bool) {
	rest, ok := strings.CutPrefix(string(s), "cancelled-at-stage-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// Terminal reports whether s is an outcome: done, cancelled or
// dead-lettered.
func (s ChunkStatus) Terminal() bool { return kv.Outcome(string(s)) != "" }

// CallStatus is the state of one journaled call.
type CallStatus string

// Call statuses.
const (
	// CallInitiated: written before the call; left so by a crash, the
	// next run verifies a side effect or repeats a pure call.
	CallInitiated CallStatus = kv.CallInitiated
	// CallSucceeded: the call returned; its output is replayed on resume.
	CallSucceeded CallStatus = kv.CallSucceeded
	// CallFailed: the call failed; Error and ErrorClass say how.
	CallFailed CallStatus = kv.CallFailed
	// CallUnknown: a side effect whose outcome is not known; verified
	// before anything else.
	CallUnknown CallStatus = kv.CallUnknown
	// CallCancelled: Salvage stopped the call (its job was cancelled or
	// a sibling agent failed).
	CallCancelled CallStatus = kv.CallCancelled
	// CallCompensated: the call's effect was undone.
	CallCompensated CallStatus = kv.CallCompensated
)

// Category is what kind of failure an envelope holds.
type Category string

// Failure categories (README, "Envelope categories").
const (
	CategoryTransientNetwork   Category = recovery.CategoryTransientNetwork
	CategoryExternalSystemDown Category = recovery.CategoryExternalSystemDown
	CategoryToolTimeout        Category = recovery.CategoryToolTimeout
	CategoryPartialExecution   Category = recovery.CategoryPartialExecution
	CategoryCompensationNeeded Category = recovery.CategoryCompensationNeeded
	CategoryBudgetExceeded     Category = recovery.CategoryBudgetExceeded
	CategoryUnrecoverable      Category = recovery.CategoryUnrecoverable
)

// Strategy is what the recovery orchestrator does with an envelope.
type Strategy string

// Recovery strategies.
const (
	StrategyResume               Strategy = recovery.StrategyResume
	StrategyCompensateAndRetry   Strategy = recovery.StrategyCompensateAndRetry
	StrategyCompensateAndAbandon Strategy = recovery.StrategyCompensateAndAbandon
	StrategyEscalate             Strategy = recovery.StrategyEscalate
	StrategyDeadEnd              Strategy = recovery.StrategyDeadEnd
	StrategyVerify               Strategy = recovery.StrategyVerify
)

// EnvelopeStatus is where a failure envelope stands. Each value means one
// thing.
type EnvelopeStatus string

// Envelope statuses.
const (
	// EnvelopeOpen: waiting for the recovery orchestrator.
	EnvelopeOpen EnvelopeStatus = kv.EnvelopeOpen
	// EnvelopeRecovering: a strategy runs, or the chunk was requeued and
	// has not ended.
	EnvelopeRecovering EnvelopeStatus = kv.EnvelopeRecovering
	// EnvelopeResolved: the chunk finished, or a person resolved it
	// (Envelope.ResolvedBy says which).
	EnvelopeResolved EnvelopeStatus = kv.EnvelopeResolved
	// EnvelopeSuperseded: the re-run chunk failed again; SupersededBy
	// names the envelope that carries its fate.
	EnvelopeSuperseded EnvelopeStatus = kv.EnvelopeSuperseded
	// EnvelopeEscalated: a person must act; open until resolved.
	EnvelopeEscalated EnvelopeStatus = kv.EnvelopeEscalated
	// EnvelopeDeadEnd: a permanent failure with no effects to undo.
	EnvelopeDeadEnd EnvelopeStatus = kv.EnvelopeDeadEnd
	// EnvelopeAbandoned: every effect compensated, nothing left standing.
	EnvelopeAbandoned EnvelopeStatus = kv.EnvelopeAbandoned
)

// Final reports whether s is an outcome no strategy changes: resolved,
// superseded, escalated, dead-end or abandoned. An escalated envelope is
// final for Salvage and still open for a person (see Open).
func (s EnvelopeStatus) Final() bool {
	return kv.EnvelopeRecord{Status: string(s)}.Final()
}

// Open reports whether an envelope in s still needs Salvage or a person:
// open, recovering, or escalated and not yet resolved. The DLQ depth
// (salvage_dlq_depth) counts these.
func (s EnvelopeStatus) Open() bool {
	return kv.EnvelopeRecord{Status: string(s)}.Open()
}
