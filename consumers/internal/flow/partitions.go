package flow

import (
	"context"
	"fmt"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// EnvelopePart is the storage of env's chunk: the partition whose chunk
// stream its original message is from (an envelope without one, written
// before partitions, is partition 0's).
func EnvelopePart(ctx context.Context, st *kv.Stores, env salvagetype.Envelope) (*kv.Part, error) {
	if env.Original.Stream == "" {
		return st.Part(ctx, 0)
	}
	k, ok := streams.PartitionOfStream(env.Original.Stream)
	if !ok {
		return nil, fmt.Errorf("consumers: envelope %s: its original is from %s, which holds no chunks", env.ID, env.Original.Stream)
	}
	return st.Part(ctx, k)
}

// EpochRows are the journal rows of the chunk epoch env was written in.
func EpochRows(ctx context.Context, st *kv.Stores, env salvagetype.Envelope) (map[string]kv.StoredRow, error) {
	part, err := EnvelopePart(ctx, st, env)
	if err != nil {
		return nil, err
	}
	return part.Journal.Load(ctx, env.Job, env.Chunk, env.Checkpoint.Epoch)
}

// RecordPart is the storage of the chunk of envelope record rec: the
// partition its original's subject names (one without a subject, of
// before partitions, is partition 0's).
func RecordPart(ctx context.Context, st *kv.Stores, rec kv.EnvelopeRecord) (*kv.Part, error) {
	if rec.Subject == "" {
		return st.Part(ctx, 0)
	}
	ref, err := streams.ParseChunkSubject(rec.Subject)
	if err != nil {
		return nil, fmt.Errorf("consumers: envelope %s: %w", rec.ID, err)
	}
	return st.Part(ctx, ref.Partition)
}
