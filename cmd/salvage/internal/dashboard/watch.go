package dashboard

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// followBucket watches every key of bucket until ctx ends, starting over
// after an interruption. It hands each entry to update (nil once the
// existing values have all been delivered). It blocks.
func followBucket(ctx context.Context, js jetstream.JetStream, bucket string, log zerolog.Logger, update func(jetstream.KeyValueEntry)) {
	for ctx.Err() == nil {
		err := watchBucket(ctx, js, bucket, update)
		if ctx.Err() == nil {
			log.Debug().Err(err).Str("bucket", bucket).Msg("watch ended; restarting")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func watchBucket(ctx context.Context, js jetstream.JetStream, bucket string, update func(jetstream.KeyValueEntry)) error {
	b, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return err
	}
	w, err := b.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			update(e)
		}
	}
}
