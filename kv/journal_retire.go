package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Effectful reports whether row is, or may be, a side effect: it took
// effect (a fingerprint), its outcome is unknown or still open, or it was
// compensated. What a replay or a verification looks up by idempotency
// key.
func (row JournalRow) Effectful() bool {
	return row.Fingerprint != nil || row.Status == salvagetype.CallInitiated || row.Status == salvagetype.CallUnknown || row.Status == salvagetype.CallCompensated
}

// RowRetention says what Retire keeps of a finished chunk's journal.
type RowRetention struct {
	// Effects is how long side-effect rows (JournalRow.Effectful) are
	// kept from now. At least a second.
	Effects time.Duration
	// Calls is how long the other rows are kept from now; zero removes
	// them now.
	Calls time.Duration
}

// retired counts what Retire did to one chunk's journal.
type retired struct {
	// Removed rows are gone; Kept rows now expire on their own.
	Removed, Kept int
}

// Retire applies retention to every row of one finished chunk: the rows r
// keeps are rewritten as their key's only revision with a per-message TTL,
// the others are purged. A chunk with nothing to keep costs one purge of
// its subjects. It is repeat-safe: a second run finds what the first left.
// Call it only for a chunk that will not run again.
func (j *journalStore) Retire(ctx context.Context, job string, chunk int, r RowRetention) (retired, error) {
	var out retired
	rows, err := j.LoadChunk(ctx, job, chunk)
	if err != nil || len(rows) == 0 {
		return out, err
	}
	keep := func(row JournalRow) time.Duration {
		if row.Effectful() {
			return max(r.Effects, time.Second)
		}
		return r.Calls
	}
	// Groups are one agent's calls in one stage of one epoch: a group
	// with nothing to keep goes in one purge.
	kept := map[string]bool{}
	for key, row := range rows {
		if keep(row.JournalRow) > 0 {
			kept[callGroup(key)] = true
		}
	}
	var purges []string
	if len(kept) == 0 {
		purges = append(purges, job+"."+strconv.Itoa(chunk)+".>")
		out.Removed = len(rows)
	} else {
		groups := map[string]bool{}
		for key, row := range rows {
			g := callGroup(key)
			switch {
			case keep(row.JournalRow) > 0:
			case !kept[g]:
				if !groups[g] {
					groups[g] = true
					purges = append(purges, g+".>")
				}
				out.Removed++
			default:
				purges = append(purges, key)
				out.Removed++
			}
		}
	}
	for _, filter := range purges {
		if err := j.purge(ctx, filter); err != nil {
			return out, err
		}
	}
	n, err := j.rewrite(ctx, rows, func(row JournalRow) (time.Duration, bool) {
		d := keep(row)
		return d, d > 0
	})
	out.Kept = n
	return out, err
}

// Unretire takes back the TTLs retention gave a chunk's journal rows, for
// a chunk that runs again (a replay of an envelope that had settled):
// each row that expires is written again as its key's only revision,
// with none. It returns how many rows it rewrote.
func (j *journalStore) Unretire(ctx context.Context, job string, chunk int) (int, error) {
	rows, err := j.LoadChunk(ctx, job, chunk)
	if err != nil {
		return 0, err
	}
	expiring := map[string]StoredRow{}
	for key, row := range rows {
		if row.Expires {
			expiring[key] = row
		}
	}
	if len(expiring) == 0 {
		return 0, nil
	}
	return j.rewrite(ctx, expiring, func(JournalRow) (time.Duration, bool) { return 0, true })
}

// rewrite writes each row of rows that ttl says to write again, with
// the TTL it says (0: none), as its key's only revision, if the key is
// still at the row's sequence; pipelined, then awaited together. A row
// another writer changed meanwhile is left to it.
func (j *journalStore) rewrite(ctx context.Context, rows map[string]StoredRow, ttl func(JournalRow) (time.Duration, bool)) (int, error) {
	var acks []jetstream.PubAckFuture
	for key, row := range rows {
		d, write := ttl(row.JournalRow)
		if !write {
			continue
		}
		rewritten := row.JournalRow
		rewritten.RetentionRewrite = true
		data, err := json.Marshal(rewritten)
		if err != nil {
			return 0, fmt.Errorf("kv: encode journal row %s: %w", key, err)
		}
		m := retainMsg(j.bucket, key, data, row.Seq, d)
		if row.TraceID != "" {
			m.Header.Set(salvagetype.HeaderTraceParent, streams.TraceParent(row.TraceID, streams.DeriveSpanID(key)))
		}
		f, err := j.js.PublishMsgAsync(m)
		if err != nil {
			return 0, fmt.Errorf("kv: rewrite journal row %s: %w", key, err)
		}
		acks = append(acks, f)
	}
	n := 0
	for _, f := range acks {
		select {
		case <-f.Ok():
			n++
		case err := <-f.Err():
			if !isWrongLast(err) {
				return n, fmt.Errorf("kv: rewrite journal row %s: %w", f.Msg().Subject, err)
			}
			// Another writer got there first.
			n++
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
	return n, nil
}

// callGroup is the key of a call without its seq: job.chunk.epoch.stage.agent.
func callGroup(key string) string {
	if i := strings.LastIndexByte(key, '.'); i > 0 {
		return key[:i]
	}
	return key
}

// purge removes every message of the journal keys matching filter.
func (j *journalStore) purge(ctx context.Context, filter string) error {
	s, err := j.stream(ctx)
	if err != nil {
		return err
	}
	err = streams.Retry(ctx, func(ctx context.Context) error {
		return s.Purge(ctx, jetstream.WithPurgeSubject("$KV."+j.bucket+"."+filter))
	})
	if err != nil {
		return fmt.Errorf("kv: purge journal %s: %w", filter, err)
	}
	return nil
}

// journalStream caches the journal's stream handle for purges.
type journalStream struct {
	mu sync.Mutex
	s  jetstream.Stream
}

func (j *journalStore) stream(ctx context.Context) (jetstream.Stream, error) {
	j.handle.mu.Lock()
	defer j.handle.mu.Unlock()
	if j.handle.s != nil {
		return j.handle.s, nil
	}
	s, err := j.js.Stream(ctx, "KV_"+j.bucket)
	if err != nil {
		return nil, fmt.Errorf("kv: open stream KV_%s: %w", j.bucket, err)
	}
	j.handle.s = s
	return s, nil
}
