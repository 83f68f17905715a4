package kv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Part is one partition's chunk storage (see streams.ChunksStream): the
// claims, checkpoints and journal of the chunks of the jobs in that
// partition. Every compare-and-swap a chunk makes is on one Part's
// buckets, so a partition's writes go through its own stream leaders.
type Part struct {
	// Index is the partition's number, 0 to the deployment's count − 1.
	Index       int
	Claims      *claimStore
	Checkpoints *checkpointStore
	Journal     *journalStore
}

// BucketIn names partition k's copy of a partitioned bucket (BucketClaims,
// BucketCheckpoints or BucketJournal): the name itself for partition 0,
// <name>_<k> for the others, so salvage_claims_3.
func BucketIn(base string, k int) string {
	if k == 0 {
		return base
	}
	return base + "_" + strconv.Itoa(k)
}

// partConfigs are the configurations of partition k's claims and
// checkpoints buckets; its journal is a stream (journalStreamConfig).
func partConfigs(k, replicas int) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: BucketIn(BucketClaims, k), Description: "Chunk claims: one live lease per chunk.", History: 1, TTL: claimsTTL, Replicas: replicas},
		// Checkpoint records have no age limit: a record is kept while its
		// job runs and gets a per-message TTL once settled (Retention).
		{Bucket: BucketIn(BucketCheckpoints, k), Description: "Chunk checkpoints; the fence against stale workers.", History: 1, LimitMarkerTTL: markerTTL, Replicas: replicas},
	}
}

// provisionPart creates or updates partition k's buckets.
func provisionPart(ctx context.Context, js jetstream.JetStream, k, replicas int) error {
	for _, cfg := range partConfigs(k, replicas) {
		if err := ensureBucket(ctx, js, cfg); err != nil {
			return fmt.Errorf("kv: provision %s: %w", cfg.Bucket, err)
		}
	}
	if err := streams.EnsureStream(ctx, js, journalStreamConfig(BucketIn(BucketJournal, k), replicas)); err != nil {
		return fmt.Errorf("kv: provision %s: %w", BucketIn(BucketJournal, k), err)
	}
	return nil
}

// openPart binds to partition k's buckets.
func openPart(ctx context.Context, js jetstream.JetStream, k int, idx *indexWriter, cfg JournalConfig) (*Part, error) {
	get := func(name string) (jetstream.KeyValue, error) {
		b, err := js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("kv: open %s: %w", name, err)
		}
		return b, nil
	}
	claims, err := get(BucketIn(BucketClaims, k))
	if err != nil {
		return nil, err
	}
	cps, err := get(BucketIn(BucketCheckpoints, k))
	if err != nil {
		return nil, err
	}
	journal, err := get(BucketIn(BucketJournal, k))
	if err != nil {
		return nil, err
	}
	jr := &journalStore{js: js, b: journal, bucket: BucketIn(BucketJournal, k)}
	jr.Configure(cfg)
	return &Part{
		Index:       k,
		Claims:      &claimStore{b: claims, bucket: BucketIn(BucketClaims, k), now: time.Now},
		Checkpoints: &checkpointStore{b: cps, bucket: BucketIn(BucketCheckpoints, k), js: js, now: time.Now, idx: idx},
		Journal:     jr,
	}, nil
}

// parts are the partitions a Stores has bound, opened as they are asked
// for: a job split by a process that knew more partitions than this one
// did at its start names a partition this one binds on first use.
type parts struct {
	js  jetstream.JetStream
	idx *indexWriter

	mu      sync.Mutex
	journal JournalConfig
	bound   []*Part
}

// Part returns partition k's storage, binding to it on first use. A k
// outside 0 to salvagetype.PartitionsMax − 1 is refused; one the deployment
// does not have fails to open (jetstream.ErrBucketNotFound).
func (s *Stores) Part(ctx context.Context, k int) (*Part, error) {
	if k < 0 || k >= salvagetype.PartitionsMax {
		return nil, fmt.Errorf("%w: partition %d", streams.ErrPartitions, k)
	}
	p := s.parts
	p.mu.Lock()
	defer p.mu.Unlock()
	if k < len(p.bound) && p.bound[k] != nil {
		return p.bound[k], nil
	}
	part, err := openPart(ctx, p.js, k, p.idx, p.journal)
	if err != nil {
		return nil, err
	}
	for len(p.bound) <= k {
		p.bound = append(p.bound, nil)
	}
	p.bound[k] = part
	return part, nil
}

// PartOf returns the storage of job's chunks: its partition's.
func (s *Stores) PartOf(ctx context.Context, job Job) (*Part, error) {
	return s.Part(ctx, job.Partition)
}

// Parts returns the partitions bound so far, in order: at least those
// the deployment had when the stores were opened.
func (s *Stores) Parts() []*Part {
	p := s.parts
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Part, 0, len(p.bound))
	for _, b := range p.bound {
		if b != nil {
			out = append(out, b)
		}
	}
	return out
}

// Partitions is how many partitions the stores know: the deployment's
// count when they were opened, or when Grow last found more. New jobs
// are spread over them, and a worker takes chunks from each. Nil stores
// know one.
func (s *Stores) Partitions() int {
	if s == nil {
		return 1
	}
	return int(s.partitions.Load())
}

// Grow binds the partitions made since the stores were opened or last
// grew, in order, and returns how many the stores know: one stream
// lookup when there is no new one (partition Partitions()'s chunk stream,
// made only once its storage exists).
func (s *Stores) Grow(ctx context.Context) (int, error) {
	for {
		n := s.Partitions()
		if n >= salvagetype.PartitionsMax {
			return n, nil
		}
		_, err := s.parts.js.Stream(ctx, streams.ChunksStream(n))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("kv: look for partition %d: %w", n, err)
		}
		if _, err := s.Part(ctx, n); err != nil {
			return n, err
		}
		s.partitions.CompareAndSwap(int32(n), int32(n+1))
	}
}

// ConfigureJournal configures the journal writes of every partition,
// bound now or later.
func (s *Stores) ConfigureJournal(cfg JournalConfig) {
	p := s.parts
	p.mu.Lock()
	defer p.mu.Unlock()
	p.journal = cfg
	for _, b := range p.bound {
		if b != nil {
			b.Journal.Configure(cfg)
		}
	}
}

// JournalStats sums the journal writes of every bound partition: batches
// flushed and rows in them.
func (s *Stores) JournalStats() (batches, rows int64) {
	for _, p := range s.Parts() {
		b, r := p.Journal.Stats()
		batches += b
		rows += r
	}
	return batches, rows
}

// PartitionOfStore is the partition whose chunks a stream or bucket
// holds: a chunk stream (streams.PartitionOfStream) or a claims,
// checkpoints or journal bucket, named with or without its stream's KV_.
// ok is false for any other name.
func PartitionOfStore(name string) (int, bool) {
	if k, ok := streams.PartitionOfStream(name); ok {
		return k, true
	}
	name = strings.TrimPrefix(name, "KV_")
	for _, base := range []string{BucketClaims, BucketCheckpoints, BucketJournal} {
		if name == base {
			return 0, true
		}
		rest, ok := strings.CutPrefix(name, base+"_")
		if !ok {
			continue
		}
		k, err := strconv.Atoi(rest)
		if err == nil && k >= 1 && k < salvagetype.PartitionsMax && strconv.Itoa(k) == rest {
			return k, true
		}
	}
	return 0, false
}
