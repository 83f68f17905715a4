package streams

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Infrastructure retry bounds (invariant 8 of docs/design.md).
const (
	infraBackoffMin = 50 * time.Millisecond
	infraBackoffMax = 2 * time.Second
)

// errCodeNoPeers is JetStream's "no suitable peers for placement".
const errCodeNoPeers = 10005

// isTransient reports whether err is an infrastructure hiccup that goes away
// by itself: a request timeout, no responders during a leader election or a
// restart, a connection that is reconnecting. Such errors are retried by
// Retry and never counted as tier-1 or tier-2 attempts.
func isTransient(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 503 is "JetStream system temporarily unavailable" (leader
		// elections, catch-up); 408 is a server-side request timeout;
		// 10005 is "no suitable peers for placement": a peer is not
		// online yet (a forming cluster) or is restarting.
		return apiErr.Code == 503 || apiErr.Code == 408 || apiErr.ErrorCode == errCodeNoPeers
	}
	return errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrStaleConnection)
}

// Retry runs op until it succeeds, returns an error that is not transient,
// or ctx ends. Waits grow exponentially with full jitter up to 2s. Errors
// from op are returned unchanged so callers can still use errors.Is; when ctx
// ends first, ctx's error is joined with the last transient error.
func Retry(ctx context.Context, op func(ctx context.Context) error) error {
	wait := infraBackoffMin
	for {
		err := op(ctx)
		if err == nil || !isTransient(err) {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		t := time.NewTimer(rand.N(wait) + time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-t.C:
		}
		wait = min(wait*2, infraBackoffMax)
	}
}
