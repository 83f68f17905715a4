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
	JobRunning = JobStatus(kv.JobRunning)
	// JobDone: every chunk is done.
	JobDone = JobStatus(kv.JobDone)
	// JobPartial: every chunk is done, some without an optional stage.
	JobPartial = JobStatus(kv.JobPartial)
	// JobIncomplete: some chunk ended in a failure envelope; the job's
	// Explanation names the chunks, stages and envelopes.
	JobIncomplete = JobStatus(kv.JobIncomplete)
	// JobCancelled: the job was cancelled; its chunks stopped.
	JobCancelled = JobStatus(kv.JobCancelled)
)

// Finished reports whether s is an outcome (anything but JobRunning).
func (s JobStatus) Finished() bool { return s != JobRunning }

// ChunkStatus is where one chunk stands, as its checkpoint says.
type ChunkStatus string

// Chunk statuses; CancelledAtStage builds the cancelled ones.
const (
	// ChunkPending: queued, never started (or requeued).
	ChunkPending = ChunkStatus(kv.StatusPending)
	// ChunkRunning: a worker runs it.
	ChunkRunning = ChunkStatus(kv.StatusRunning)
	// ChunkDone: every stage ran.
	ChunkDone = ChunkStatus(kv.StatusDone)
	// ChunkDeadLettered: its latest outcome is a failure envelope.
	ChunkDeadLettered = ChunkStatus(kv.StatusDeadLettered)
	// ChunkHeld: parked while an external system's breaker is open.
	ChunkHeld = ChunkStatus(kv.StatusHeld)
	// ChunkAwaitingApproval: parked until a person approves.
	ChunkAwaitingApproval = ChunkStatus(kv.StatusAwaitingApproval)
	// ChunkPaused: parked while its pipeline is paused.
	ChunkPaused ChunkStatus = "paused"
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
	CallInitiated = CallStatus(kv.CallInitiated)
	// CallSucceeded: the call returned; its output is replayed on resume.
	CallSucceeded = CallStatus(kv.CallSucceeded)
	// CallFailed: the call failed; Error and ErrorClass say how.
	CallFailed = CallStatus(kv.CallFailed)
	// CallUnknown: a side effect whose outcome is not known; verified
	// before anything else.
	CallUnknown = CallStatus(kv.CallUnknown)
	// CallCancelled: Salvage stopped the call (its job was cancelled or
	// a sibling agent failed).
	CallCancelled = CallStatus(kv.CallCancelled)
	// CallCompensated: the call's effect was undone.
	CallCompensated = CallStatus(kv.CallCompensated)
)

// Category is what kind of failure an envelope holds.
type Category string

// Failure categories, decided from typed errors and the journal, never
// from error text.
const (
	// CategoryTransientNetwork: transient errors outlasted both tiers;
	// the chunk resumes from its checkpoint.
	CategoryTransientNetwork = Category(recovery.CategoryTransientNetwork)
	// CategoryExternalSystemDown: a system answered 503 to exhaustion;
	// the chunk resumes after Config.CoolDown.
	CategoryExternalSystemDown = Category(recovery.CategoryExternalSystemDown)
	// CategoryToolTimeout: a call was in flight when its worker died or
	// timed out; it is verified, then the envelope is reclassified.
	CategoryToolTimeout = Category(recovery.CategoryToolTimeout)
	// CategoryPartialExecution: a permanent failure after reversible
	// effects only; they are compensated and the chunk abandoned (or run
	// again in a new epoch, for a Tool marked RetryableAfterCompensation).
	CategoryPartialExecution = Category(recovery.CategoryPartialExecution)
	// CategoryCompensationNeeded: a permanent failure after an
	// irreversible effect; what is reversible is compensated and a person
	// is asked about the rest.
	CategoryCompensationNeeded = Category(recovery.CategoryCompensationNeeded)
	// CategoryBudgetExceeded: the job's budget ran out.
	CategoryBudgetExceeded = Category(recovery.CategoryBudgetExceeded)
	// CategoryUnrecoverable: a permanent failure with no effects: a dead
	// end.
	CategoryUnrecoverable = Category(recovery.CategoryUnrecoverable)
)

// Strategy is what the recovery orchestrator does with an envelope.
type Strategy string

