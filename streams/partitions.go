package streams

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/salvagetype"
)

// A deployment's chunk work is split into partitions. Each partition has
// its own chunk stream (and so its own pools and stream leader) and, in
// package kv, its own claim, checkpoint and journal storage, so every
// compare-and-swap a chunk makes stays inside one partition's streams and
// a cluster can put the partitions' leaders on different servers.
//
// Partition 0 keeps the names of a deployment made before partitions
// (SALVAGE_CHUNKS, salvage.chunks.>): a deployment of one partition is
// that deployment, and an upgrade to N leaves every queued and running
// chunk where it is. Partition k ≥ 1 is SALVAGE_CHUNKS_<k> on
// salvage.part.<k>.chunks.>.
//
// A job's partition is chosen once, when it is split, from its id
// (PartitionOf) and the partitions the deployment had then, and written
// in its job record; everything after reads it from there (or from the
// subject or stream of a chunk message), never from the partition count,
// so a count that grows never moves a job.

// partRoot begins the chunk subjects of partitions 1 and up.
const partRoot = "salvage.part."

// ValidatePartitions checks a configured partition count: 1 to
// PartitionsMax.
func ValidatePartitions(n int) error {
	if n < 1 || n > salvagetype.PartitionsMax {
		return fmt.Errorf("%w: %d (want 1 to %d)", ErrPartitions, n, salvagetype.PartitionsMax)
	}
	return nil
}

// PartitionOf is the partition of job among n: FNV-1a (32 bits) of the
// job id, modulo n. It is the splitter's choice for a new job; once made,
// the job record keeps it.
func PartitionOf(job string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(job))
	return int(h.Sum32() % uint32(n))
}

// ChunksStream names partition k's chunk stream: SALVAGE_CHUNKS for
// partition 0, SALVAGE_CHUNKS_<k> for the others.
func ChunksStream(k int) string {
	if k == 0 {
		return Chunks
	}
	return Chunks + "_" + strconv.Itoa(k)
}

// PartitionOfStream is the partition whose chunk stream is name, and
// false when name is no chunk stream.
func PartitionOfStream(name string) (int, bool) {
	if name == Chunks {
		return 0, true
	}
	rest, ok := strings.CutPrefix(name, Chunks+"_")
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(rest)
	if err != nil || k < 1 || k >= salvagetype.PartitionsMax || strconv.Itoa(k) != rest {
		return 0, false
	}
	return k, true
}

// chunksRoot begins partition k's chunk subjects.
func chunksRoot(k int) string {
	if k == 0 {
		return "salvage.chunks."
	}
	return partRoot + strconv.Itoa(k) + ".chunks."
}

// ChunksIn is every chunk subject of partition k: the subjects of its
// stream.
func ChunksIn(k int) string { return chunksRoot(k) + ">" }

// advisoriesOf are the advisory subjects SALVAGE_ADVISORIES captures for
// n partitions: max-deliveries and msg-terminated of every chunk pool.
func advisoriesOf(n int) []string {
	var out []string
	for k := range max(n, 1) {
		out = append(out, maxDeliveriesOf(k), "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+ChunksStream(k)+".*")
	}
	return out
}

// maxDeliveriesOf is the max-deliveries advisory subject of partition
// k's chunk pools.
func maxDeliveriesOf(k int) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + ChunksStream(k) + ".*"
}

// Partitions is how many partitions the deployment on js has: one more
// than the highest k whose chunk stream exists (a partition's stream is
// provisioned after its storage, so it exists only once the partition is
// complete). Partitions are never removed, so the count only grows, and a
// process that reads it at start never misses a partition made before.
// A deployment not provisioned at all has 0.
func Partitions(ctx context.Context, js jetstream.JetStream) (int, error) {
	for k := range salvagetype.PartitionsMax {
		_, err := js.Stream(ctx, ChunksStream(k))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			// Partitions are made in order, so the first missing ends them.
			return k, nil
		}
		if err != nil {
			return 0, fmt.Errorf("streams: look up %s: %w", ChunksStream(k), err)
		}
	}
	return salvagetype.PartitionsMax, nil
}
