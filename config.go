package salvage

import (
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/consumers/worker"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Role is a part of Salvage a Client runs (its values are documented in
// salvagetype). Any number of processes may run any roles against one
// deployment.
type Role = salvagetype.Role

// Roles.
const (
	RoleWorker     = salvagetype.RoleWorker
	RoleDeadLetter = salvagetype.RoleDeadLetter
	RoleRecovery   = salvagetype.RoleRecovery
	RoleAPI        = salvagetype.RoleAPI
	RoleNone       = salvagetype.RoleNone
)

// AllRoles returns every role, in a slice of the caller's own.
func AllRoles() []Role { return []Role{RoleWorker, RoleDeadLetter, RoleRecovery, RoleAPI} }

// DefaultRoles returns the roles a Config without Roles runs, in a slice
// of the caller's own: everything a job needs to finish and recover,
// without the micro service.
func DefaultRoles() []Role { return []Role{RoleWorker, RoleDeadLetter, RoleRecovery} }

// JournalMode is how journal rows are written.
type JournalMode string

// Journal modes.
const (
	// JournalAtomic group-commits the rows of concurrent calls as atomic
	// batches: one fsync for dozens of rows when the server fsyncs every
	// write (sync_interval always).
	JournalAtomic JournalMode = "atomic"
	// JournalPipelined writes each row as its own asynchronous publish:
	// faster when the server acks before fsync (its default).
	JournalPipelined JournalMode = "pipelined"
)

// Defaults of Config; each field's comment names its own. Each is the
// machinery's own constant, defined once.
const (
	RetriesDefault    = salvagetype.RetriesDefault
	RetryBaseDefault  = salvagetype.RetryBaseDefault
	RetryMaxDefault   = salvagetype.RetryMaxDefault
	RetryTotalDefault = salvagetype.RetryTotalDefault
	AckWaitDefault    = salvagetype.AckWaitDefault
	MaxDeliverDefault = salvagetype.MaxDeliverDefault
	// PartitionsMax bounds Config.Partitions.
	PartitionsMax              = salvagetype.PartitionsMax
	MaxRecoveriesDefault       = salvagetype.MaxRecoveriesDefault
	MaxStrategyAttemptsDefault = salvagetype.MaxStrategyAttemptsDefault
	CoolDownDefault            = salvagetype.CoolDownDefault
	BreakerFailuresDefault     = salvagetype.BreakerFailuresDefault
	BreakerWindowDefault       = salvagetype.BreakerWindowDefault
	BreakerCoolDownDefault     = salvagetype.BreakerCoolDownDefault
	ConcurrencyDefault         = salvagetype.ConcurrencyDefault
	MaxChunksDefault           = salvagetype.MaxChunksDefault
	ChunkWindowDefault         = salvagetype.ChunkWindowDefault
	MaxPayloadDefault          = salvagetype.MaxPayloadDefault
	SweepIntervalDefault       = salvagetype.SweepIntervalDefault
	DrainTimeoutDefault        = salvagetype.DrainTimeoutDefault
	JobWaitDefault             = salvagetype.JobWaitDefault
	UnknownPipelineWaitDefault = salvagetype.UnknownPipelineWaitDefault
	AlertIntervalDefault       = salvagetype.AlertIntervalDefault
	AlertBurstCountDefault     = salvagetype.AlertBurstCountDefault
	AlertBurstWindowDefault    = salvagetype.AlertBurstWindowDefault
	AlertUnresolvedDefault     = salvagetype.AlertUnresolvedDefault
	AlertUnackedDefault        = salvagetype.AlertUnackedDefault
	// RetentionDefault is how long agent snapshots are kept, and a
	// finished job's records (Retention.Records' default).
	RetentionDefault = salvagetype.RetentionDefault
	// ReleaseRampStart and ReleaseRampDouble pace the return of a
	// system's held chunks once its breaker closed: each worker process
	// returns them at ReleaseRampStart a second (one at once), the rate
	// doubling every ReleaseRampDouble the breaker stays closed, so a
	// system that just came back is not met by its whole backlog at once.
	ReleaseRampStart  = salvagetype.ReleaseRampStart
	ReleaseRampDouble = salvagetype.ReleaseRampDouble
	// CallsRetentionDefault, EffectsRetentionDefault and
	// RecordsRetentionDefault are Retention's defaults: 1 hour, 14 days,
	// 30 days.
	CallsRetentionDefault   = salvagetype.CallsRetentionDefault
	EffectsRetentionDefault = salvagetype.EffectsRetentionDefault
	RecordsRetentionDefault = salvagetype.RecordsRetentionDefault
	// AuditRetentionDefault is Config.AuditRetention's default: a year.
	AuditRetentionDefault = streams.AuditRetentionDefault
)

// Retention is how long what a finished job leaves behind is kept, by
// data class: Calls (the journal rows of pure calls: model calls and
// reads), Effects (the journal rows of side effects, their keys and
// outcomes) and Records (the job's record, its checkpoints, its settled
// envelopes, and the whole journal of a chunk whose envelope settled).
// The clocks start when the job finishes; nothing an open envelope, a
// held, parked or running chunk needs is removed.
type Retention = salvagetype.Retention

// Config is what a Client runs with. Every field has a default, stated in
// its comment; a zero field takes it. NewClient validates the whole and
// names the field it refuses.
type Config struct {
	// Pipelines this client runs: RoleWorker splits and runs their jobs,
	// RoleRecovery recovers their envelopes (it needs their tools:
	// verification and compensation run there). RoleDeadLetter, RoleAPI
	// and RoleNone need none, and a client that only submits, waits and
	// operates the DLQ needs none either.
	Pipelines []*Pipeline
	// Roles to run on Start. Default DefaultRoles() (worker,
	// dead-letter, recovery); AllRoles() adds the micro service; RoleNone
	// runs nothing.
	Roles []Role
	// Upgrades are the definition fingerprints (Pipeline.Definition) this
	// client may register in place of the ones its pipelines' workers
	// run: the documented rollout of a new version of a pipeline (drain
	// it, then start the new version with its fingerprint here). Without
	// it, Start refuses a pipeline whose definition differs from the
	// registered one (ErrDefinitionDiffers). Default none.
	Upgrades []string

	// Retries is tier 1: how often one call is retried inside the worker
	// (attempts = Retries+1). Default 3; negative means none.
	Retries int
	// RetryBase, RetryMax and RetryTotal shape tier 1's full-jitter
	// backoff: the first wait is drawn from [0, RetryBase], each next
	// one's ceiling doubles up to RetryMax, and one call gives up once
	// RetryTotal has passed. Defaults 1s, 4s, 30s. A Retry-After is
	// honoured as a floor.
	RetryBase, RetryMax, RetryTotal time.Duration

	// AckWait is tier 2: how long a chunk may go without an ack or a
	// heartbeat before JetStream redelivers it. A chunk's claim lease is
	// two fifths of it (at least 2s), renewed three times a lease: once a
	// dead worker's lease lapsed, a survivor takes its chunk over, before
	// the redelivery. Set once, used by the consumer and the workers
	// alike. Default 10s.
	AckWait time.Duration
	// MaxDeliver is how many deliveries a chunk gets before it is
	// dead-lettered. Default 3.
	MaxDeliver int
	// Heartbeat is how often a running chunk tells JetStream it is in
	// progress. Default AckWait/3.
	Heartbeat time.Duration

	// MaxRecoveries is how many recoveries one chunk gets, across all its
	// envelopes, before the next escalates to a person. Default 3.
	MaxRecoveries int
	// MaxStrategyAttempts is how often a failing recovery strategy is
	// tried before its envelope escalates. Default 3.
	MaxStrategyAttempts int
	// CoolDown is how long an EXTERNAL_SYSTEM_DOWN envelope waits before
	// its chunk resumes. Default 30s.
	CoolDown time.Duration

	// Breaker is the circuit breaker of every external system (a Tool's
	// System) not named in Breakers: Failures in a row within Window
	// open it (defaults 5, 10s); while open, calls fail at once and their
	// chunks are held on SALVAGE_HOLD; after CoolDown (default 30s) one
	// held chunk is released as the probe, and its success closes the
	// breaker and releases the rest, ramped (ReleaseRampStart).
	Breaker BreakerPolicy
	// Breakers overrides Breaker for named systems.
	Breakers map[string]BreakerPolicy
	// Limits are rate limits this process declares when it starts (as
	// LimitSet would): every process of the deployment follows them,
	// wherever they were declared.
	Limits []Limit
	// Prices price model usage for job budgets: by model name (as a
	// call's Usage reports it), per million prompt and completion tokens.
	// A model not listed costs nothing (its tokens still count against a
	// token budget).
	Prices map[string]Price

	// Concurrency is how many chunks this client's worker runs at once.
	// Default 4.
	Concurrency int
	// WorkerID names this client's worker in claims and checkpoints.
	// Default host-pid-random.
	WorkerID string
	// MaxChunks bounds the chunks of one job (a Pipeline may set its
	// own). Default 10,000.
	MaxChunks int
	// ChunkWindow is how many of one job's chunks wait in SALVAGE_CHUNKS
	// at once; the rest wait in SALVAGE_BACKLOG, so a job behind a large
	// one is not stuck behind it. Default 16.
	ChunkWindow int
	// MaxPayload bounds a job message and each chunk message. Default
	// 512 KiB (the server's max_payload is 1 MiB).
	MaxPayload int

	// Retention is how long what a finished job leaves behind is kept, by
	// data class; a Pipeline may set its own. Defaults: pure calls 1 hour
	// after the job finished, side effects 14 days, records 30 days.
	Retention Retention
	// AuditRetention is how long SALVAGE_AUDIT keeps an operator action
	// (the stream's MaxAge, set when this client provisions). Default
	// AuditRetentionDefault, a year.
	AuditRetention time.Duration

	// Replicas of every stream and bucket: 1 on one server, 3 on a
	// cluster. Default 1.
	Replicas int
	// Partitions splits the chunk work: each partition has its own chunk
	// stream and pools and its own claims, checkpoints and journal, so on
	// a cluster their stream leaders can be on different servers. A job
	// belongs to one partition, chosen when it is split (FNV-1a of its id
	// modulo the partitions then) and kept in its record. A deployment
	// never loses a partition: provisioning with more adds them, with
	// fewer (or on a process that sets none) keeps and uses every one
	// made, and a running process finds partitions added since it
	// started within 30 s. 1 to PartitionsMax; default 1.
	Partitions int
	// JournalWrites is how journal rows are written. Default
	// JournalAtomic; JournalPipelined is faster on a server that acks
	// before fsync.
	JournalWrites JournalMode

	// SweepInterval is how often the sweeper looks for exhausted chunks
	// whose advisory was missed and repairs what crashes left
	// half-written. Default 15s.
	SweepInterval time.Duration
	// DrainTimeout bounds Stop: in-flight chunks may finish this long,
	// then are released for another worker. Default 20s.
	DrainTimeout time.Duration
	// JobWait is how long a worker holds a chunk whose job has no record
	// yet (its splitter died between publishing and recording). Default
	// 30s.
	JobWait time.Duration
	// UnknownPipelineWait is how long a job for a pipeline no process has
	// ever run (registered) waits before the sweeper rejects it
	// unknown-pipeline; it is rejected within this plus one
	// SweepInterval. A job for a registered pipeline whose workers are
	// all stopped waits for one to start, however long. Default 30s.
	UnknownPipelineWait time.Duration
	// Alerts are the DLQ alert thresholds (zero fields take their
	// defaults: 3 envelopes in 5 minutes, 30 minutes unresolved, 15
	// minutes unacknowledged); AlertInterval is how often they are
	// checked. Default 30s.
	Alerts        AlertRules
	AlertInterval time.Duration

	// Logger receives every role's logs, with trace_id, job_id, chunk and
	// stage on lines about work. The zero value logs nothing.
	Logger zerolog.Logger

	// TracerProvider receives OpenTelemetry spans: one trace per job (the
	// traceparent minted at submit), a span for the job, each chunk
	// delivery, stage, agent turn, call and recovery attempt. Default none: no
	// spans (pass otel.GetTracerProvider() for the program's global one).
	// Build it with sdktrace.WithIDGenerator(IDGenerator{}) so the job
	// span takes the id its chunks point to;
	// otelsalvage.TracerProviderFromEnv does.
	TracerProvider trace.TracerProvider
}

// withDefaults returns a copy of c with every zero field set.
func (c Config) withDefaults() Config {
	if len(c.Roles) == 0 {
		c.Roles = DefaultRoles()
	}
	if c.Retries == 0 {
		c.Retries = RetriesDefault
	}
	if c.RetryBase <= 0 {
		c.RetryBase = RetryBaseDefault
	}
	if c.RetryMax <= 0 {
		c.RetryMax = RetryMaxDefault
	}
	if c.RetryTotal <= 0 {
		c.RetryTotal = RetryTotalDefault
	}
	if c.AckWait <= 0 {
		c.AckWait = AckWaitDefault
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = MaxDeliverDefault
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = c.AckWait / 3
	}
	if c.MaxRecoveries <= 0 {
		c.MaxRecoveries = MaxRecoveriesDefault
	}
	if c.MaxStrategyAttempts <= 0 {
		c.MaxStrategyAttempts = MaxStrategyAttemptsDefault
	}
	if c.CoolDown <= 0 {
		c.CoolDown = CoolDownDefault
	}
	if c.Concurrency <= 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.MaxChunks <= 0 {
		c.MaxChunks = MaxChunksDefault
	}
	if c.ChunkWindow <= 0 {
		c.ChunkWindow = ChunkWindowDefault
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = MaxPayloadDefault
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Partitions <= 0 {
		c.Partitions = 1
	}
	if c.JournalWrites == "" {
		c.JournalWrites = JournalAtomic
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = SweepIntervalDefault
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DrainTimeoutDefault
	}
	if c.JobWait <= 0 {
		c.JobWait = JobWaitDefault
	}
	if c.UnknownPipelineWait <= 0 {
		c.UnknownPipelineWait = UnknownPipelineWaitDefault
	}
	if c.AlertInterval <= 0 {
		c.AlertInterval = AlertIntervalDefault
	}
	return c
}

// validate names the first field that cannot work.
func (c Config) validate() error {
	for _, r := range c.Roles {
		if r == RoleNone && len(c.Roles) > 1 {
			return fmt.Errorf("%w: Roles: %q runs nothing and cannot be combined with %v", ErrInvalidConfig, RoleNone, c.Roles)
		}
		if !slices.Contains(AllRoles(), r) && r != RoleNone {
			return fmt.Errorf("%w: Roles: unknown role %q (want %v, or %q alone)", ErrInvalidConfig, r, AllRoles(), RoleNone)
		}
	}
	switch {
	case c.RetryBase > c.RetryMax:
		return fmt.Errorf("%w: RetryBase %s exceeds RetryMax %s", ErrInvalidConfig, c.RetryBase, c.RetryMax)
	case c.AckWait > kv.AckWaitMax:
		return fmt.Errorf("%w: AckWait %s is over %s (the claim lease must renew within the claims bucket's TTL)", ErrInvalidConfig, c.AckWait, kv.AckWaitMax)
	case c.Heartbeat >= c.AckWait:
		return fmt.Errorf("%w: Heartbeat %s must be shorter than AckWait %s", ErrInvalidConfig, c.Heartbeat, c.AckWait)
	case c.MaxPayload > natsMaxPayload:
		return fmt.Errorf("%w: MaxPayload %d is over the server's max_payload %d", ErrInvalidConfig, c.MaxPayload, natsMaxPayload)
	case c.JournalWrites != JournalAtomic && c.JournalWrites != JournalPipelined:
		return fmt.Errorf("%w: JournalWrites %q: want %q or %q", ErrInvalidConfig, c.JournalWrites, JournalAtomic, JournalPipelined)
	case c.Replicas > 5:
		return fmt.Errorf("%w: Replicas %d: JetStream allows at most 5", ErrInvalidConfig, c.Replicas)
	case c.AuditRetention < 0 || (c.AuditRetention > 0 && c.AuditRetention < time.Hour):
		return fmt.Errorf("%w: AuditRetention %s: want an hour or more (0 is a year)", ErrInvalidConfig, c.AuditRetention)
	}
	if err := streams.ValidatePartitions(c.Partitions); err != nil {
		return fmt.Errorf("%w: Partitions: %w", ErrInvalidConfig, err)
	}
	if err := c.Retention.Validate(); err != nil {
		return fmt.Errorf("%w: Retention: %w", ErrInvalidConfig, err)
	}
	if err := recovery.Prices(c.Prices).Validate(); err != nil {
		return fmt.Errorf("%w: Prices: %w", ErrInvalidConfig, err)
	}
	if err := c.breakerPolicies().Validate(); err != nil {
		return fmt.Errorf("%w: Breaker, Breakers: %w", ErrInvalidConfig, err)
	}
	seen := map[string]bool{}
	for _, l := range c.Limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("%w: Limits: %w", ErrInvalidConfig, err)
		}
		if seen[l.Key] {
			return fmt.Errorf("%w: Limits: %s twice", ErrInvalidConfig, l.Key)
		}
		seen[l.Key] = true
	}
	return nil
}

