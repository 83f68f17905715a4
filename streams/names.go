package streams

import "strings"

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
	// Index holds the listing indexes: one message per envelope record
	// under its status, category and job, one per job record, so a
	// listing reads a page, never every record.
	Index = "SALVAGE_INDEX"
	// Audit holds the operator actions: who, when, what, why and the
	// outcome, one subject an action (see AuditSubject).
	Audit = "SALVAGE_AUDIT"
)

// Durable consumer names.
const (
	// LegacyWorkersConsumer is the one chunk consumer every worker shared
	// before worker pools: an upgraded process deletes it (its queued
	// chunks stay in the stream and go to the pools).
	LegacyWorkersConsumer = "workers"
	// LegacySplitterConsumer is the one job consumer every splitter shared
	// before worker pools; an upgraded process deletes it (its queued job
	// messages stay in the stream and go to the pipelines' splitters).
	LegacySplitterConsumer = "splitter"
	// DeadLetterConsumer turns max-deliveries advisories into envelopes.
	DeadLetterConsumer = "dead-letter"
	// RetentionConsumer reads the finished events on SALVAGE_EVENTS and
	// applies retention to each finished job once its window passed.
	RetentionConsumer = "retention"
	// LegacyRecoveryConsumer is the one DLQ consumer every orchestrator
	// shared before worker pools. An upgraded deployment keeps it, filtered
	// on the envelopes of that time (DLQLegacy), until they are settled.
	LegacyRecoveryConsumer = "recovery"
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
	// EventCancelled says a job was cancelled (by a person or its budget;
	// JobEvent.Reason says which): workers stop its running chunks at
	// their next stage. The job record is the truth; the event is how
	// workers hear of it without following every job record write.
	EventCancelled = "cancelled"
)

// workersPrefix begins the name of every chunk pool consumer.
const workersPrefix = "workers-"

// Pipeline is a pipeline's name: the subject its jobs are submitted on,
// the durable consumers only the processes running it bind, and the hold
// system its chunks wait on while it is paused.
type Pipeline string

// Subject is where a job for the pipeline is submitted:
// salvage.jobs.<pipeline>.
func (p Pipeline) Subject() string { return jobsPrefix + string(p) }

// Workers is the pipeline's chunk pool: the durable pull consumer on each
// partition's chunk stream, filtered on the pipeline's chunks, named
// workers-<pipeline>. Its redeliveries are tier 2.
func (p Pipeline) Workers() string { return workersPrefix + string(p) }

// PoolPipeline returns the pipeline of a chunk pool consumer's name, and
// false for any other consumer.
func PoolPipeline(consumer string) (string, bool) {
	p, ok := strings.CutPrefix(consumer, workersPrefix)
	return p, ok && p != ""
}

// splitterPrefix begins the name of every pipeline's job consumer.
const splitterPrefix = "splitter-"

// Splitter is the pipeline's job consumer: the durable pull consumer on
// SALVAGE_JOBS, filtered on its Subject, named splitter-<pipeline>.
func (p Pipeline) Splitter() string { return splitterPrefix + string(p) }

// recoveryPrefix begins the name of every pipeline's DLQ consumer.
const recoveryPrefix = "recovery-"

// Recovery is the pipeline's recovery pool: the durable pull consumer on
// SALVAGE_DLQ, filtered on its envelopes, named recovery-<pipeline>; only
// the processes running the pipeline (and so its verification and
// compensation tools) bind it.
func (p Pipeline) Recovery() string { return recoveryPrefix + string(p) }
