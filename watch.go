package salvage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Change is one update a watch delivers: a record as it now stands, its
// removal, or the mark that the watch has caught up.
type Change[T any] struct {
	// Key is the record's key: a job id, an envelope id or a journal key.
	Key string
	// Revision is the key's revision. A watch that restarts (the server
	// restarted, a stream leader moved) delivers every key's latest value
	// again, so code that counts changes counts a key's revision once.
	Revision uint64
	// Value is the record; the zero value when Deleted or CaughtUp.
	Value T
	// Deleted is set when the record was removed: its retention expired
	// or it was purged.
	Deleted bool
	// CaughtUp is set, on a Change with no record, once every record that
	// existed when the watch (re)started has been delivered.
	CaughtUp bool
}

// JobWatch hands fn every job record, then every change to one, until
// ctx ends; it blocks. fn runs on one goroutine, one change at a time, and
// must return promptly: the watch waits for it.
//
// An interruption — the server restarting, a stream's leader moving, the
// connection reconnecting — is not an error: the watch starts again and
// delivers every record again (Change.Revision tells a repeat). JobWatch
// returns nil once ctx ends, and an error, at once, when the watch can
// never go on: one wrapping ErrNotProvisioned when the deployment's bucket
// does not exist, jetstream.ErrJetStreamNotEnabled (or ...ForAccount) when
// the connection's account has no JetStream, nats.ErrConnectionClosed
// when the client's connection was closed. A record that does not decode
// is logged and skipped. A user without the permission to read the bucket
// sees requests time out, which look like an interruption: the watch
// keeps trying, logging each failure at debug level.
func (c *Client) JobWatch(ctx context.Context, fn func(Change[Job])) error {
	return watch(ctx, c, kv.BucketJobs, jetstream.AllKeys, fn)
}

// EnvelopeWatch is JobWatch for envelope records, with its errors.
func (c *Client) EnvelopeWatch(ctx context.Context, fn func(Change[EnvelopeRecord])) error {
	// Envelope ids are one token; the bucket's guard keys have two.
	return watch(ctx, c, kv.BucketEnvelopes, "*", fn)
}

// CallWatch is JobWatch for the journal: every call as it begins and
// ends, its key the journal key, in every partition (Config.Partitions):
// those the deployment has when the watch starts, and those added while
// it runs (looked for as often as a process looks for them). Records
// leave with the journal's retention (RetentionDefault). CaughtUp comes
// once every partition's journal watched has been delivered, and again
// after a partition's watch restarts and catches up. It returns as
// JobWatch does; the first partition's watch that cannot go on ends them
// all.
func (c *Client) CallWatch(ctx context.Context, fn func(Change[Call])) error {
	// The first partition's watch that cannot go on ends them all, and
	// is what CallWatch returns.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		fatal     error
		fatalOnce sync.Once
	)
	var mu sync.Mutex
	var caught []bool
	var wg sync.WaitGroup
	// follow watches partition k's journal; caught[k] must exist.
	follow := func(k int) {
		wg.Go(func() {
			err := watch(ctx, c, kv.BucketIn(kv.BucketJournal, k), jetstream.AllKeys, func(ch Change[Call]) {
				mu.Lock()
				defer mu.Unlock()
				if ch.CaughtUp {
					caught[k] = true
					if slices.Contains(caught, false) {
						return
					}
				}
				fn(ch)
			})
			if err != nil {
				fatalOnce.Do(func() { fatal = err })
				stop()
			}
		})
	}
	n := 0
	for ctx.Err() == nil {
		var err error
		if n, err = streams.Partitions(ctx, c.js); err == nil {
			break
		}
		if werr := watchEnded(err, c.js, kv.BucketIn(kv.BucketJournal, 0)); werr != nil {
			return werr
		}
		c.cfg.Logger.Debug().Err(err).Msg("count the partitions to watch the journal of; trying again")
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	// Every partition there is, before any watch can say it caught up.
	caught = make([]bool, max(n, 1))
	for k := range max(n, 1) {
		follow(k)
	}
	wg.Go(func() {
		// Each next partition once its chunk stream exists.
		for next := max(n, 1); ctx.Err() == nil && next < salvagetype.PartitionsMax; {
			_, err := c.js.Stream(ctx, streams.ChunksStream(next))
			if err == nil {
				mu.Lock()
				caught = append(caught, false)
				mu.Unlock()
				follow(next)
				next++
				continue
			}
			if !errors.Is(err, jetstream.ErrStreamNotFound) && ctx.Err() == nil {
				c.cfg.Logger.Debug().Err(err).Int("partition", next).Msg("look for a partition to watch the journal of")
			}
			select {
			case <-ctx.Done():
			case <-time.After(partitionsCheckEvery):
			}
		}
	})
	wg.Wait()
	// Read after every watch has ended: the caller's context ending
	// (whatever its cause) is nil.
	return fatal
}

// watchEnded says whether a watch of bucket that ended with err can never
// go on: the error to return, or nil to start it again.
func watchEnded(err error, js jetstream.JetStream, bucket string) error {
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("salvage: watch %s: %w", bucket, ErrNotProvisioned)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("salvage: watch %s: %w", bucket, err)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrConnectionClosed), js.Conn().IsClosed():
		return fmt.Errorf("salvage: watch %s: %w", bucket, nats.ErrConnectionClosed)
	}
	return nil
}

// watch follows bucket's keys matching filter, decoding each value into
// T; a value that does not decode is logged and skipped. It returns nil
// when ctx ends, or what watchEnded says ends it.
func watch[T any](ctx context.Context, c *Client, bucket, filter string, fn func(Change[T])) error {
	log := c.cfg.Logger.With().Str("bucket", bucket).Logger()
	return kv.Follow(ctx, c.js, bucket, filter, func(e jetstream.KeyValueEntry) {
		if e == nil {
			fn(Change[T]{CaughtUp: true})
			return
		}
		ch := Change[T]{Key: e.Key(), Revision: e.Revision()}
		if e.Operation() != jetstream.KeyValuePut {
			ch.Deleted = true
			fn(ch)
			return
		}
		if err := json.Unmarshal(e.Value(), &ch.Value); err != nil {
			log.Warn().Err(err).Str("key", e.Key()).Msg("record does not decode; skipped")
			return
		}
		fn(ch)
	}, func(err error) error {
		if werr := watchEnded(err, c.js, bucket); werr != nil {
			return werr
		}
		log.Debug().Err(err).Msg("watch ended; restarting")
		return nil
	})
}
