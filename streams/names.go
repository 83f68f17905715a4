package streams

// Stream names. They are part of the contract: operators use them with the
// stock `nats` CLI.
const (
	Jobs   = "SALVAGE_JOBS"
	Chunks = "SALVAGE_CHUNKS"
	// Backlog holds the chunks of a large job not yet admitted to
	// SALVAGE_CHUNKS: a job keeps at most its window of chunks queued
	// ahead of other jobs' work (see Options.ChunkWindow).
	Backlog    = "SALVAGE_BACKLOG"
	Hold       = "SALVAGE_HOLD"
	Results    = "SALVAGE_RESULTS"
	DLQ        = "SALVAGE_DLQ"
	Advisories = "SALVAGE_ADVISORIES"
	Events     = "SALVAGE_EVENTS"
)

// Durable consumer names.
const (
	// WorkersConsumer is the pull consumer chunk workers share on Chunks.
	WorkersConsumer = "workers"
	// SplitterConsumer is the pull consumer splitters share on Jobs.
	SplitterConsumer = "splitter"
	// DeadLetterConsumer turns max-deliveries advisories into envelopes.
	DeadLetterConsumer = "dead-letter"
	// RecoveryConsumer is the recovery orchestrators' consumer on the DLQ.
	RecoveryConsumer = "recovery"
)

// Header names carried on Salvage messages.
const (
	HeaderMsgID       = "Nats-Msg-Id"
	HeaderTraceParent = "traceparent"
	HeaderJob         = "Salvage-Job"
	HeaderChunk       = "Salvage-Chunk"
	HeaderRecoveryOf  = "Salvage-Recovery-Of"
	HeaderReplayOf    = "Salvage-Replay-Of"
	HeaderReason      = "Salvage-Reason"
	// HeaderApprovedBy, HeaderApprovedStage and HeaderApprovalNote carry
	// an approval on the chunk message it releases: the worker that takes
	// it records the approval in the checkpoint, in the same CAS.
	HeaderApprovedBy    = "Salvage-Approved-By"
	HeaderApprovedStage = "Salvage-Approved-Stage"
	HeaderApprovalNote  = "Salvage-Approval-Note"
	// HeaderEnvelope names the envelope an escalation is about.
	HeaderEnvelope = "Salvage-Envelope"
)

// Event kinds published on salvage.events.<job>.<kind>.
const (
	EventAccepted = "accepted"
	EventProgress = "progress"
	EventFinished = "finished"
	// EventRejected is a job's own rejection (see Rejection.JobID).
	EventRejected = "rejected"
	// EventApproval says a chunk waits for a person's approval (see
	// ApprovalEvent).
	EventApproval = "approval"
)
