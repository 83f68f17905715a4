package salvage

import "github.com/salvagehq/salvage/salvagetype"

// JobStatus is where a job stands. Each value means one thing.
type JobStatus = salvagetype.JobStatus

// Job statuses.
const (
	// JobRunning: some chunk has not reached an outcome.
	JobRunning = salvagetype.JobRunning
	// JobDone: every chunk is done.
	JobDone = salvagetype.JobDone
	// JobPartial: every chunk is done, some without an optional stage.
	JobPartial = salvagetype.JobPartial
	// JobIncomplete: some chunk ended in a failure envelope; the job's
	// Explanation names the chunks, stages and envelopes.
	JobIncomplete = salvagetype.JobIncomplete
	// JobCancelled: the job was cancelled; its chunks stopped.
	JobCancelled = salvagetype.JobCancelled
)

// ChunkStatus is where one chunk stands, as its checkpoint says.
type ChunkStatus = salvagetype.ChunkStatus

// Chunk statuses; CancelledAtStage builds the cancelled ones.
const (
	// ChunkPending: queued, never started (or requeued).
	ChunkPending = salvagetype.ChunkPending
	// ChunkRunning: a worker runs it.
	ChunkRunning = salvagetype.ChunkRunning
	// ChunkDone: every stage ran.
	ChunkDone = salvagetype.ChunkDone
	// ChunkDeadLettered: its latest outcome is a failure envelope.
	ChunkDeadLettered = salvagetype.ChunkDeadLettered
	// ChunkHeld: parked while an external system's breaker is open.
	ChunkHeld = salvagetype.ChunkHeld
	// ChunkAwaitingApproval: parked until a person approves.
	ChunkAwaitingApproval = salvagetype.ChunkAwaitingApproval
	// ChunkPaused: parked while its pipeline is paused.
	ChunkPaused = salvagetype.ChunkPaused
)

// OutcomeCancelled is the outcome every cancelled-at-stage-N status counts
// as in a job's tallies (ChunkStatus.Outcome); no chunk holds it.
const OutcomeCancelled = salvagetype.OutcomeCancelled

// CancelledAtStage is the status of a chunk cancelled on entering stage
// (1-based); stage 0 means it never started.
func CancelledAtStage(stage int) ChunkStatus { return salvagetype.CancelledAtStage(stage) }

// CallStatus is the state of one journaled call.
type CallStatus = salvagetype.CallStatus

// Call statuses.
const (
	// CallInitiated: written before the call; left so by a crash, the
	// next run verifies a side effect or repeats a pure call.
	CallInitiated = salvagetype.CallInitiated
	// CallSucceeded: the call returned; its output is replayed on resume.
	CallSucceeded = salvagetype.CallSucceeded
	// CallFailed: the call failed; Error and ErrorClass say how.
	CallFailed = salvagetype.CallFailed
	// CallUnknown: a side effect whose outcome is not known; verified
	// before anything else.
	CallUnknown = salvagetype.CallUnknown
	// CallCancelled: Salvage stopped the call (its job was cancelled or
	// a sibling agent failed).
	CallCancelled = salvagetype.CallCancelled
	// CallCompensated: the call's effect was undone.
	CallCompensated = salvagetype.CallCompensated
)

// Category is what kind of failure an envelope holds.
type Category = salvagetype.Category

// Failure categories, decided from typed errors and the journal, never
// from error text.
const (
	// CategoryTransientNetwork: transient errors outlasted both tiers;
	// the chunk resumes from its checkpoint.
	CategoryTransientNetwork = salvagetype.CategoryTransientNetwork
	// CategoryExternalSystemDown: a system answered 503 to exhaustion;
	// the chunk resumes after Config.CoolDown.
	CategoryExternalSystemDown = salvagetype.CategoryExternalSystemDown
	// CategoryToolTimeout: a call was in flight when its worker died or
	// timed out; it is verified, then the envelope is reclassified.
	CategoryToolTimeout = salvagetype.CategoryToolTimeout
	// CategoryPartialExecution: a permanent failure after reversible
	// effects only; they are compensated and the chunk abandoned (or run
	// again in a new epoch, for a Tool marked RetryableAfterCompensation).
	CategoryPartialExecution = salvagetype.CategoryPartialExecution
	// CategoryCompensationNeeded: a permanent failure after an
	// irreversible effect; what is reversible is compensated and a person
	// is asked about the rest.
	CategoryCompensationNeeded = salvagetype.CategoryCompensationNeeded
	// CategoryBudgetExceeded: the job's budget ran out.
	CategoryBudgetExceeded = salvagetype.CategoryBudgetExceeded
	// CategoryUnrecoverable: a permanent failure with no effects: a dead
	// end.
	CategoryUnrecoverable = salvagetype.CategoryUnrecoverable
)

