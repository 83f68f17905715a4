package kv

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errWatchClosed ends one watch so Follow starts another.
var errWatchClosed = errors.New("kv: watch closed")

// Follow watches every key of bucket until ctx ends, starting over after
// an interruption (a server restart, a leader move). It hands each entry
// to update, then nil once the existing values have all been delivered;
// after a restart the existing values come again, so update must be
// idempotent per key. onRestart, if set, hears why a watch ended. It
// blocks.
func Follow(ctx context.Context, js jetstream.JetStream, bucket string, update func(jetstream.KeyValueEntry), onRestart func(error)) {
	FollowKeys(ctx, js, bucket, jetstream.AllKeys, update, onRestart)
}

// FollowKeys is Follow for the keys filter matches (a KV key pattern).
func FollowKeys(ctx context.Context, js jetstream.JetStream, bucket, filter string, update func(jetstream.KeyValueEntry), onRestart func(error)) {
	for ctx.Err() == nil {
		err := follow(ctx, js, bucket, filter, update)
		if ctx.Err() != nil {
			return
		}
		if onRestart != nil {
			onRestart(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func follow(ctx context.Context, js jetstream.JetStream, bucket, filter string, update func(jetstream.KeyValueEntry)) error {
	b, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return err
	}
	w, err := b.Watch(ctx, filter)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errWatchClosed
			}
			update(e)
		}
	}
}
