package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/streams"
)

// seqIndex pages the messages of one stream under a subject filter in
// stream order, the one order the server keeps: the n-th message of a
// filter is found by bisecting on how many match from a sequence (a
// batched direct get reports it), so a page costs O(log sequences + page)
// requests and memory whatever the stream holds, as long as the filter
// spans few subjects (the server counts a subject's messages from a
// sequence by blocks; it counts a filter over many subjects subject by
// subject).
type seqIndex struct {
	js     jetstream.JetStream
	stream string
}

// pageBatchBytes caps one batched read.
const pageBatchBytes = 1 << 20

// countFrom is how many messages under filter have a sequence of at least
// from.
func (x seqIndex) countFrom(ctx context.Context, filter string, from uint64) (int, error) {
	var n int
	err := x.read(ctx, filter, from, 1, func(m *jetstream.RawStreamMsg, pending int) bool {
		n = pending + 1
		return false
	})
	return n, err
}

// read hands fn up to n messages under filter from sequence from, each
// with how many match after it; fn returning false stops.
func (x seqIndex) read(ctx context.Context, filter string, from uint64, n int, fn func(m *jetstream.RawStreamMsg, pending int) bool) error {
	return x.get(ctx, filter, fn, batchGet{Seq: max(from, 1), NextBySubject: filter, Batch: n})
}

// batchGet is the body of a batched direct get (ADR-31).
type batchGet struct {
	Seq           uint64     `json:"seq,omitempty"`
	NextBySubject string     `json:"next_by_subj,omitempty"`
	Batch         int        `json:"batch"`
	MaxBytes      int        `json:"max_bytes,omitempty"`
	StartTime     *time.Time `json:"start_time,omitempty"`
}

// get is one batched direct get of up to req.Batch messages, each handed
// to fn with how many match after it; what names it in errors.
func (x seqIndex) get(ctx context.Context, what string, fn func(m *jetstream.RawStreamMsg, pending int) bool, req batchGet) error {
	req.MaxBytes = pageBatchBytes
	return streams.Retry(ctx, func(ctx context.Context) error {
		err := directBatch(ctx, x.js, x.stream, req, func(m *jetstream.RawStreamMsg) bool {
			pending, _ := strconv.Atoi(m.Header.Get("Nats-Num-Pending"))
			return fn(m, pending)
		})
		if err != nil {
			return fmt.Errorf("kv: read %s %s: %w", x.stream, what, err)
		}
		return nil
	})
}

// seqAt is the first sequence of the stream stored at or after t: the
// bound of what was stored before t.
func (x seqIndex) seqAt(ctx context.Context, t time.Time) (uint64, error) {
	seq := uint64(0)
	err := x.get(ctx, "at "+t.String(), func(m *jetstream.RawStreamMsg, _ int) bool {
		seq = m.Sequence
		return false
	}, batchGet{StartTime: &t, Batch: 1})
	if err != nil || seq > 0 {
		return seq, err
	}
	last, err := x.last(ctx)
	return last + 1, err
}

// last is the stream's last sequence.
func (x seqIndex) last(ctx context.Context) (uint64, error) {
	s, err := x.js.Stream(ctx, x.stream)
	if err != nil {
		return 0, fmt.Errorf("kv: read %s: %w", x.stream, err)
	}
	return s.CachedInfo().State.LastSeq, nil
}

