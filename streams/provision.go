package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/salvagetype"
)

// Defaults for provisioning; docs/contract.md lists them.
const (

	// dlqRetentionDefault is how long envelopes stay in SALVAGE_DLQ.
	dlqRetentionDefault = 14 * 24 * time.Hour
	// resultsRetentionDefault is how long findings stay in SALVAGE_RESULTS.
	resultsRetentionDefault = 7 * 24 * time.Hour
	// duplicateWindowDefault is the Nats-Msg-Id dedup window.
	duplicateWindowDefault = 2 * time.Minute
	// jobsDuplicateWindow is SALVAGE_JOBS's: the server's least (100 ms).
	jobsDuplicateWindow = 100 * time.Millisecond
	// SplitterAckWaitDefault is the splitter consumer's AckWait.
	SplitterAckWaitDefault = 10 * time.Second
	// maxAckPendingDefault bounds chunks in flight across all workers.
	maxAckPendingDefault = 1000
	// SplitterMaxDeliverDefault bounds the deliveries of one job message:
	// after them the splitter reports it (salvage.events.rejected.split-failed)
	// and it stays in SALVAGE_JOBS for an operator.
	SplitterMaxDeliverDefault = 10
	// DeadLetterMaxDeliverDefault bounds the deliveries of one advisory;
	// the sweeper covers an advisory given up on.
	DeadLetterMaxDeliverDefault = 10
	// RecoveryMaxDeliverDefault bounds the deliveries of one envelope to
	// the orchestrators: on the last one a step that fails again
	// escalates the envelope instead of trying later.
	RecoveryMaxDeliverDefault = 25
	// RecoveryAckWait is how long a recovery pool's envelope may go
	// without an ack or a heartbeat: an orchestrator working on one keeps
	// it in progress, so a delivery lost in a server restart (or with a
	// dead orchestrator) comes back within seconds, not a minute.
	RecoveryAckWait = 10 * time.Second
)

// Options tunes provisioning. Zero fields take their defaults.
type Options struct {
	// Replicas per stream: 1 embedded, 3 on a cluster. Default 1.
	Replicas int
	// AckWait of the workers consumer. Default AckWaitDefault.
	AckWait time.Duration
	// MaxDeliver of the workers consumer. Default MaxDeliverDefault.
	MaxDeliver int
	// DLQRetention is SALVAGE_DLQ's MaxAge. Default dlqRetentionDefault.
	DLQRetention time.Duration
	// SplitterAckWait is how long a splitter may hold a job message before
	// JetStream redelivers it. Default SplitterAckWaitDefault.
	SplitterAckWait time.Duration
	// SplitterMaxDeliver bounds the deliveries of one job message.
	// Default SplitterMaxDeliverDefault.
	SplitterMaxDeliver int
	// Partitions is how many chunk partitions there are (see
	// ChunksStream). Default 1.
	Partitions int
	// AuditRetention is SALVAGE_AUDIT's MaxAge. Default
	// AuditRetentionDefault.
	AuditRetention time.Duration
}

func (o Options) withDefaults() Options {
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Partitions <= 0 {
		o.Partitions = 1
	}
	if o.AckWait <= 0 {
		o.AckWait = salvagetype.AckWaitDefault
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = salvagetype.MaxDeliverDefault
	}
	if o.DLQRetention <= 0 {
		o.DLQRetention = dlqRetentionDefault
	}
	if o.SplitterAckWait <= 0 {
		o.SplitterAckWait = SplitterAckWaitDefault
	}
	if o.SplitterMaxDeliver <= 0 {
		o.SplitterMaxDeliver = SplitterMaxDeliverDefault
	}
	if o.AuditRetention <= 0 {
		o.AuditRetention = AuditRetentionDefault
	}
	return o
}

