package kv

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/streams"
)

// The attention index, in SALVAGE_INDEX: a chunk whose checkpoint comes to
// need a person (Checkpoint.Attention) has an entry, its chunk number, on
// salvage.index.job-attention.<job>, written before the checkpoint that
// needs it, once: the checkpoint's AttentionUntil says until when its
// entry lasts. A job's failing chunks are then the chunks that one subject
// names, read with their checkpoints: O(chunks that ever needed
// attention), whatever the job's size. Entries are never deleted; a
// reader reads each named chunk's checkpoint and drops the ones that no
// longer need anybody (and a stray entry, of a write that lost its CAS).
// An entry lasts the records' retention and the job index's extra
// (jobListedExtra: 44 days at the defaults) after it was written, and a
// write of a checkpoint that still needs attention renews it when less
// than the records' retention is left (Retain: less than the
// checkpoint's own).

// flag writes cp's attention entry when cp needs attention and has no
// entry that lasts need from now, and notes the entry's expiry in cp. It
// runs before cp is written: a crash or a lost CAS after it leaves a
// stray entry, which readers drop; the other order could lose one.
func (s *checkpointStore) flag(ctx context.Context, cp *Checkpoint, need time.Duration) error {
	if s.idx == nil || cp.Attention() < 0 { // needs nobody
		return nil
	}
	now := s.now()
	if cp.AttentionUntil != nil && cp.AttentionUntil.After(now.Add(need)) {
		return nil
	}
	ttl := need + jobListedExtra
	if _, err := s.idx.put(ctx, indexJobAttention(cp.Job), strconv.Itoa(cp.Chunk), ttl); err != nil {
		return err
	}
	until := now.Add(ttl).UTC()
	cp.AttentionUntil = &until
	return nil
}

// attentionPage is how many entries one read of the attention index
// takes.
const attentionPage = 1000

// Flagged returns the chunks 1..chunks of job its attention index names,
// each once, in chunk order: every chunk that needed attention since its
// entry was written, and maybe a stray. It reads the index alone, a
// thousand entries at a time, and keeps at most chunks numbers whatever
// the index holds (a number that is no chunk of the job is dropped).
func (s *checkpointStore) Flagged(ctx context.Context, job string, chunks int) ([]int, error) {
	x := seqIndex{js: s.js, stream: streams.Index}
	filter := indexJobAttention(job)
	seen := map[int]bool{}
	var out []int
	for from, more := uint64(1), true; more; {
		more = false
		err := x.read(ctx, filter, from, attentionPage, func(m *jetstream.RawStreamMsg, pending int) bool {
			from, more = m.Sequence+1, pending > 0
			if c, err := strconv.Atoi(string(m.Data)); err == nil && c > 0 && c <= chunks && !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("kv: attention index of %s: %w", job, err)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Chunks returns the checkpoints of the named chunks of job, in the order
// named, without outputs and snapshot names; a missing one is returned as
// a pending checkpoint. It reads a thousand at a time (see ForJobRange).
func (s *checkpointStore) Chunks(ctx context.Context, job string, chunks []int) ([]Checkpoint, error) {
	cps, _, err := s.read(ctx, job, chunks)
	return cps, err
}
