package flow

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/salvagehq/salvage/kv"
)

// HandBack hands back every chunk holder's claims are listed under
// (Claims.HeldBy), in every partition, whose claim still names it, and
// removes the listings; it returns how many it handed back. The reaper
// calls it for a dead process, a worker for its own id when it starts
// (what a previous life under that id held).
func HandBack(ctx context.Context, js jetstream.JetStream, stores *kv.Stores, log zerolog.Logger, holder string) (int, error) {
	n := 0
	for _, part := range stores.Parts() {
		back, err := handBackIn(ctx, js, part, log, holder)
		n += back
		if err != nil {
			return n, err
		}
	}
	if n > 0 {
		if err := js.Conn().FlushTimeout(5 * time.Second); err != nil {
			return n, err
		}
	}
	return n, nil
}

// handBackIn is handBack in one partition.
func handBackIn(ctx context.Context, js jetstream.JetStream, part *kv.Part, log zerolog.Logger, holder string) (int, error) {
	keys, err := part.Claims.HeldBy(ctx, holder)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, key := range keys {
		if job, chunk, ok := kv.ParseChunkKey(key); ok {
			back, err := handBackOne(ctx, js, part, holder, job, chunk)
			if err != nil {
				return n, err
			}
			if back {
				n++
				log.Info().Str("job_id", job).Int("chunk", chunk).Str("holder", holder).Msg("dead holder's chunk handed back to its pool")
			}
		}
		if err := part.Claims.Unhold(ctx, holder, key, 0); err != nil {
			return n, err
		}
	}
	return n, nil
}

// handBackOne hands back the claim on one chunk if it still names holder
// — or names nobody since holder's earlier hand-back, whose nak may not
// have been sent — and naks the delivery it records: the server
// redelivers the message to the pool at once (a nak of a delivery
// acknowledged since is ignored). At MaxDeliver the server dead-letters
// it instead, as for any delivery.
func handBackOne(ctx context.Context, js jetstream.JetStream, part *kv.Part, holder, job string, chunk int) (bool, error) {
	cur, err := part.Claims.Get(ctx, job, chunk)
	if errors.Is(err, kv.ErrNotFound) {
		return false, nil // released
	}
	if err != nil {
		return false, err
	}
	switch {
	case cur.Reply == "":
		return false, nil
	case cur.ClaimedBy == holder:
		cur, err = part.Claims.Orphan(ctx, cur)
		if errors.Is(err, kv.ErrClaimHeld) {
			return false, nil // taken or released meanwhile
		}
		if err != nil {
			return false, err
		}
	case cur.ClaimedBy == "" && cur.From == holder:
	default:
		return false, nil // another holder's now
	}
	return true, js.Conn().Publish(cur.Reply, []byte("-NAK"))
}