// Strategy is what the recovery orchestrator does with an envelope.
type Strategy = salvagetype.Strategy

// Recovery strategies.
const (
	// StrategyResume requeues the chunk; it resumes from its checkpoint
	// and journal.
	StrategyResume = salvagetype.StrategyResume
	// StrategyCompensateAndRetry undoes the chunk's effects newest first,
	// then runs it fresh in a new epoch.
	StrategyCompensateAndRetry = salvagetype.StrategyCompensateAndRetry
	// StrategyCompensateAndAbandon undoes the chunk's effects newest first
	// and abandons it.
	StrategyCompensateAndAbandon = salvagetype.StrategyCompensateAndAbandon
	// StrategyEscalate hands the envelope to a person
	// (salvage.escalations.<category>), naming the effects left standing.
	StrategyEscalate = salvagetype.StrategyEscalate
	// StrategyDeadEnd marks a failure nothing can fix and nothing needs
	// undoing.
	StrategyDeadEnd = salvagetype.StrategyDeadEnd
	// StrategyVerify asks the external systems about calls whose outcome
	// is unknown, then reclassifies.
	StrategyVerify = salvagetype.StrategyVerify
)

// EnvelopeStatus is where a failure envelope stands. Each value means one
// thing.
type EnvelopeStatus = salvagetype.EnvelopeStatus

// Envelope statuses.
const (
	// EnvelopeOpen: waiting for the recovery orchestrator.
	EnvelopeOpen = salvagetype.EnvelopeOpen
	// EnvelopeRecovering: a strategy runs, or the chunk was requeued and
	// has not ended.
	EnvelopeRecovering = salvagetype.EnvelopeRecovering
	// EnvelopeResolved: the chunk finished, or a person resolved it
	// (Envelope.ResolvedBy says which).
	EnvelopeResolved = salvagetype.EnvelopeResolved
	// EnvelopeSuperseded: the re-run chunk failed again; SupersededBy
	// names the envelope that carries its fate.
	EnvelopeSuperseded = salvagetype.EnvelopeSuperseded
	// EnvelopeEscalated: a person must act; open until resolved.
	EnvelopeEscalated = salvagetype.EnvelopeEscalated
	// EnvelopeDeadEnd: a permanent failure with no effects to undo.
	EnvelopeDeadEnd = salvagetype.EnvelopeDeadEnd
	// EnvelopeAbandoned: every effect compensated, nothing left standing.
	EnvelopeAbandoned = salvagetype.EnvelopeAbandoned
)

// BreakerState is where an external system's circuit breaker stands.
type BreakerState = salvagetype.BreakerState

// Breaker states, as the salvage_breakers bucket spells them.
const (
	// BreakerClosed: calls go through; failures are counted.
	BreakerClosed = salvagetype.BreakerClosed
	// BreakerOpen: calls fail at once and their chunks are held, until
	// the cool-down ends.
	BreakerOpen = salvagetype.BreakerOpen
	// BreakerHalfOpen: one probe chunk may call; its success closes the
	// breaker, its failure opens it again.
	BreakerHalfOpen = salvagetype.BreakerHalfOpen
)

// EventKind is the kind of one event of a chunk's timeline (ChunkEvent.Kind).
type EventKind = salvagetype.EventKind

// The kinds of a ChunkEvent, as the trace shows them.
const (
	// EventDelivered: a worker took a delivery of the chunk's message.
	EventDelivered = salvagetype.EventDelivered
	// EventHeld: parked while a system's breaker is open (Detail names it).
	EventHeld = salvagetype.EventHeld
	// EventAwaitingApproval: parked before a stage until a person answers.
	EventAwaitingApproval = salvagetype.EventAwaitingApproval
	// EventApproved: a person approved the stage it waited before
	// (Detail: who, and their note).
	EventApproved = salvagetype.EventApproved
	// EventPaused: parked while its pipeline is paused.
	EventPaused = salvagetype.EventPaused
	// EventCompensated: recovery undid one of its effects (Detail says
	// which, with what).
	EventCompensated = salvagetype.EventCompensated
	// EventDone, EventDeadLettered (Detail: the envelope) and
	// EventCancelled are outcomes.
	EventDone         = salvagetype.EventDone
	EventDeadLettered = salvagetype.EventDeadLettered
	EventCancelled    = salvagetype.EventCancelled
)

// PipelineState is whether a pipeline's chunks run (PipelineStatus.Paused).
type PipelineState = salvagetype.PipelineState

// Pipeline states.
const (
	// PipelineRunning: its chunks run.
	PipelineRunning = salvagetype.PipelineRunning
	// PipelinePaused: its chunks park until it resumes.
	PipelinePaused = salvagetype.PipelinePaused
)