// Recovery strategies.
const (
	// StrategyResume requeues the chunk; it resumes from its checkpoint
	// and journal.
	StrategyResume = Strategy(recovery.StrategyResume)
	// StrategyCompensateAndRetry undoes the chunk's effects newest first,
	// then runs it fresh in a new epoch.
	StrategyCompensateAndRetry = Strategy(recovery.StrategyCompensateAndRetry)
	// StrategyCompensateAndAbandon undoes the chunk's effects newest first
	// and abandons it.
	StrategyCompensateAndAbandon = Strategy(recovery.StrategyCompensateAndAbandon)
	// StrategyEscalate hands the envelope to a person
	// (salvage.escalations.<category>), naming the effects left standing.
	StrategyEscalate = Strategy(recovery.StrategyEscalate)
	// StrategyDeadEnd marks a failure nothing can fix and nothing needs
	// undoing.
	StrategyDeadEnd = Strategy(recovery.StrategyDeadEnd)
	// StrategyVerify asks the external systems about calls whose outcome
	// is unknown, then reclassifies.
	StrategyVerify = Strategy(recovery.StrategyVerify)
)

// EnvelopeStatus is where a failure envelope stands. Each value means one
// thing.
type EnvelopeStatus string

// Envelope statuses.
const (
	// EnvelopeOpen: waiting for the recovery orchestrator.
	EnvelopeOpen = EnvelopeStatus(kv.EnvelopeOpen)
	// EnvelopeRecovering: a strategy runs, or the chunk was requeued and
	// has not ended.
	EnvelopeRecovering = EnvelopeStatus(kv.EnvelopeRecovering)
	// EnvelopeResolved: the chunk finished, or a person resolved it
	// (Envelope.ResolvedBy says which).
	EnvelopeResolved = EnvelopeStatus(kv.EnvelopeResolved)
	// EnvelopeSuperseded: the re-run chunk failed again; SupersededBy
	// names the envelope that carries its fate.
	EnvelopeSuperseded = EnvelopeStatus(kv.EnvelopeSuperseded)
	// EnvelopeEscalated: a person must act; open until resolved.
	EnvelopeEscalated = EnvelopeStatus(kv.EnvelopeEscalated)
	// EnvelopeDeadEnd: a permanent failure with no effects to undo.
	EnvelopeDeadEnd = EnvelopeStatus(kv.EnvelopeDeadEnd)
	// EnvelopeAbandoned: every effect compensated, nothing left standing.
	EnvelopeAbandoned = EnvelopeStatus(kv.EnvelopeAbandoned)
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

// BreakerState is where an external system's circuit breaker stands.
type BreakerState string

// Breaker states, as the salvage_breakers bucket spells them.
const (
	// BreakerClosed: calls go through; failures are counted.
	BreakerClosed = BreakerState(kv.BreakerClosed)
	// BreakerOpen: calls fail at once and their chunks are held, until
	// the cool-down ends.
	BreakerOpen = BreakerState(kv.BreakerOpen)
	// BreakerHalfOpen: one probe chunk may call; its success closes the
	// breaker, its failure opens it again.
	BreakerHalfOpen = BreakerState(kv.BreakerHalfOpen)
)

// The kinds of a ChunkEvent, as the trace shows them.
const (
	// EventDelivered: a worker took a delivery of the chunk's message.
	EventDelivered = kv.EventDelivered
	// EventHeld: parked while a system's breaker is open (Detail names it).
	EventHeld = kv.EventHeld
	// EventAwaitingApproval: parked before a stage until a person answers.
	EventAwaitingApproval = kv.EventAwaitingApproval
	// EventApproved: a person approved the stage it waited before
	// (Detail: who, and their note).
	EventApproved = kv.EventApproved
	// EventPaused: parked while its pipeline is paused.
	EventPaused = kv.EventPaused
	// EventCompensated: recovery undid one of its effects (Detail says
	// which, with what).
	EventCompensated = kv.EventCompensated
	// EventDone, EventDeadLettered (Detail: the envelope) and
	// EventCancelled are outcomes.
	EventDone         = kv.EventDone
	EventDeadLettered = kv.EventDeadLettered
	EventCancelled    = kv.EventCancelled
)
