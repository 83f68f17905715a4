package kv

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errWatchClosed ends one watch so Follow starts another.
var errWatchClosed = errors.New("kv: watch closed")

// errReconnected ends a watch whose connection reconnected: after a
// server restart the ordered consumer under a watch is only made again
// once it has missed enough heartbeats (~19 s measured with nats.go
// v1.55.0), so Follow starts a new watch at once instead.
var errReconnected = errors.New("kv: connection reconnected")

// reconnectPoll is how often a watch looks at its connection's
// reconnect count.
const reconnectPoll = 250 * time.Millisecond

// Follow watches the keys of bucket that filter matches (a KV key
// pattern; jetstream.AllKeys for every key) until ctx ends, starting over
// after an interruption (a server restart, a leader move; within a moment
// of the connection reconnecting, not when the watch notices). It hands
// each entry to update, then nil once the existing values have all been
// delivered; after a restart the existing values come again, so update
// must be idempotent per key. onEnd, if set, hears why each watch ended
// and returns nil to start another, or an error to stop following, which
// Follow returns. It returns nil when ctx ends. It blocks.
func Follow(ctx context.Context, js jetstream.JetStream, bucket, filter string, update func(jetstream.KeyValueEntry), onEnd func(error) error) error {
	if onEnd == nil {
		onEnd = func(error) error { return nil }
	}
	for ctx.Err() == nil {
		err := follow(ctx, js, bucket, filter, update)
		if ctx.Err() != nil {
			return nil
		}
		if stop := onEnd(err); stop != nil {
			return stop
		}
		if errors.Is(err, errReconnected) {
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

func follow(ctx context.Context, js jetstream.JetStream, bucket, filter string, update func(jetstream.KeyValueEntry)) error {
	nc := js.Conn()
	reconnects := nc.Stats().Reconnects
	b, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return err
	}
	w, err := b.Watch(ctx, filter)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	tick := time.NewTicker(reconnectPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if nc.Stats().Reconnects != reconnects && nc.IsConnected() {
				return errReconnected
			}
		case e, ok := <-w.Updates():
			if !ok {
				return errWatchClosed
			}
			update(e)
		}
	}
}
