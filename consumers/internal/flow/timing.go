package flow

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// RetryDelay spaces the deliveries of a message that failed on an
// infrastructure error: 1s, 2s, 4s … up to a minute.
func RetryDelay(meta *jetstream.MsgMetadata) time.Duration {
	n := uint64(1)
	if meta != nil {
		n = max(meta.NumDelivered, 1)
	}
	return min(time.Second<<min(n-1, 6), time.Minute)
}

// SleepCtx waits d, or until ctx ends.
func SleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
