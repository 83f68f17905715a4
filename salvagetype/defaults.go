package salvagetype

import "time"

// Defaults and bounds. The root package re-exports each under the same
// name (salvage.ConcurrencyDefault); a zero Config field takes its default.
const (
	// AlertBurstCountDefault, AlertBurstWindowDefault, AlertUnresolvedDefault
	// and AlertUnackedDefault are the default alert rules: a burst of
	// envelopes in a window, an envelope unresolved or unacknowledged that
	// long.
	AlertBurstCountDefault  = 3
	AlertBurstWindowDefault = 5 * time.Minute
	AlertUnresolvedDefault  = 30 * time.Minute
	AlertUnackedDefault     = 15 * time.Minute
	// BreakerFailuresDefault failures of one external system within
	// BreakerWindowDefault open its circuit breaker for
	// BreakerCoolDownDefault.
	BreakerFailuresDefault = 5
	BreakerWindowDefault   = 10 * time.Second
	BreakerCoolDownDefault = 30 * time.Second
	// MaxRecoveriesDefault is how many recoveries a chunk gets across all
	// its envelopes before the next envelope escalates (invariant 7).
	MaxRecoveriesDefault = 3
	// MaxStrategyAttemptsDefault is how often a failing strategy is tried
	// before the envelope escalates.
	MaxStrategyAttemptsDefault = 3
	// RetriesDefault, RetryBaseDefault, RetryMaxDefault and
	// RetryTotalDefault are tier 1's defaults: retries of one call, the
	// first and the largest backoff (full jitter), and the time all of a
	// call's attempts may take.
	RetriesDefault    = 3
	RetryBaseDefault  = time.Second
	RetryMaxDefault   = 4 * time.Second
	RetryTotalDefault = 30 * time.Second

	// MaxOutput is the largest output of one call or agent a journal row
	// or checkpoint keeps (256 KiB, as encoded JSON): a larger reply can
	// never be journaled, so it fails its call permanently at once.
	MaxOutput = 256 << 10
	// MaxUsageTokens bounds the tokens one call may report in each of its
	// prompt and completion counts; more is a broken reply, not usage.
	MaxUsageTokens = 1_000_000_000
	// PartitionsMax bounds the partitions of a deployment.
	PartitionsMax = 64
	// AckWaitDefault is how long a chunk may go without an ack or a
	// heartbeat before JetStream redelivers it (tier 2).
	AckWaitDefault = 10 * time.Second
	// MaxDeliverDefault is how many deliveries a chunk gets before it is
	// dead-lettered.
	MaxDeliverDefault = 3

	// AlertIntervalDefault is how often the alert rules are evaluated.
	AlertIntervalDefault = 30 * time.Second
	// SweepIntervalDefault is how often the sweeper looks for exhausted chunks
	// whose advisory never came.
	SweepIntervalDefault = 15 * time.Second
	// ReleaseRampStart is the rate, in chunks a second, at which one holder
	// process returns a system's held chunks once its breaker closed;
	// it doubles every ReleaseRampDouble the breaker stays closed. A system that
	// just came back gets its backlog gradually instead of all at once.
	ReleaseRampStart  = 4.0
	ReleaseRampDouble = 2 * time.Second
	// UnknownPipelineWaitDefault is how long a job for a pipeline no process
	// has ever run waits in SALVAGE_JOBS before it is rejected
	// (unknown-pipeline): long enough for a deployment's first worker of a new
	// pipeline to start.
	UnknownPipelineWaitDefault = 30 * time.Second
	// CoolDownDefault is how long an EXTERNAL_SYSTEM_DOWN envelope waits
	// before its chunk resumes (until breakers decide it).
	CoolDownDefault = 30 * time.Second
	// MaxPayloadDefault is the largest job message Salvage accepts (512
	// KiB), below the server's 1 MiB max_payload. It also bounds each
	// chunk message, so an envelope carrying one fits a message too.
	MaxPayloadDefault = 512 << 10
	// MaxChunksDefault is how many chunks one job may split into, unless
	// its pipeline says otherwise (Pipeline.MaxChunks).
	MaxChunksDefault = 10_000
	// ChunkWindowDefault is how many chunks of one job wait in
	// SALVAGE_CHUNKS at once; the rest wait in SALVAGE_BACKLOG and each
	// chunk a worker starts admits the next. A job submitted behind a
	// large one therefore waits behind at most this many of its chunks.
	ChunkWindowDefault = 16
	// ErrorTextMax is the longest error text a journal row, checkpoint,
	// envelope, event or reply keeps (room for a panic's stack).
	ErrorTextMax = 8 << 10
	// ConcurrencyDefault is how many chunks one worker runs at once.
	ConcurrencyDefault = 4
	// DrainTimeoutDefault bounds how long SIGTERM waits for in-flight
	// chunks before releasing them.
	DrainTimeoutDefault = 20 * time.Second
	// JobWaitDefault covers a splitter that died between publishing a
	// job's chunks and creating its record: its job message comes back
	// after the splitter consumer's AckWait (10s).
	JobWaitDefault = 30 * time.Second

	// RetentionDefault is how long a finished job's records are kept
	// (RecordsRetentionDefault): the retention of the agent snapshots, which
	// the object store keeps by age.
	RetentionDefault = RecordsRetentionDefault
	// CallsRetentionDefault is how long a finished job keeps the journal
	// rows of its done and cancelled chunks' pure calls (model calls,
	// reads): long enough to trace a job that just finished.
	CallsRetentionDefault = time.Hour
	// EffectsRetentionDefault is how long a finished job keeps the journal
	// rows of its side effects (keys, outcomes, resource ids): as long as
	// SALVAGE_DLQ keeps an envelope that could be replayed.
	EffectsRetentionDefault = 14 * 24 * time.Hour
	// RecordsRetentionDefault is how long a finished job's record, its
	// chunks' checkpoints, its settled envelopes and the journal of a
	// chunk whose envelope settled are kept.
	RecordsRetentionDefault = 30 * 24 * time.Hour
)