// streamConfigs returns the configuration of every Salvage stream.
func streamConfigs(o Options) []jetstream.StreamConfig {
	o = o.withDefaults()
	day := 24 * time.Hour
	return []jetstream.StreamConfig{
		{
			Name: Jobs, Description: "Submitted jobs; any salvage.jobs.> shape is captured so a bad one is rejected, not dropped.",
			Subjects: []string{JobsAll}, Retention: jetstream.WorkQueuePolicy,
			// The splitter decides a job's identity (a job id names one
			// input: the same again is acked, another rejected
			// duplicate-job, with an event); the server's own dedup would
			// drop a second job under a reused Nats-Msg-Id unseen, so it
			// keeps only the shortest window the server allows.
			Duplicates: jobsDuplicateWindow,
		},
		chunksConfig(0),
		{
			Name: Backlog, Description: "Chunks of large jobs waiting for admission to SALVAGE_CHUNKS (a job keeps at most its window queued there).",
			Subjects: []string{backlogAll}, Retention: jetstream.LimitsPolicy,
			Duplicates: duplicateWindowDefault,
		},
		{
			Name: Hold, Description: "Chunks parked while an external system's breaker is open, or awaiting approval.",
			Subjects: []string{holdAll}, Retention: jetstream.WorkQueuePolicy,
			Duplicates: duplicateWindowDefault,
		},
		{
			Name: Results, Description: "Findings, one message per finished chunk.",
			Subjects: []string{ResultsAll}, MaxAge: resultsRetentionDefault,
			Duplicates: duplicateWindowDefault,
		},
		{
			Name: DLQ, Description: "Failure envelopes.",
			Subjects: []string{DLQAll}, MaxAge: o.DLQRetention,
			Duplicates: duplicateWindowDefault,
		},
		{
			Name: Advisories, Description: "Max-deliveries and msg-terminated advisories of SALVAGE_CHUNKS.",
			Subjects: advisoriesOf(o.Partitions), MaxAge: 14 * day,
		},
		{
			Name: Events, Description: "Job events, rejections, alerts and escalations.",
			Subjects: []string{eventsAll, alertsAll, escalateAll}, MaxAge: 14 * day,
			Duplicates: duplicateWindowDefault,
		},
		{
			// Few subjects, many entries each: the server counts the
			// entries of a subject from a sequence without reading every
			// one. Entries of settled envelopes and of jobs carry a TTL;
			// the rest are deleted when their record moves.
			Name: Index, Description: "Listing indexes: envelope records by status and category, and by job; job records. Built from the records when missing.",
			Subjects: []string{indexAll}, AllowMsgTTL: true, AllowDirect: true,
		},
		auditConfig(o.AuditRetention),
	}
}

// chunksConfig is partition k's chunk stream.
func chunksConfig(k int) jetstream.StreamConfig {
	desc := "Chunk work queue, consumed by the pipelines' chunk pools."
	if k > 0 {
		desc = "Chunk work queue of partition " + strconv.Itoa(k) + ", consumed by the pipelines' chunk pools."
	}
	return jetstream.StreamConfig{
		Name: ChunksStream(k), Description: desc,
		Subjects: []string{ChunksIn(k)}, Retention: jetstream.WorkQueuePolicy,
		Duplicates: duplicateWindowDefault,
	}
}

// ProvisionPartitions creates or updates the chunk streams of partitions
// 1 to o.Partitions − 1 (Provision makes partition 0's), in order. Run it
// once their storage exists (kv.Provision): a partition's stream is what
// makes it count (Partitions).
func ProvisionPartitions(ctx context.Context, js jetstream.JetStream, o Options) error {
	o = o.withDefaults()
	if err := ValidatePartitions(o.Partitions); err != nil {
		return err
	}
	for k := 1; k < o.Partitions; k++ {
		cfg := chunksConfig(k)
		cfg.Replicas = o.Replicas
		cfg.Storage = jetstream.FileStorage
		if err := EnsureStream(ctx, js, cfg); err != nil {
			return fmt.Errorf("streams: provision %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// WorkersConfig is the pipeline's chunk pool in partition k: the durable
// pull consumer its workers share on that partition's chunk stream,
// filtered on its chunks. Every partition's pool of a pipeline has the
// same name.
func (p Pipeline) WorkersConfig(o Options, k int) jetstream.ConsumerConfig {
	o = o.withDefaults()
	return jetstream.ConsumerConfig{
		Durable:       p.Workers(),
		Description:   "Chunk workers of pipeline " + string(p) + ": tier-2 retries are this consumer's redeliveries.",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.AckWait,
		MaxDeliver:    o.MaxDeliver,
		MaxAckPending: maxAckPendingDefault,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: chunksFor(k, string(p)),
	}
}

// SplitterConfig is the pipeline's job consumer: the durable pull
// consumer its splitters share, filtered on its Subject.
func (p Pipeline) SplitterConfig(o Options) jetstream.ConsumerConfig {
	o = o.withDefaults()
	return jetstream.ConsumerConfig{
		Durable:       p.Splitter(),
		Description:   "Splitters of pipeline " + string(p) + ": validate its jobs and publish their chunks.",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.SplitterAckWait,
		MaxDeliver:    o.SplitterMaxDeliver,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: p.Subject(),
	}
}

// deadLetterConfig is the durable consumer that reads the max-deliveries
// advisories of n partitions' chunk pools.
func deadLetterConfig(n int) jetstream.ConsumerConfig {
	filter, filters := maxDeliveriesOf(0), []string(nil)
	if n > 1 {
		// One partition keeps the single filter it had before partitions.
		filter = ""
		for k := range n {
			filters = append(filters, maxDeliveriesOf(k))
		}
	}
	return jetstream.ConsumerConfig{
		Durable:        DeadLetterConsumer,
		Description:    "Dead-letterer: one failure envelope per exhausted chunk.",
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		MaxDeliver:     DeadLetterMaxDeliverDefault,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		FilterSubject:  filter,
		FilterSubjects: filters,
	}
}

// retentionConfig is the durable consumer of finished events that
// retention works from. A finished job's event is asked for again (a nak
// with the time left) until its window passed, so any number of jobs may
// wait at once: MaxAckPending only bounds how many are looked at
// together, and redeliveries are unlimited.
func retentionConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       RetentionConsumer,
		Description:   "Retention: removes or expires what a finished job leaves, by data class, once its window passed.",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxDeliver:    -1,
		MaxAckPending: 256,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: JobRef{Job: "*"}.Event(EventFinished),
	}
}

// RecoveryConfig is the pipeline's recovery pool on SALVAGE_DLQ, the
// consumer its orchestrators share. Its AckWait is the time one
// orchestrator may spend on an envelope before another may take it over.
func (p Pipeline) RecoveryConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       p.Recovery(),
		Description:   "Recovery orchestrators of pipeline " + string(p) + ": one strategy run per envelope at a time.",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       RecoveryAckWait,
		MaxDeliver:    RecoveryMaxDeliverDefault,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: dlqFor(string(p)),
	}
}

