package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/streams"
)

// casAttempts caps every re-read-and-retry loop.
const casAttempts = 16

// Waits after a lost compare-and-swap: full jitter, the bound doubling
// from casBackoffBase to casBackoffMax. Writers that all retry at once
// on a hot key (a job record many processes count into) lose again
// together; spread out, most of them win on the next attempt.
const (
	casBackoffBase = time.Millisecond
	casBackoffMax  = 64 * time.Millisecond
)

// casBackoff waits before attempt (counted from 1) of a compare-and-swap
// that lost a race, or until ctx ends.
func casBackoff(ctx context.Context, attempt int) error {
	t := time.NewTimer(rand.N(min(casBackoffMax, casBackoffBase<<min(attempt, 10))) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// getJSON reads key and decodes it; ErrNotFound when absent or deleted.
func getJSON[T any](ctx context.Context, b jetstream.KeyValue, key string) (T, uint64, error) {
	var v T
	var e jetstream.KeyValueEntry
	err := streams.Retry(ctx, func(ctx context.Context) error {
		var err error
		e, err = b.Get(ctx, key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return v, 0, fmt.Errorf("%w: %s/%s", ErrNotFound, b.Bucket(), key)
	}
	if err != nil {
		return v, 0, fmt.Errorf("kv: get %s/%s: %w", b.Bucket(), key, err)
	}
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return v, 0, fmt.Errorf("kv: decode %s/%s: %w", b.Bucket(), key, err)
	}
	return v, e.Revision(), nil
}

// createJSON stores v under key if the key is absent. A conflict is
// returned as jetstream.ErrKeyExists.
func createJSON(ctx context.Context, b jetstream.KeyValue, key string, v any, opts ...jetstream.KVCreateOpt) (uint64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("kv: encode %s: %w", key, err)
	}
	var rev uint64
	err = streams.Retry(ctx, func(ctx context.Context) error {
		var err error
		rev, err = b.Create(ctx, key, data, opts...)
		return err
	})
	return rev, err
}

// updateJSON stores v under key if its revision is still rev. A conflict is
// returned as jetstream.ErrKeyRevisionMismatch.
func updateJSON(ctx context.Context, b jetstream.KeyValue, key string, v any, rev uint64) (uint64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("kv: encode %s: %w", key, err)
	}
	var out uint64
	err = streams.Retry(ctx, func(ctx context.Context) error {
		var err error
		out, err = b.Update(ctx, key, data, rev)
		return err
	})
	return out, err
}

// isConflict reports a lost compare-and-swap.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// mutateJSON applies fn to the current value of key (the zero value when
// absent, with exists false) and writes it back by CAS, retrying lost races
// up to casAttempts times. fn returning ErrNoChange leaves the record unchanged.
func mutateJSON[T any](ctx context.Context, b jetstream.KeyValue, key string, fn func(v *T, exists bool) error) (T, uint64, error) {
	return mutateJSONWith(ctx, b, key, func(ctx context.Context, key string, v T, rev uint64) (uint64, error) {
		return updateJSON(ctx, b, key, v, rev)
	}, fn)
}

// mutateJSONWith is mutateJSON writing an existing key with update,
// which returns a lost race as jetstream.ErrKeyRevisionMismatch.
func mutateJSONWith[T any](ctx context.Context, b jetstream.KeyValue, key string, update func(ctx context.Context, key string, v T, rev uint64) (uint64, error), fn func(v *T, exists bool) error) (T, uint64, error) {
	for attempt := range casAttempts {
		if attempt > 0 {
			if err := casBackoff(ctx, attempt); err != nil {
				var zero T
				return zero, 0, err
			}
		}
		v, rev, err := getJSON[T](ctx, b, key)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return v, 0, err
		}
		if err := fn(&v, exists); err != nil {
			if errors.Is(err, ErrNoChange) {
				return v, rev, nil
			}
			return v, rev, err
		}
		if exists {
			rev, err = update(ctx, key, v, rev)
		} else {
			rev, err = createJSON(ctx, b, key, v)
		}
		if err == nil {
			return v, rev, nil
		}
		if !isConflict(err) {
			return v, 0, fmt.Errorf("kv: write %s/%s: %w", b.Bucket(), key, err)
		}
	}
	var zero T
	return zero, 0, fmt.Errorf("%w: %s/%s after %d attempts", errContention, b.Bucket(), key, casAttempts)
}

// lastValues reads the latest value of every key of bucket that matches
// filter, in one multi-last direct get, and hands each to fn; delete and
// purge markers are skipped. It returns an error, after fn may have seen
// some keys, when the server refuses the batch (it caps the keys of one).
func lastValues(ctx context.Context, js jetstream.JetStream, bucket, filter string, fn func(key string, value []byte, seq uint64) error) error {
	return lastValuesOf(ctx, js, bucket, []string{filter}, fn)
}

// lastValuesOf is lastValues for several keys or filters at once.
func lastValuesOf(ctx context.Context, js jetstream.JetStream, bucket string, filters []string, fn func(key string, value []byte, seq uint64) error) error {
	return lastMsgsOf(ctx, js, bucket, filters, func(key string, m *jetstream.RawStreamMsg) error {
		return fn(key, m.Data, m.Sequence)
	})
}

// lastMsgsOf is lastValuesOf handing over each message, headers and all.
func lastMsgsOf(ctx context.Context, js jetstream.JetStream, bucket string, filters []string, fn func(key string, m *jetstream.RawStreamMsg) error) error {
	prefix := "$KV." + bucket + "."
	subjects := make([]string, len(filters))
	for i, f := range filters {
		subjects[i] = prefix + f
	}
	var ferr error
	err := directBatch(ctx, js, "KV_"+bucket, struct {
		MultiLast []string `json:"multi_last"`
	}{subjects}, func(m *jetstream.RawStreamMsg) bool {
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
			return true
		}
		ferr = fn(m.Subject[len(prefix):], m)
		return ferr == nil
	})
	if err != nil {
		return err
	}
	return ferr
}
