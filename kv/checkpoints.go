package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Checkpoint is the value of a salvage_checkpoints key. ClaimedBy and
// ClaimRevision are the fence (invariant 3): whoever takes a chunk CASes
// them in, and every later write CASes on the revision it last wrote.
type Checkpoint struct {
	// The chunk as an operator sees it (salvage.Chunk): its fields are the
	// record's own, flat in its JSON. Compensated is set before the first
	// effect of the epoch is undone and cleared by a fresh epoch;
	// Deliveries is the delivery count of the message at MsgSeq;
	// LastError and the fields after it are what the dead-letterer
	// classifies by; LastErrorOlder is set when a worker took the chunk
	// again after LastError was recorded.
	publicChunk
	ClaimRevision uint64 `json:"claim_revision,omitempty"`
	// Snapshots names each agent's latest stage-boundary snapshot.
	Snapshots map[string]SnapshotRef `json:"snapshots,omitempty"`
	// MsgSeq is the sequence in its partition's chunk stream of the
	// message the chunk last ran from.
	MsgSeq uint64 `json:"msg_seq,omitempty"`
	// CostMicros is what its model usage cost, in millionths (the price
	// table of Config.Prices).
	CostMicros int64 `json:"cost_micros,omitempty"`
	// Counted and the Counted fields after it are what the job record
	// counts of this chunk (see Recount).
	Counted                 salvagetype.ChunkStatus   `json:"counted,omitempty"`
	CountedTier1            int                       `json:"counted_tier1,omitempty"`
	CountedRedeliveries     int                       `json:"counted_redeliveries,omitempty"`
	CountedPromptTokens     int64                     `json:"counted_prompt_tokens,omitempty"`
	CountedCompletionTokens int64                     `json:"counted_completion_tokens,omitempty"`
	CountedCostMicros       int64                     `json:"counted_cost_micros,omitempty"`
	Outputs                 []salvagetype.StageOutput `json:"outputs,omitempty"`
	// Events is the chunk's timeline besides its calls: every delivery a
	// worker took, holds, parks and outcomes, oldest first; at most
	// chunkEventsMax (the first is kept, EventsDropped counts the ones
	// dropped after it).
	Events        []salvagetype.ChunkEvent `json:"events,omitempty"`
	EventsDropped int                      `json:"events_dropped,omitempty"`
	// AttentionUntil is set once the chunk needed attention: its entry in
	// the job's attention index lasts until then (see Chunk.Attention).
	AttentionUntil *time.Time `json:"attention_until,omitempty"`
}

// publicChunk is the part of a checkpoint users read. Embedded under this
// name, not as salvagetype.Chunk, whose field name would hide the chunk
// number (Checkpoint.Chunk).
type publicChunk = salvagetype.Chunk

// View is the checkpoint as an operator sees it: its own salvage.Chunk,
// without the fence, the message sequence, the snapshots, the stage
// outputs, the cost, the events and what its job has counted of it.
func (c Checkpoint) View() salvagetype.Chunk { return c.publicChunk }

// chunkEventsMax bounds a checkpoint's Events.
const chunkEventsMax = 32

// Record appends e to the chunk's timeline (At now when zero), dropping
// the oldest event but the first past chunkEventsMax.
func (c *Checkpoint) Record(e salvagetype.ChunkEvent) {
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	if len(c.Events) >= chunkEventsMax {
		c.Events = append(c.Events[:1], c.Events[2:]...)
		c.EventsDropped++
	}
	c.Events = append(c.Events, e)
}

// Terminal reports whether the chunk has reached an outcome that no worker
// will change by itself: done, cancelled, or dead-lettered.
func (c Checkpoint) Terminal() bool {
	return c.Status == salvagetype.ChunkDone || c.Status.IsCancelled() || c.Status == salvagetype.ChunkDeadLettered
}

// ClearLastError forgets the failure that sent the chunk back: when a
// recovery or a person sends it back to work.
func (c *Checkpoint) ClearLastError() {
	c.LastError, c.LastErrorClass, c.LastErrorStatus = "", "", 0
	c.LastErrorAgent, c.LastErrorTool, c.LastErrorCall = "", "", ""
	c.LastErrorOlder = false
}

// FreshEpoch starts the chunk over in a new epoch, once its effects were
// compensated: new idempotency keys, every stage again, no outputs,
// snapshots or approvals of the old epoch.
func (c *Checkpoint) FreshEpoch() {
	c.Epoch++
	c.Stage, c.Outputs, c.Gaps, c.Snapshots, c.Approvals, c.Compensated = 1, nil, nil, nil, nil, false
}

// Approved reports whether stage was approved.
func (c Checkpoint) Approved(stage int) bool {
	for _, a := range c.Approvals {
		if a.Stage == stage {
			return true
		}
	}
	return false
}

// Fence is the revision of the checkpoint its holder last wrote.
type Fence struct {
	Key      string
	Revision uint64
	// attention is the AttentionUntil last stored under the fence: a
	// holder writes its own copy of the checkpoint, which may predate it.
	attention *time.Time
}