// AlertSubject is where an alert of kind is raised.
func AlertSubject(kind string) string { return "salvage.alerts." + kind }

// EscalationSubject is where an envelope that needs a human is announced.
func EscalationSubject(category salvagetype.Category) string {
	return "salvage.escalations." + string(category)
}

// Provision creates or updates every stream and durable consumer. It is
// idempotent: running it on every start, from any number of processes at
// once, converges on the same configuration.
func Provision(ctx context.Context, js jetstream.JetStream, o Options) error {
	o = o.withDefaults()
	for _, cfg := range streamConfigs(o) {
		cfg.Replicas = o.Replicas
		cfg.Storage = jetstream.FileStorage
		if err := EnsureStream(ctx, js, cfg); err != nil {
			return fmt.Errorf("streams: provision %s: %w", cfg.Name, err)
		}
	}
	consumers := []struct {
		stream string
		cfg    jetstream.ConsumerConfig
	}{
		{Advisories, deadLetterConfig(o.Partitions)},
		{Events, retentionConfig()},
	}
	for _, c := range consumers {
		if _, err := EnsureConsumer(ctx, js, c.stream, c.cfg); err != nil {
			return fmt.Errorf("streams: provision consumer %s on %s: %w", c.cfg.Durable, c.stream, err)
		}
	}
	return nil
}

// Provision creates or updates the pools of the pipeline: the
// consumers only the processes that run it bind (its chunk pool, its job
// consumer and its recovery pool). A deployment provisioned before pools existed has one
// chunk consumer and one job consumer for every pipeline, whose filters
// would overlap the pools' on the work queues: they are deleted first
// (their queued and unacknowledged messages stay in the streams and are
// delivered to the pools; a process still running on them finds them
// gone and takes nothing more). Repeat-safe, from any number of processes at once.
func (p Pipeline) Provision(ctx context.Context, js jetstream.JetStream, o Options) error {
	if err := salvagetype.ValidateToken("pipeline", string(p)); err != nil {
		return err
	}
	for _, legacy := range []struct{ stream, name string }{{Chunks, LegacyWorkersConsumer}, {Jobs, LegacySplitterConsumer}} {
		// Looked up first: a process whose user may not delete consumers
		// only reads when there is nothing to delete.
		if _, err := js.Consumer(ctx, legacy.stream, legacy.name); errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		err := runChange(js, "the legacy consumer "+legacy.name+" on "+legacy.stream, func() error {
			return js.DeleteConsumer(ctx, legacy.stream, legacy.name)
		})
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("streams: delete the legacy %s consumer on %s: %w", legacy.name, legacy.stream, err)
		}
	}
	o = o.withDefaults()
	pools := []struct {
		stream string
		cfg    jetstream.ConsumerConfig
	}{{Jobs, p.SplitterConfig(o)}, {DLQ, p.RecoveryConfig()}}
	for k := range o.Partitions {
		pools = append(pools, struct {
			stream string
			cfg    jetstream.ConsumerConfig
		}{ChunksStream(k), p.WorkersConfig(o, k)})
	}
	for _, c := range pools {
		if _, err := EnsureConsumer(ctx, js, c.stream, c.cfg); err != nil {
			return fmt.Errorf("streams: provision %s of %s: %w", c.cfg.Durable, p, err)
		}
	}
	return narrowLegacyRecovery(ctx, js)
}

// narrowLegacyRecovery keeps the DLQ consumer of a deployment made before
// worker pools on the envelopes of that time: every envelope since names
// its pipeline and goes to that pipeline's recovery pool (a limits stream
// allows the overlap, but one envelope must not reach two pools).
func narrowLegacyRecovery(ctx context.Context, js jetstream.JetStream) error {
	c, err := js.Consumer(ctx, DLQ, LegacyRecoveryConsumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("streams: the legacy %s consumer: %w", LegacyRecoveryConsumer, err)
	}
	cfg := c.CachedInfo().Config
	if cfg.FilterSubject == DLQLegacy {
		return nil
	}
	cfg.FilterSubject = DLQLegacy
	if err := runChange(js, "the legacy consumer "+LegacyRecoveryConsumer+" on "+DLQ, func() error {
		_, err := js.UpdateConsumer(ctx, DLQ, cfg)
		return err
	}); err != nil {
		return fmt.Errorf("streams: narrow the legacy %s consumer: %w", LegacyRecoveryConsumer, err)
	}
	return nil
}