// BreakerPolicy is when a system's circuit breaker opens and how long
// it stays open (Config.Breaker); zero fields take the defaults.
type BreakerPolicy = salvagetype.BreakerPolicy

// breakerPolicies are the workers' breaker policies.
func (c Config) breakerPolicies() worker.BreakerPolicies {
	return worker.BreakerPolicies{Default: c.Breaker, Systems: c.Breakers}
}

// Price is what one model charges per million prompt and completion
// tokens, in the currency job budgets are given in.
type Price = salvagetype.Price

// natsMaxPayload is the server's default max_payload.
const natsMaxPayload = 1 << 20

// has reports whether c runs role r.
func (c Config) has(r Role) bool { return slices.Contains(c.Roles, r) }

// retryPolicy is tier 1 as the executor takes it.
func (c Config) retryPolicy() recovery.RetryPolicy {
	return recovery.RetryPolicy{MaxRetries: c.Retries, BaseDelay: c.RetryBase, MaxDelay: c.RetryMax, TotalCap: c.RetryTotal}
}

// limits are the recovery limits.
func (c Config) limits() recovery.Limits {
	return recovery.Limits{MaxRecoveries: c.MaxRecoveries, MaxStrategyAttempts: c.MaxStrategyAttempts}
}

// streamOptions provision the streams and consumers with c's tier 2.
func (c Config) streamOptions() streams.Options {
	return streams.Options{Replicas: c.Replicas, AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, Partitions: c.Partitions,
		AuditRetention: c.AuditRetention}
}

// AlertRules are the DLQ alert thresholds (Config.Alerts); zero fields
// take the defaults. An alert is published on salvage.alerts.<kind>.
type AlertRules = salvagetype.AlertRules