// checkpointStore is the salvage_checkpoints store.
type checkpointStore struct {
	b jetstream.KeyValue
	// bucket is b's name: one partition's checkpoints.
	bucket string
	js     jetstream.JetStream
	now    func() time.Time
	// idx writes the attention index (attention.go).
	idx *indexWriter
}

// maxBatchKeys stays under the server's cap (1024) on keys in one
// multi-last direct get.
const maxBatchKeys = 1000

// Get returns a chunk's checkpoint and its revision, or ErrNotFound.
func (s *checkpointStore) Get(ctx context.Context, job string, chunk int) (Checkpoint, uint64, error) {
	return getJSON[Checkpoint](ctx, s.b, ChunkKey(job, chunk))
}

// Take fences a chunk for worker, which must hold its claim at
// claimRevision: it CASes the checkpoint to claimed_by = worker, applying
// mutate, and returns the checkpoint and the fence for later writes. A
// concurrent Take by another worker makes this one fail with ErrFenced; a
// chunk already done or cancelled fails with ErrFinished.
func (s *checkpointStore) Take(ctx context.Context, job string, chunk int, worker string, claimRevision uint64, mutate func(*Checkpoint)) (Checkpoint, Fence, error) {
	key := ChunkKey(job, chunk)
	cp, rev, err := s.Get(ctx, job, chunk)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return cp, Fence{}, err
	}
	if errors.Is(err, ErrNotFound) {
		cp = Checkpoint{publicChunk: publicChunk{Job: job, Chunk: chunk, Stage: 1}}
	}
	if cp.Status == salvagetype.ChunkDone || cp.Status.IsCancelled() {
		return cp, Fence{}, fmt.Errorf("%w: %s is %s", ErrFinished, key, cp.Status)
	}
	cp.ClaimedBy, cp.ClaimRevision = worker, claimRevision
	cp.UpdatedAt, cp.KeptUntil = s.now(), nil
	if mutate != nil {
		mutate(&cp)
	}
	if err := s.flag(ctx, &cp, salvagetype.RecordsRetentionDefault); err != nil {
		return cp, Fence{}, err
	}
	if rev == 0 {
		rev, err = createJSON(ctx, s.b, key, cp)
	} else {
		rev, err = updateJSON(ctx, s.b, key, cp, rev)
	}
	if isConflict(err) {
		return cp, Fence{}, fmt.Errorf("%w: %s taken concurrently", ErrFenced, key)
	}
	if err != nil {
		return cp, Fence{}, fmt.Errorf("kv: take checkpoint %s: %w", key, err)
	}
	return cp, Fence{Key: key, Revision: rev, attention: cp.AttentionUntil}, nil
}

// Write stores cp if the checkpoint is still at f's revision and advances
// f. It returns ErrFenced when anyone else wrote it since: the caller is a
// stale worker and must stop without acking.
func (s *checkpointStore) Write(ctx context.Context, f *Fence, cp Checkpoint) error {
	cp.UpdatedAt = s.now()
	if f.attention != nil && (cp.AttentionUntil == nil || cp.AttentionUntil.Before(*f.attention)) {
		cp.AttentionUntil = f.attention
	}
	if err := s.flag(ctx, &cp, salvagetype.RecordsRetentionDefault); err != nil {
		return err
	}
	rev, err := updateJSON(ctx, s.b, f.Key, cp, f.Revision)
	if isConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s at revision %d", ErrFenced, f.Key, f.Revision)
	}
	if err != nil {
		return fmt.Errorf("kv: write checkpoint %s: %w", f.Key, err)
	}
	f.Revision, f.attention = rev, cp.AttentionUntil
	return nil
}

// Mutate applies fn to a chunk's checkpoint by an unfenced CAS loop, for
// writers that do not hold the chunk (the dead-letterer, cancellation of a
// chunk nobody runs). It breaks any holder's fence, which is the point.
func (s *checkpointStore) Mutate(ctx context.Context, job string, chunk int, fn func(cp *Checkpoint) error) (Checkpoint, error) {
	cp, _, err := mutateJSONWith(ctx, s.b, ChunkKey(job, chunk), s.update, func(cp *Checkpoint, exists bool) error {
		if !exists {
			*cp = Checkpoint{publicChunk: publicChunk{Job: job, Chunk: chunk, Stage: 1}}
		}
		if err := fn(cp); err != nil {
			return err
		}
		cp.UpdatedAt = s.now()
		return s.flag(ctx, cp, salvagetype.RecordsRetentionDefault)
	})
	return cp, err
}

// ForJob returns the checkpoints of chunks 1..n of job; see ForJobRange.
func (s *checkpointStore) ForJob(ctx context.Context, job string, n int) ([]Checkpoint, error) {
	return s.ForJobRange(ctx, job, 1, n)
}

