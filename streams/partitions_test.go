package streams_test

import (
	"errors"
	"testing"

	"github.com/salvagehq/salvage/streams"
)

// TestPartitionNames: partition 0 keeps the names of a deployment before
// partitions; a chunk subject of any partition parses back to the chunk
// and its partition, and nothing else passes for one.
func TestPartitionNames(t *testing.T) {
	if streams.ChunksStream(0) != "SALVAGE_CHUNKS" || streams.ChunksStream(2) != "SALVAGE_CHUNKS_2" {
		t.Fatalf("streams: %s, %s", streams.ChunksStream(0), streams.ChunksStream(2))
	}
	for k, want := range map[int]string{0: "salvage.chunks.p.J.3", 2: "salvage.part.2.chunks.p.J.3"} {
		got := streams.ChunkRef{Partition: k, Pipeline: "p", Job: "J", Chunk: 3}.Subject()
		if got != want {
			t.Fatalf("ChunkRef.Subject in partition %d = %s, want %s", k, got, want)
		}
		ref, err := streams.ParseChunkSubject(got)
		if err != nil || ref != (streams.ChunkRef{Pipeline: "p", Job: "J", Chunk: 3, Partition: k}) {
			t.Fatalf("ParseChunkSubject(%s) = %+v, %v", got, ref, err)
		}
		if n, ok := streams.PartitionOfStream(streams.ChunksStream(k)); !ok || n != k {
			t.Fatalf("PartitionOfStream(%s) = %d, %v", streams.ChunksStream(k), n, ok)
		}
	}
	for _, s := range []string{"salvage.part.0.chunks.p.J.3", "salvage.part.02.chunks.p.J.3", "salvage.part.64.chunks.p.J.3",
		"salvage.part.1.jobs.p.J.3", "salvage.part.x.chunks.p.J.3", "salvage.part.1.chunks.p.J", "salvage.part.1"} {
		if ref, err := streams.ParseChunkSubject(s); !errors.Is(err, streams.ErrBadSubject) {
			t.Errorf("ParseChunkSubject(%s) = %+v, %v; want ErrBadSubject", s, ref, err)
		}
	}
	for _, s := range []string{"SALVAGE_CHUNKS_0", "SALVAGE_CHUNKS_01", "SALVAGE_CHUNKS_64", "SALVAGE_CHUNKS_", "SALVAGE_JOBS", "KV_salvage_claims_1"} {
		if _, ok := streams.PartitionOfStream(s); ok {
			t.Errorf("PartitionOfStream(%s) says a chunk stream", s)
		}
	}
	// The hash spreads and stays put.
	seen := map[int]bool{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		k := streams.PartitionOf(id, 3)
		if k < 0 || k > 2 || k != streams.PartitionOf(id, 3) || streams.PartitionOf(id, 1) != 0 {
			t.Fatalf("PartitionOf(%s) = %d", id, k)
		}
		seen[k] = true
	}
	if len(seen) != 3 {
		t.Fatalf("ten ids over three partitions: %v", seen)
	}
	if err := streams.ValidatePartitions(65); !errors.Is(err, streams.ErrPartitions) {
		t.Fatalf("65 partitions: %v", err)
	}
}
