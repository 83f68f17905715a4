package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// LimitShares is the value of share.<key>: what each process holds of
// the key's limit until its lease expires, and a pause every process
// honours (a provider's 429 or rate-limit headers asked the fleet to
// wait). A process changes only its own share, and takes only what the
// others' unexpired shares leave: the shares never add up past the
// limit, and a dead process's share is free once its lease lapses.
type LimitShares struct {
	Key    string                `json:"key"`
	Shares map[string]LimitShare `json:"shares,omitempty"`
	// Refused counts the provider's refusals (429s) of the key's calls
	// by the minute they came in (Unix seconds of the minute's start),
	// the last limitRefusedWindow of them; each process adds its own at
	// its renewal.
	Refused map[int64]int `json:"refused_429,omitempty"`
	// PausedUntil, when in the future, holds every call to the key.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	PauseReason string    `json:"pause_reason,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// LimitShare is one process's share of a limit.
type LimitShare struct {
	RequestsPerMinute float64 `json:"rpm,omitempty"`
	TokensPerMinute   float64 `json:"tpm,omitempty"`
	InFlight          int     `json:"in_flight,omitempty"`
	Chunks            int     `json:"chunks,omitempty"`
	// Wants is set when the holder had calls waiting in its last lease:
	// it would use more than it holds.
	Wants bool `json:"wants,omitempty"`
	// Expires ends the share unless renewed.
	Expires time.Time `json:"expires"`
}

// limitStore is the salvage_limits store.
type limitStore struct {
	b   jetstream.KeyValue
	js  jetstream.JetStream
	now func() time.Time
}

const (
	limitSpecPrefix  = "spec."
	limitSharePrefix = "share."
)

// Set stores l (Validate first), by whom.
func (s *limitStore) Set(ctx context.Context, l salvagetype.Limit, by string) (salvagetype.Limit, error) {
	if s == nil {
		return l, salvagetype.ErrLimitsNotProvisioned
	}
	if err := l.Validate(); err != nil {
		return l, err
	}
	l.SetBy, l.SetAt = by, s.now().UTC()
	data, err := json.Marshal(l)
	if err != nil {
		return l, err
	}
	if err := streams.Retry(ctx, func(ctx context.Context) error {
		_, err := s.b.Put(ctx, limitSpecPrefix+l.Key, data)
		return err
	}); err != nil {
		return l, fmt.Errorf("kv: set limit %s: %w", l.Key, err)
	}
	return l, nil
}

// Remove deletes the limit of key and its shares; ErrNotFound when none
// is declared.
func (s *limitStore) Remove(ctx context.Context, key string) error {
	if s == nil {
		return salvagetype.ErrLimitsNotProvisioned
	}
	if _, _, err := s.Get(ctx, key); err != nil {
		return err
	}
	if err := s.b.Delete(ctx, limitSpecPrefix+key); err != nil {
		return fmt.Errorf("kv: remove limit %s: %w", key, err)
	}
	if err := s.b.Delete(ctx, limitSharePrefix+key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("kv: remove the shares of limit %s: %w", key, err)
	}
	return nil
}

// Get returns the limit of key (ErrNotFound when none is declared) and
// its revision.
func (s *limitStore) Get(ctx context.Context, key string) (salvagetype.Limit, uint64, error) {
	if s == nil {
		return salvagetype.Limit{}, 0, salvagetype.ErrLimitsNotProvisioned
	}
	return getJSON[salvagetype.Limit](ctx, s.b, limitSpecPrefix+key)
}

// List returns every declared limit, in one multi-last direct get.
func (s *limitStore) List(ctx context.Context) ([]salvagetype.Limit, error) {
	if s == nil {
		return nil, salvagetype.ErrLimitsNotProvisioned
	}
	var out []salvagetype.Limit
	err := lastValues(ctx, s.js, BucketLimits, LimitSpecs, func(_ string, value []byte, _ uint64) error {
		var l salvagetype.Limit
		if err := json.Unmarshal(value, &l); err != nil {
			return fmt.Errorf("kv: decode limit: %w", err)
		}
		out = append(out, l)
		return nil
	})
	return out, err
}

// Shares returns the shares of key's limit (ErrNotFound when nobody
// holds one yet).
func (s *limitStore) Shares(ctx context.Context, key string) (LimitShares, uint64, error) {
	if s == nil {
		return LimitShares{}, 0, salvagetype.ErrLimitsNotProvisioned
	}
	return getJSON[LimitShares](ctx, s.b, limitSharePrefix+key)
}

// AllShares returns the shares of every limit anybody holds, by key, in
// one multi-last direct get (as List reads the limits).
func (s *limitStore) AllShares(ctx context.Context) (map[string]LimitShares, error) {
	if s == nil {
		return nil, salvagetype.ErrLimitsNotProvisioned
	}
	out := map[string]LimitShares{}
	err := lastValues(ctx, s.js, BucketLimits, limitSharePrefix+">", func(key string, value []byte, _ uint64) error {
		var sh LimitShares
		if err := json.Unmarshal(value, &sh); err != nil {
			return fmt.Errorf("kv: decode the shares of %s: %w", key, err)
		}
		out[strings.TrimPrefix(key, limitSharePrefix)] = sh
		return nil
	})
	return out, err
}

// MutateShares applies fn to the shares of key (empty when absent) and
// writes them by CAS, retrying lost races; fn returning ErrNoChange
// writes nothing.
func (s *limitStore) MutateShares(ctx context.Context, key string, fn func(sh *LimitShares) error) (LimitShares, error) {
	if s == nil {
		return LimitShares{}, salvagetype.ErrLimitsNotProvisioned
	}
	sh, _, err := mutateJSON(ctx, s.b, limitSharePrefix+key, func(sh *LimitShares, _ bool) error {
		if sh.Shares == nil {
			sh.Shares = map[string]LimitShare{}
		}
		if err := fn(sh); err != nil {
			return err
		}
		sh.Key, sh.UpdatedAt = key, s.now().UTC()
		return nil
	})
	return sh, err
}

// WatchSpecs follows the declared limits: every current one, then each
// change (a removed limit arrives as a delete entry). The watcher stops
// with ctx.
func (s *limitStore) WatchSpecs(ctx context.Context) (jetstream.KeyWatcher, error) {
	if s == nil {
		return nil, salvagetype.ErrLimitsNotProvisioned
	}
	return s.b.Watch(ctx, LimitSpecs)
}

// DecodeLimit reads an entry of LimitSpecs: the limit's key, and the
// limit; ok is false for a deleted key, a value that does not decode, or
// no entry (a watch's caught-up marker).
func DecodeLimit(e jetstream.KeyValueEntry) (key string, l salvagetype.Limit, ok bool) {
	if e == nil {
		return "", l, false
	}
	key = strings.TrimPrefix(e.Key(), limitSpecPrefix)
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &l) != nil {
		return key, l, false
	}
	return key, l, true
}

// limitRefusedWindow is how far back a limit's record counts the
// provider's refusals (LimitShares.Refused).
const limitRefusedWindow = 10 * time.Minute

// AddRefused counts n refusals in the minute of now, and forgets those
// older than limitRefusedWindow.
func (sh *LimitShares) AddRefused(now time.Time, n int) {
	minute := now.Truncate(time.Minute).Unix()
	for m := range sh.Refused {
		if m <= minute-int64(limitRefusedWindow/time.Second) {
			delete(sh.Refused, m)
		}
	}
	if n <= 0 {
		return
	}
	if sh.Refused == nil {
		sh.Refused = map[int64]int{}
	}
	sh.Refused[minute] += n
}

// RecentRefused is how many refusals the record counts in the minutes of
// the limitRefusedWindow up to now's (the minute and the nine before).
func (sh LimitShares) RecentRefused(now time.Time) int {
	since := now.Add(-limitRefusedWindow).Truncate(time.Minute).Unix()
	n := 0
	for m, c := range sh.Refused {
		if m > since {
			n += c
		}
	}
	return n
}
