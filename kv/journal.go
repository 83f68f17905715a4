package kv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/salvagetype"
)

// JournalRow is one call in salvage_journal, written INITIATED before the
// call and SUCCEEDED or FAILED after it (invariant 2).
type JournalRow struct {
	// Call is the row as users see it (salvage.Call); its JSON fields are
	// the row's own, flattened.
	salvagetype.Call
	// RetryableAfterCompensation copies the failing tool's declaration.
	RetryableAfterCompensation bool `json:"retryable_after_compensation,omitempty"`
	// HistoryDropped counts earlier outcomes beyond HistoryMax.
	HistoryDropped int `json:"history_dropped,omitempty"`
}

// historyMax bounds JournalRow.History.
const historyMax = 8

// CarryHistory makes row, about to replace prev under the same key,
// remember prev's outcome when it was not a success.
func (row *JournalRow) CarryHistory(prev JournalRow) {
	row.History, row.HistoryDropped = prev.History, prev.HistoryDropped
	if prev.Status == salvagetype.CallSucceeded || prev.Status == salvagetype.CallCompensated || prev.Status == "" {
		return
	}
	row.History = append(slices.Clone(row.History), salvagetype.CallAttempt{
		Status: prev.Status, Error: prev.Error, ErrorClass: prev.ErrorClass, ErrorStatus: prev.ErrorStatus,
		Attempts: prev.Attempts, StartedAt: prev.StartedAt, FinishedAt: prev.FinishedAt,
	})
	if n := len(row.History) - historyMax; n > 0 {
		row.History = row.History[n:]
		row.HistoryDropped += n
	}
}

// StoredRow is a row with the stream sequence it was stored at; the next
// write of that key expects it.
type StoredRow struct {
	JournalRow
	Seq uint64
	// Expires says retention gave the stored row a TTL (Journal.Retire):
	// a chunk that runs again takes it back first (Journal.Unretire).
	Expires bool
}

// JournalKey is the key of one call: <job>.<chunk>.<epoch>.<stage>.<agent>.<seq>.
func JournalKey(job string, chunk, epoch, stage int, agent string, seq int) string {
	return job + "." + strconv.Itoa(chunk) + "." + strconv.Itoa(epoch) + "." + strconv.Itoa(stage) + "." + agent + "." + strconv.Itoa(seq)
}

// IdempotencyKey is sha256(job, chunk, epoch, stage, agent, seq): the key an
// external system sees, the same on every retry, redelivery and resume.
func IdempotencyKey(job string, chunk, epoch, stage int, agent string, seq int) string {
	// The bytes of fmt.Sprintf("%s\x00%d\x00%d\x00%d\x00%s\x00%d", …),
	// built without fmt: a key is made for every call.
	b := make([]byte, 0, 64+len(job)+len(agent))
	b = append(append(b, job...), 0)
	b = append(strconv.AppendInt(b, int64(chunk), 10), 0)
	b = append(strconv.AppendInt(b, int64(epoch), 10), 0)
	b = append(strconv.AppendInt(b, int64(stage), 10), 0)
	b = append(append(b, agent...), 0)
	b = strconv.AppendInt(b, int64(seq), 10)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// journalStreamConfig is the bucket's stream, written as a stream config so
// it keeps AllowAtomicPublish: a KeyValueConfig would drop it. It has no
// age limit: rows are removed, or given a per-message TTL, by retention
// once their job finished and their chunk has no open envelope.
func journalStreamConfig(bucket string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:               "KV_" + bucket,
		Description:        "Execution journal: every call, before and after it runs.",
		Subjects:           []string{"$KV." + bucket + ".>"},
		MaxMsgsPerSubject:  5,
		MaxBytes:           -1,
		MaxMsgSize:         -1,
		MaxMsgs:            -1,
		MaxConsumers:       -1,
		Storage:            jetstream.FileStorage,
		Replicas:           replicas,
		AllowRollup:        true,
		DenyDelete:         true,
		Duplicates:         2 * time.Minute,
		AllowDirect:        true,
		Discard:            jetstream.DiscardNew,
		AllowAtomicPublish: true,
		AllowMsgTTL:        true,
	}
}

// Load returns the rows of one chunk epoch keyed by journal key. Resume
// uses it to replay an agent without calls.
func (j *journalStore) Load(ctx context.Context, job string, chunk, epoch int) (map[string]StoredRow, error) {
	return j.load(ctx, job+"."+strconv.Itoa(chunk)+"."+strconv.Itoa(epoch)+".>")
}

// LoadChunk returns the latest row of every call of one chunk, in every
// epoch.
func (j *journalStore) LoadChunk(ctx context.Context, job string, chunk int) (map[string]StoredRow, error) {
	return j.load(ctx, job+"."+strconv.Itoa(chunk)+".>")
}

// load reads the latest row of every key matching filter: in one
// direct-get batch when the server allows as many keys, else key by key.
func (j *journalStore) load(ctx context.Context, filter string) (map[string]StoredRow, error) {
	out := map[string]StoredRow{}
	err := lastMsgsOf(ctx, j.js, j.bucket, []string{filter}, func(key string, m *jetstream.RawStreamMsg) error {
		var r JournalRow
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return fmt.Errorf("kv: decode journal row %s: %w", key, err)
		}
		out[key] = StoredRow{JournalRow: r, Seq: m.Sequence, Expires: m.Header.Get(jetstream.MsgTTLHeader) != ""}
		return nil
	})
	if err == nil {
		return out, nil
	}
	// Too many keys for one batch (the server caps it): list, then read.
	lister, lerr := j.b.ListKeysFiltered(ctx, filter)
	if lerr != nil {
		return nil, fmt.Errorf("kv: load journal %s: %w", filter, errors.Join(err, lerr))
	}
	defer func() { _ = lister.Stop() }()
	out = map[string]StoredRow{}
	for key := range lister.Keys() {
		row, gerr := j.Get(ctx, key)
		if errors.Is(gerr, ErrNotFound) {
			continue
		}
		if gerr != nil {
			return nil, gerr
		}
		out[key] = row
	}
	return out, nil
}

// Get returns one row, or ErrNotFound.
func (j *journalStore) Get(ctx context.Context, key string) (StoredRow, error) {
	r, rev, err := getJSON[JournalRow](ctx, j.b, key)
	return StoredRow{JournalRow: r, Seq: rev}, err
}

// LoadJob returns every row of a job's chunks 1..chunks, all epochs,
// keyed by journal key, a chunk at a time.
func (j *journalStore) LoadJob(ctx context.Context, job string, chunks int) (map[string]StoredRow, error) {
	out := map[string]StoredRow{}
	for c := 1; c <= chunks; c++ {
		rows, err := j.LoadChunk(ctx, job, c)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, rows)
	}
	return out, nil
}
