package salvagetype

// Category is what kind of failure an envelope holds. Categories are
// decided from typed errors and the journal, never from error text, and
// are subject tokens of salvage.dlq.<category>.<pipeline>.<job>.<chunk>.
type Category string

// Failure categories.
const (
	// CategoryTransientNetwork: transient errors outlasted both tiers;
	// the chunk resumes from its checkpoint.
	CategoryTransientNetwork Category = "TRANSIENT_NETWORK"
	// CategoryExternalSystemDown: a system answered 503 to exhaustion;
	// the chunk resumes after the cool-down.
	CategoryExternalSystemDown Category = "EXTERNAL_SYSTEM_DOWN"
	// CategoryToolTimeout: a call was in flight when its worker died or
	// timed out; it is verified, then the envelope is reclassified.
	CategoryToolTimeout Category = "TOOL_TIMEOUT"
	// CategoryPartialExecution: a permanent failure after reversible
	// effects only; they are compensated and the chunk abandoned (or run
	// again in a new epoch, for a tool marked retryable after
	// compensation).
	CategoryPartialExecution Category = "PARTIAL_EXECUTION"
	// CategoryCompensationNeeded: a permanent failure after an
	// irreversible effect; what is reversible is compensated and a person
	// is asked about the rest.
	CategoryCompensationNeeded Category = "COMPENSATION_NEEDED"
	// CategoryBudgetExceeded: the job's budget ran out.
	CategoryBudgetExceeded Category = "BUDGET_EXCEEDED"
	// CategoryUnrecoverable: a permanent failure with no effects: a dead
	// end.
	CategoryUnrecoverable Category = "UNRECOVERABLE"
)

// Strategy is what the recovery orchestrator does with an envelope.
type Strategy string

// Recovery strategies.
const (
	// StrategyResume requeues the chunk; it resumes from its checkpoint
	// and journal.
	StrategyResume Strategy = "RESUME_FROM_CHECKPOINT"
	// StrategyCompensateAndRetry undoes the chunk's effects newest first,
	// then runs it fresh in a new epoch.
	StrategyCompensateAndRetry Strategy = "COMPENSATE_AND_RETRY"
	// StrategyCompensateAndAbandon undoes the chunk's effects newest first
	// and abandons it.
	StrategyCompensateAndAbandon Strategy = "COMPENSATE_AND_ABANDON"
	// StrategyEscalate hands the envelope to a person
	// (salvage.escalations.<category>), naming the effects left standing.
	StrategyEscalate Strategy = "ESCALATE_TO_HUMAN"
	// StrategyDeadEnd marks a failure nothing can fix and nothing needs
	// undoing.
	StrategyDeadEnd Strategy = "DEAD_END"
	// StrategyVerify asks the external systems about calls whose outcome
	// is unknown, then reclassifies.
	StrategyVerify Strategy = "VERIFY_THEN_RECLASSIFY"
)

// Compensates reports whether the strategy undoes the chunk's effects,
// newest first.
func (s Strategy) Compensates() bool {
	return s == StrategyCompensateAndRetry || s == StrategyCompensateAndAbandon
}

// Resumes reports whether the strategy runs the chunk again.
func (s Strategy) Resumes() bool { return s == StrategyResume || s == StrategyCompensateAndRetry }

// EventKind is the kind of one event of a chunk's timeline.
type EventKind string

// Chunk event kinds.
const (
	// EventDelivered: a worker took a delivery of the chunk's message.
	EventDelivered EventKind = "delivered"
	// EventHeld: parked while a system's breaker is open (the detail
	// names it).
	EventHeld EventKind = "held"
	// EventAwaitingApproval: parked before a stage until a person answers.
	EventAwaitingApproval EventKind = "awaiting-approval"
	// EventApproved: a person approved the stage it waited before (the
	// detail: who, and their note).
	EventApproved EventKind = "approved"
	// EventPaused: parked while its pipeline is paused.
	EventPaused EventKind = "paused"
	// EventCompensated: recovery undid one of its effects (the detail
	// says which, with what).
	EventCompensated EventKind = "compensated"
	// EventDone, EventDeadLettered (the detail: the envelope) and
	// EventCancelled are outcomes.
	EventDone         EventKind = "done"
	EventDeadLettered EventKind = "dead-lettered"
	EventCancelled    EventKind = "cancelled"
)

// LimitKind is what a rate limit's key names: salvage_limits keys are
// <kind>.<name>.
type LimitKind string

// Limit kinds.
const (
	// LimitSystem limits every call to an external system: the tools
	// whose system is the key's name (a model provider's endpoint, a
	// payment API).
	LimitSystem LimitKind = "system"
	// LimitTool limits the calls of one tool (one model).
	LimitTool LimitKind = "tool"
	// LimitTenant limits the work of one tenant's jobs: its chunks in
	// flight and the calls they make.
	LimitTenant LimitKind = "tenant"
)
