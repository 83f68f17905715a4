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

	"github.com/salvagehq/salvage/streams"
)

// markerTTL is how long the delete marker of an expired key stays, so
// that a watch sees the key go. The server raises a shorter message
// TTL to it in a bucket keeping more than one revision per key.
const markerTTL = 10 * time.Second

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
