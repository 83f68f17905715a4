package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Retention defaults, one per data class.
const (

	// callsRetentionMax keeps the pure-call window inside the time
	// SALVAGE_EVENTS keeps the finished event that starts it.
	callsRetentionMax = 7 * 24 * time.Hour
	// markerTTL is how long the delete marker of an expired key stays, so
	// that a watch sees the key go. The server raises a shorter message
	// TTL to it in a bucket keeping more than one revision per key.
	markerTTL = 10 * time.Second
)

// Retention is how long what a finished job leaves behind is kept, by
// data class. Nothing an open envelope, a parked or held chunk or a
// running job needs is removed: the clocks start when a job finishes,
// and a chunk whose envelope is still open is left whole until it
// settles. Zero fields take the defaults.
type Retention struct {
	// Calls: the pure-call journal rows of a done or cancelled chunk are
	// removed this long after its job finished. Default 1h, at most 7
	// days.
	Calls time.Duration `json:"calls,omitempty"`
	// Effects: the side-effect journal rows of a done or cancelled chunk
	// (what a replay or a verification looks up by idempotency key) are
	// kept this long after its job finished. Default 14 days.
	Effects time.Duration `json:"effects,omitempty"`
	// Records: a finished job's record, its chunks' checkpoints, its
	// settled envelope records and the whole journal of a chunk whose
	// envelope settled are kept this long. Default 30 days.
	Records time.Duration `json:"records,omitempty"`
}

// Or returns r with each zero field taken from d.
func (r Retention) Or(d Retention) Retention {
	if r.Calls <= 0 {
		r.Calls = d.Calls
	}
	if r.Effects <= 0 {
		r.Effects = d.Effects
	}
	if r.Records <= 0 {
		r.Records = d.Records
	}
	return r
}

// WithDefaults returns r with each zero field set to its default.
func (r Retention) WithDefaults() Retention {
	return r.Or(Retention{Calls: salvagetype.CallsRetentionDefault, Effects: salvagetype.EffectsRetentionDefault, Records: salvagetype.RecordsRetentionDefault})
}

// Validate names the first field that cannot work.
func (r Retention) Validate() error {
	switch {
	case r.Calls < 0 || r.Effects < 0 || r.Records < 0:
		return fmt.Errorf("%w: a negative duration (calls %s, effects %s, records %s)", errInvalidRetention, r.Calls, r.Effects, r.Records)
	case r.Calls > callsRetentionMax:
		return fmt.Errorf("%w: calls %s is over %s (SALVAGE_EVENTS keeps the finished event that starts it 14 days)", errInvalidRetention, r.Calls, callsRetentionMax)
	case r.Effects != 0 && r.Effects < r.Calls:
		return fmt.Errorf("%w: effects %s is shorter than calls %s", errInvalidRetention, r.Effects, r.Calls)
	}
	return nil
}

// TTLFrom is what a TTL set at now must be for a message to go keep
// after since: in whole seconds, at least one (the server's floor).
func TTLFrom(keep time.Duration, since time.Time, now time.Time) time.Duration {
	left := keep - now.Sub(since)
	return max(left.Truncate(time.Second), time.Second)
}

// keptUpdate stores v under key if the key is still at rev, like
// updateJSON; a record retention already ran on (until set) keeps
// expiring then, written as its key's only revision. A lost race is
// jetstream.ErrKeyRevisionMismatch, as from updateJSON.
func keptUpdate(ctx context.Context, js jetstream.JetStream, b jetstream.KeyValue, key string, v any, rev uint64, until *time.Time, now time.Time) (uint64, error) {
	if until == nil {
		return updateJSON(ctx, b, key, v, rev)
	}
	seq, err := retainJSON(ctx, js, b.Bucket(), key, v, rev, max(until.Sub(now).Truncate(time.Second), time.Second))
	if errors.Is(err, ErrConflict) {
		return 0, jetstream.ErrKeyRevisionMismatch
	}
	return seq, err
}

// retainJSON writes v under key as the key's only revision (a subject
// roll-up), set to expire after ttl, if the key is still at rev. A lost
// race returns ErrConflict.
func retainJSON(ctx context.Context, js jetstream.JetStream, bucket, key string, v any, rev uint64, ttl time.Duration) (uint64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("kv: encode %s: %w", key, err)
	}
	m := retainMsg(bucket, key, data, rev, ttl)
	var seq uint64
	err = streams.Retry(ctx, func(ctx context.Context) error {
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			return err
		}
		seq = ack.Sequence
		return nil
	})
	if isWrongLast(err) {
		return 0, fmt.Errorf("%w: %s/%s is past revision %d", ErrConflict, bucket, key, rev)
	}
	if err != nil {
		return 0, fmt.Errorf("kv: retain %s/%s: %w", bucket, key, err)
	}
	return seq, nil
}

// retainMsg is the message retainRaw publishes: data as key's only
// revision (a subject roll-up), expiring after ttl (never: 0), if key is
// at rev.
func retainMsg(bucket, key string, data []byte, rev uint64, ttl time.Duration) *nats.Msg {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Data = data
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if ttl > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, strconv.FormatInt(int64(ttl/time.Second), 10))
	}
	if rev > 0 {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	}
	return m
}

// isWrongLast reports a lost expected-last-subject-sequence check.
func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
