package kv

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Bucket names; part of the contract (`nats kv ls` and `nats object ls`
// show them). Claims, checkpoints and the journal are partitioned: BucketIn
// names partition k's.
const (
	// BucketJobs holds one record per job.
	BucketJobs = "salvage_jobs"
	// BucketClaims holds the claim (lease) on each chunk being worked.
	BucketClaims = "salvage_claims"
	// BucketCheckpoints holds each chunk's checkpoint.
	BucketCheckpoints = "salvage_checkpoints"
	// BucketEnvelopes holds one record per failure envelope.
	BucketEnvelopes = "salvage_envelopes"
	// BucketJournal is the execution journal's bucket.
	BucketJournal = "salvage_journal"
	// BucketBreakers holds one circuit breaker per external system.
	BucketBreakers = "salvage_breakers"
	// BucketLimits holds the rate limits declared per key (spec.<key>)
	// and, per key, the shares of it the processes calling it hold
	// (share.<key>).
	BucketLimits = "salvage_limits"
	// LimitSpecs filters the keys of BucketLimits that declare a limit:
	// what a limiter follows.
	LimitSpecs = limitSpecPrefix + ">"
	// BucketPipelines holds every pipeline a worker runs and what
	// operators set on it: whether it is paused.
	BucketPipelines = "salvage_pipelines"
	// BucketWorkers holds one key per live Salvage process, refreshed by
	// its heartbeat; a key not refreshed within workersTTL ages out.
	BucketWorkers = "salvage_workers"
	// BucketSnapshots is the object store that holds large agent
	// snapshots.
	BucketSnapshots = "salvage_snapshots"
)

// claimsTTL is how long the claims bucket keeps what was last written
// under a chunk's key: a released claim's delete marker, or a lease that
// nobody renewed. A live lease is renewed every heartbeat, far more often
// (AckWait is capped at AckWaitMax), so only finished chunks age out.
const claimsTTL = 24 * time.Hour

// Stores bundles the typed stores, one per bucket. A chunk's claims,
// checkpoints and journal are in its job's partition: Part. The stores
// are reached only through Stores and Part, so their types are not
// exported (`go doc -u` lists their methods); Jobs is, because a client
// that only submits opens it alone (OpenJobs).
type Stores struct {
	Jobs      *Jobs
	Envelopes *envelopeStore
	Snapshots *snapshotStore
	Breakers  *breakerStore
	// Limits is nil in a deployment provisioned before salvage_limits
	// existed, until it is provisioned again.
	Limits    *limitStore
	Pipelines *pipelineStore
	Workers   *workerStore
	// Audit is SALVAGE_AUDIT, the operator actions.
	Audit *AuditLog

	parts *parts
	// partitions is how many partitions new jobs are spread over: those
	// found when the stores were opened, and since by Grow.
	partitions atomic.Int32
}

// Options tunes provisioning; zero fields take defaults.
type Options struct {
	// Replicas per bucket. Default 1.
	Replicas int
	// Partitions whose storage is made: 0 to Partitions − 1. Default 1.
	Partitions int
}

// bucketConfigs returns the configuration of every bucket.
func bucketConfigs(o Options) []jetstream.KeyValueConfig {
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	return []jetstream.KeyValueConfig{
		// Job and envelope records have no age limit: a record
		// is kept while its job runs or its envelope is open, and gets a
		// per-message TTL once settled (Retention). A key that expires
		// leaves a delete marker for markerTTL, so watches see it go.
		{Bucket: BucketJobs, Description: "Job records; status derived from chunk outcomes.", History: 5, LimitMarkerTTL: markerTTL, Replicas: o.Replicas},
		{Bucket: BucketEnvelopes, Description: "Envelope records and chunkmsg guard keys.", History: 5, LimitMarkerTTL: markerTTL, Replicas: o.Replicas},
		{Bucket: BucketBreakers, Description: "One circuit breaker per external system: closed, open, half-open.", History: 5, Replicas: o.Replicas},
		{Bucket: BucketPipelines, Description: "What operators set on a pipeline: paused or not.", History: 5, Replicas: o.Replicas},
		{Bucket: BucketLimits, Description: "Rate limits per key, and the shares of each the processes calling it hold.", History: 1, Replicas: o.Replicas},
		{Bucket: BucketWorkers, Description: "Live Salvage processes: roles, pipelines, chunks in flight; refreshed by a heartbeat.", History: 1, TTL: workersTTL, Replicas: o.Replicas},
	}
}

// Provision creates or updates every bucket and returns the stores. It is
// idempotent and safe to run from several processes at once.
func Provision(ctx context.Context, js jetstream.JetStream, o Options) (*Stores, error) {
	// Each is looked up first, created when missing and updated only
	// when it exists otherwise: see streams.EnsureStream for why.
	for _, cfg := range bucketConfigs(o) {
		if err := ensureBucket(ctx, js, cfg); err != nil {
			return nil, fmt.Errorf("kv: provision %s: %w", cfg.Bucket, err)
		}
	}
	replicas := max(o.Replicas, 1)
	if err := streams.ValidatePartitions(max(o.Partitions, 1)); err != nil {
		return nil, err
	}
	for k := range max(o.Partitions, 1) {
		if err := provisionPart(ctx, js, k, replicas); err != nil {
			return nil, err
		}
	}
	snaps := jetstream.ObjectStoreConfig{
		Bucket: BucketSnapshots, Description: "Agent state snapshots, gzip.", TTL: salvagetype.RetentionDefault, Replicas: replicas,
	}
	if err := streams.EnsureStreamOf(ctx, js, "object store "+snaps.Bucket, "OBJ_"+snaps.Bucket, snaps, func(ctx context.Context, md map[string]string) error {
		snaps.Metadata = md
		_, err := js.CreateObjectStore(ctx, snaps)
		if errors.Is(err, jetstream.ErrBucketExists) {
			_, err = js.UpdateObjectStore(ctx, snaps)
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("kv: provision %s: %w", BucketSnapshots, err)
	}
	// On a forming cluster a store another process just made can be
	// found by one request and not yet by the next: everything exists
	// here, so "not found" is waited out (within ctx, at most openWait).
	deadline := time.Now().Add(openWait)
	for {
		st, err := open(ctx, js, max(o.Partitions, 1))
		if (!errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound)) || time.Now().After(deadline) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// openWait bounds how long Provision waits for what it provisioned to be
// found.
const openWait = 10 * time.Second

// ensureBucket makes bucket cfg exist as configured, only reading when
// its stream carries cfg's fingerprint (streams.EnsureStreamOf).
func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	return streams.EnsureStreamOf(ctx, js, "bucket "+cfg.Bucket, "KV_"+cfg.Bucket, cfg, func(ctx context.Context, md map[string]string) error {
		cfg.Metadata = md
		_, err := js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			_, err = js.UpdateKeyValue(ctx, cfg)
		}
		return err
	})
}

// OpenJobs binds to the jobs bucket alone: what a client that submits
// and waits needs, and all its user may be allowed to read.
func OpenJobs(ctx context.Context, js jetstream.JetStream) (*Jobs, error) {
	b, err := js.KeyValue(ctx, BucketJobs)
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", BucketJobs, err)
	}
	return &Jobs{b: b, js: js, now: time.Now, idx: &indexWriter{js: js}}, nil
}

// Open binds to buckets that already exist, with every partition the
// deployment has (streams.Partitions). It returns an error wrapping
// jetstream.ErrBucketNotFound when Salvage was never provisioned there.
func Open(ctx context.Context, js jetstream.JetStream) (*Stores, error) {
	n, err := streams.Partitions(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("kv: open: %w", err)
	}
	return open(ctx, js, max(n, 1))
}

// open binds to the buckets, partitions 0 to n − 1 among them.
func open(ctx context.Context, js jetstream.JetStream, n int) (*Stores, error) {
	get := func(name string) (jetstream.KeyValue, error) {
		b, err := js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("kv: open %s: %w", name, err)
		}
		return b, nil
	}
	jobs, err := get(BucketJobs)
	if err != nil {
		return nil, err
	}
	envs, err := get(BucketEnvelopes)
	if err != nil {
		return nil, err
	}
	breakers, err := get(BucketBreakers)
	if err != nil {
		return nil, err
	}
	pipelines, err := get(BucketPipelines)
	if err != nil {
		return nil, err
	}
	// salvage_limits came with rate limits: a deployment provisioned
	// before has none until it is provisioned again, and runs unlimited.
	var limits *limitStore
	if b, err := js.KeyValue(ctx, BucketLimits); err == nil {
		limits = &limitStore{b: b, js: js, now: time.Now}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("kv: open %s: %w", BucketLimits, err)
	}
	snaps, err := js.ObjectStore(ctx, BucketSnapshots)
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", BucketSnapshots, err)
	}
	idx := &indexWriter{js: js}
	st := &Stores{
		Jobs:      &Jobs{b: jobs, js: js, now: time.Now, idx: idx},
		Envelopes: &envelopeStore{b: envs, js: js, now: time.Now, keep: salvagetype.RecordsRetentionDefault, idx: idx},
		Snapshots: &snapshotStore{os: snaps},
		Breakers:  &breakerStore{b: breakers, js: js, now: time.Now},
		Limits:    limits,
		Pipelines: &pipelineStore{b: pipelines, js: js, now: time.Now},
		Workers:   &workerStore{js: js, now: time.Now},
		Audit:     OpenAudit(js),
		parts:     &parts{js: js, idx: idx},
	}
	st.partitions.Store(int32(n))
	for k := range n {
		if _, err := st.Part(ctx, k); err != nil {
			return nil, err
		}
	}
	return st, nil
}
