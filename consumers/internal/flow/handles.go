package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// handlesMax bounds the stream handle cache; past it the cache starts
// over (a process uses a dozen streams on a connection or two).
const handlesMax = 256

type handleKey struct {
	js   jetstream.JetStream
	name string
}

var handles struct {
	mu sync.Mutex
	m  map[handleKey]jetstream.Stream
}

// StreamHandle returns a handle on the stream called name. jetstream's
// Stream asks the server for the stream's info each time (a round trip,
// and a JSON document the server builds), and admitting a job's next
// chunk or deleting a consumed message needed one every time. What a
// handle does (get, delete, purge) goes by its name, so a cached handle
// serves as long as the stream exists, and a failed call finds the stream
// gone just as a fresh handle would have.
func StreamHandle(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	k := handleKey{js, name}
	handles.mu.Lock()
	s, ok := handles.m[k]
	handles.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	handles.mu.Lock()
	if handles.m == nil || len(handles.m) >= handlesMax {
		handles.m = map[handleKey]jetstream.Stream{}
	}
	handles.m[k] = s
	handles.mu.Unlock()
	return s, nil
}

// GetMsg reads the message at seq of stream: nil without an error when
// there is none (deleted, purged, aged out, or never written).
// Infrastructure errors are retried.
func GetMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	err := streams.Retry(ctx, func(ctx context.Context) error {
		s, err := StreamHandle(ctx, js, stream)
		if err != nil {
			return err
		}
		m, err = s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			m = nil
			return nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("consumers: read %s %d: %w", stream, seq, err)
	}
	return m, nil
}

// RefOf names chunk message c as its subjects do.
func RefOf(c salvagetype.ChunkMsg) streams.ChunkRef {
	return streams.ChunkRef{Partition: c.Partition, Pipeline: c.Pipeline, Job: c.Job, Chunk: c.Chunk}
}