// after is the sequence to read from for the message at position p
// (0-based, oldest first) of the total before upto under filter: the one
// after the (p-1)-th. It bisects [1, upto).
func (x seqIndex) after(ctx context.Context, filter string, p, total int, upto uint64, beyond int) (uint64, error) {
	if p <= 0 {
		return 1, nil
	}
	// The smallest s with countFrom(s) - beyond <= total-p.
	lo, hi := uint64(1), upto
	for lo < hi {
		mid := lo + (hi-lo)/2
		n, err := x.countFrom(ctx, filter, mid)
		if err != nil {
			return 0, err
		}
		if n-beyond <= total-p {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// indexPage is one page of messages under a filter.
type indexPage struct {
	// Msgs are the page's messages, in the order asked for.
	Msgs []*jetstream.RawStreamMsg
	// Total is how many messages match the filter.
	Total int
}

// page returns the messages at positions [offset, offset+limit) of those
// under filter stored before sequence upto (0: all), counted from the
// newest when newest is set, else the oldest.
func (x seqIndex) page(ctx context.Context, filter string, upto uint64, offset, limit int, newest bool) (indexPage, error) {
	all, err := x.countFrom(ctx, filter, 1)
	if err != nil || all == 0 {
		return indexPage{}, err
	}
	beyond := 0
	if upto > 0 {
		if beyond, err = x.countFrom(ctx, filter, upto); err != nil {
			return indexPage{}, err
		}
	}
	total := all - beyond
	offset = max(offset, 0)
	if total <= 0 || offset >= total || limit <= 0 {
		return indexPage{Total: max(total, 0)}, nil
	}
	from, n := offset, min(limit, total-offset)
	if newest {
		from = max(total-offset-limit, 0)
		n = total - offset - from
	}
	if upto == 0 && from > 0 {
		// Only a page past the first entry bisects, and needs the end.
		if upto, err = x.last(ctx); err != nil {
			return indexPage{Total: total}, err
		}
		upto++
	}
	seq, err := x.after(ctx, filter, from, total, upto, beyond)
	if err != nil {
		return indexPage{Total: total}, err
	}
	if upto == 0 {
		upto = math.MaxUint64 // the whole stream
	}
	out := indexPage{Total: total, Msgs: make([]*jetstream.RawStreamMsg, 0, n)}
	for len(out.Msgs) < n && seq < upto {
		got := 0
		err := x.read(ctx, filter, seq, n-len(out.Msgs), func(m *jetstream.RawStreamMsg, _ int) bool {
			if m.Sequence >= upto {
				return false
			}
			out.Msgs = append(out.Msgs, m)
			seq, got = m.Sequence+1, got+1
			return true
		})
		if err != nil {
			return out, err
		}
		if got == 0 {
			break
		}
	}
	if newest {
		slices.Reverse(out.Msgs)
	}
	return out, nil
}

// entryRecords reads the records of bucket the entries in msgs name (each
// entry's data is a key), in one batched read, returning the keys in msgs'
// order and the records found; absent ones are missing from the map.
func entryRecords[T any](ctx context.Context, js jetstream.JetStream, bucket string, msgs []*jetstream.RawStreamMsg) ([]string, map[string]T, error) {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, string(m.Data))
	}
	out := make(map[string]T, len(ids))
	if len(ids) == 0 {
		return ids, out, nil
	}
	err := lastValuesOf(ctx, js, bucket, ids, func(key string, value []byte, _ uint64) error {
		var v T
		if err := json.Unmarshal(value, &v); err != nil {
			return fmt.Errorf("kv: decode %s/%s: %w", bucket, key, err)
		}
		out[key] = v
		return nil
	})
	return ids, out, err
}

// scan hands fn every message under filter stored before upto (0: all),
// oldest first, batch at a time.
func (x seqIndex) scan(ctx context.Context, filter string, upto uint64, batch int, fn func([]*jetstream.RawStreamMsg) error) error {
	seq := uint64(1)
	for {
		msgs := make([]*jetstream.RawStreamMsg, 0, batch)
		err := x.read(ctx, filter, seq, batch, func(m *jetstream.RawStreamMsg, _ int) bool {
			if upto > 0 && m.Sequence >= upto {
				return false
			}
			msgs, seq = append(msgs, m), m.Sequence+1
			return true
		})
		if err != nil {
			return err
		}
		if len(msgs) > 0 {
			if err := fn(msgs); err != nil {
				return err
			}
		}
		if len(msgs) < batch {
			return nil
		}
	}
}