// ForJobRange returns the checkpoints of chunks from..to of job, in chunk
// order, without their outputs and snapshot names (which only a run reads,
// by Get); a missing one is returned as a pending checkpoint. It reads them
// with direct-get batches of up to 1000 named keys (the last message of
// each), so a 10,000-chunk job costs ten round trips, not one per chunk.
func (s *checkpointStore) ForJobRange(ctx context.Context, job string, from, to int) ([]Checkpoint, error) {
	cps, _, err := s.forJobRange(ctx, job, from, to)
	return cps, err
}

// update writes cp if its checkpoint is still at rev. A chunk that is
// no longer finished loses the expiry retention gave it; a finished one
// keeps it (see keptUpdate).
func (s *checkpointStore) update(ctx context.Context, key string, cp Checkpoint, rev uint64) (uint64, error) {
	if !cp.Terminal() {
		cp.KeptUntil = nil
	}
	return keptUpdate(ctx, s.js, s.b, key, cp, rev, cp.KeptUntil, s.now())
}

// derivePage is how many checkpoints Derive reads at once: a page's
// replies are buffered whole by the client before they are decoded.
const derivePage = 250

// Derive reads the checkpoints of chunks 1..n of job a page of
// derivePage at a time into a derivation of the job's status
// (Jobs.SettleDerived): memory stays a page's whatever the job's size.
func (s *checkpointStore) Derive(ctx context.Context, job string, n int) (*Derivation, error) {
	d := newDerivation()
	for lo := 1; lo <= n; lo += derivePage {
		cps, err := s.ForJobRange(ctx, job, lo, min(lo+derivePage-1, n))
		if err != nil {
			return nil, err
		}
		d.Add(cps)
	}
	return d, nil
}

// Revisions is ForJobRange with each checkpoint's revision (0: none
// stored).
func (s *checkpointStore) Revisions(ctx context.Context, job string, from, to int) ([]Checkpoint, []uint64, error) {
	return s.forJobRange(ctx, job, from, to)
}

// Retain makes cp, read at rev, the chunk's only checkpoint revision,
// expiring after ttl, without the outputs and snapshot names only a run
// needs. ErrConflict when the checkpoint changed since: the chunk is
// live again.
func (s *checkpointStore) Retain(ctx context.Context, cp Checkpoint, rev uint64, ttl time.Duration) error {
	until := s.now().Add(ttl).UTC()
	cp.KeptUntil = &until
	cp.Outputs, cp.Snapshots = nil, nil
	if err := s.flag(ctx, &cp, max(ttl, salvagetype.RecordsRetentionDefault)); err != nil {
		return err
	}
	_, err := retainJSON(ctx, s.js, s.bucket, ChunkKey(cp.Job, cp.Chunk), cp, rev, ttl)
	return err
}

func (s *checkpointStore) forJobRange(ctx context.Context, job string, from, to int) ([]Checkpoint, []uint64, error) {
	from = max(from, 1)
	if to < from {
		return []Checkpoint{}, []uint64{}, nil
	}
	chunks := make([]int, to-from+1)
	for i := range chunks {
		chunks[i] = from + i
	}
	return s.read(ctx, job, chunks)
}

// read returns the checkpoints of the named chunks of job and their
// revisions, in the order named, maxBatchKeys at a time; a missing one is
// a pending checkpoint at revision 0.
func (s *checkpointStore) read(ctx context.Context, job string, chunks []int) ([]Checkpoint, []uint64, error) {
	revs := make([]uint64, len(chunks))
	out := make([]Checkpoint, len(chunks))
	at := make(map[int]int, len(chunks))
	for i, c := range chunks {
		out[i] = Checkpoint{publicChunk: publicChunk{Job: job, Chunk: c, Stage: 1, Status: salvagetype.ChunkPending}}
		at[c] = i
	}
	for lo := 0; lo < len(chunks); lo += maxBatchKeys {
		hi := min(lo+maxBatchKeys, len(chunks))
		keys := make([]string, 0, hi-lo)
		for _, c := range chunks[lo:hi] {
			keys = append(keys, ChunkKey(job, c))
		}
		err := streams.Retry(ctx, func(ctx context.Context) error {
			return lastValuesOf(ctx, s.js, s.bucket, keys, func(key string, value []byte, seq uint64) error {
				var cp Checkpoint
				if err := json.Unmarshal(value, &cp); err != nil {
					return fmt.Errorf("kv: decode checkpoint %s: %w", key, err)
				}
				// Only a run reads its outputs and snapshots (by Get):
				// a job's worth of them is not kept in memory.
				cp.Outputs, cp.Snapshots = nil, nil
				c, err := strconv.Atoi(key[strings.LastIndexByte(key, '.')+1:])
				if i, ok := at[c]; err == nil && ok {
					out[i], revs[i] = cp, seq
				}
				return nil
			})
		})
		if err != nil {
			return nil, nil, fmt.Errorf("kv: checkpoints of %s %d-%d: %w", job, chunks[lo], chunks[hi-1], err)
		}
	}
	return out, revs, nil
}

// SetClock replaces the store's clock (the UpdatedAt of what it writes);
// tests use it to age a checkpoint.
func (s *checkpointStore) SetClock(now func() time.Time) { s.now = now }
