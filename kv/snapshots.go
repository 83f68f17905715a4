package kv

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/streams"
)

// snapshotInlineMax is the largest compressed snapshot kept inline in its
// chunk's checkpoint; larger ones go to the object store.
const snapshotInlineMax = 4 << 10

// SnapshotRef is where an agent snapshot lives: inline (gzip) in the
// checkpoint that names it, or in the salvage_snapshots object store.
type SnapshotRef struct {
	Seq    int    `json:"seq"`
	Object string `json:"object,omitempty"`
	Inline []byte `json:"inline,omitempty"`
}

// snapshotStore stores agent state snapshots, gzip-compressed.
type snapshotStore struct {
	os jetstream.ObjectStore
}

// snapshotName is an agent snapshot's object name:
// <job>.<chunk>.<epoch>.<agent>.<seq>.
func snapshotName(job string, chunk, epoch int, agent string, seq int) string {
	return job + "." + strconv.Itoa(chunk) + "." + strconv.Itoa(epoch) + "." + agent + "." + strconv.Itoa(seq)
}

// Save compresses data and returns a reference: inline when it is small,
// so a stage-boundary snapshot rides in the checkpoint write the stage
// pays anyway, else stored under name in the object store.
func (s *snapshotStore) Save(ctx context.Context, name string, seq int, data []byte) (SnapshotRef, error) {
	z, err := compress(data)
	if err != nil {
		return SnapshotRef{}, fmt.Errorf("kv: compress snapshot %s: %w", name, err)
	}
	if len(z) <= snapshotInlineMax {
		return SnapshotRef{Seq: seq, Inline: z}, nil
	}
	if err := s.put(ctx, name, z); err != nil {
		return SnapshotRef{}, err
	}
	return SnapshotRef{Seq: seq, Object: name}, nil
}

// Put stores data, compressed, in the object store under name whatever its
// size: for snapshots no checkpoint write will carry.
func (s *snapshotStore) Put(ctx context.Context, name string, data []byte) error {
	z, err := compress(data)
	if err != nil {
		return fmt.Errorf("kv: compress snapshot %s: %w", name, err)
	}
	return s.put(ctx, name, z)
}

// put stores z under name, asked again while the store cannot answer (a
// leader election, a node restarting): an agent must not take the
// store's hiccup for its own failure and spend the chunk's deliveries on
// it. A put again replaces the object whole.
func (s *snapshotStore) put(ctx context.Context, name string, z []byte) error {
	err := streams.Retry(ctx, func(ctx context.Context) error {
		_, err := s.os.PutBytes(ctx, name, z)
		return err
	})
	if err != nil {
		return fmt.Errorf("kv: put snapshot %s: %w", name, err)
	}
	return nil
}

// Load returns a snapshot's data, or ErrNotFound.
func (s *snapshotStore) Load(ctx context.Context, ref SnapshotRef) ([]byte, error) {
	z := ref.Inline
	if ref.Object != "" {
		err := streams.Retry(ctx, func(ctx context.Context) error {
			var err error
			z, err = s.os.GetBytes(ctx, ref.Object)
			return err
		})
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, fmt.Errorf("%w: snapshot %s", ErrNotFound, ref.Object)
		}
		if err != nil {
			return nil, fmt.Errorf("kv: get snapshot %s: %w", ref.Object, err)
		}
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, fmt.Errorf("kv: snapshot %d: %w", ref.Seq, err)
	}
	return io.ReadAll(zr)
}

// gzipWriters reuse compressors: a new one allocates about a megabyte.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

func compress(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
