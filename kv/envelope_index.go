package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// The envelope index, in SALVAGE_INDEX: each envelope record has one entry
// (its id) on salvage.index.envelopes.<status>.<category> and one on
// salvage.index.job-envelopes.<job>, written when it enters its status
// (before the record) and deleted by sequence once it left it. A listing
// by status and category is then a subject filter over a few dozen
// subjects, one of a job a single subject: the server counts and reads a
// page of either without reading every entry. The record's IndexSeq and
// JobIndexSeq are its entries' sequences; an entry whose sequence the
// record does not hold was left by a writer that crashed, and readers skip
// it (and delete it once the record's entry is a later one).

// strayGrace is how old an index entry whose record does not exist must
// be before a reader deletes it: a writer makes the entry just before the
// record.
const strayGrace = 10 * time.Minute

// IndexFilter selects envelope records by status, category and job; empty
// fields match any.
type IndexFilter struct {
	Status   salvagetype.EnvelopeStatus
	Category salvagetype.Category
	Job      string
}

// matches reports whether r is one f selects.
func (f IndexFilter) matches(r EnvelopeRecord) bool {
	return (f.Status == "" || r.Status == f.Status) && (f.Category == "" || r.Category == f.Category) && (f.Job == "" || r.Job == f.Job)
}

// indexWriter writes and deletes index entries.
type indexWriter struct {
	js jetstream.JetStream
	mu sync.Mutex
	// str is SALVAGE_INDEX, looked up once.
	str jetstream.Stream
}

// put writes an entry holding id; with ttl above zero it expires then. It
// returns the entry's sequence.
func (w *indexWriter) put(ctx context.Context, subject, id string, ttl time.Duration) (uint64, error) {
	// A deployment provisioned before the index existed has no stream to
	// publish to: say so at once instead of retrying "no responders".
	if _, err := w.stream(ctx); err != nil {
		return 0, fmt.Errorf("kv: index %s on %s: %s missing, provision again: %w", id, subject, streams.Index, err)
	}
	var opts []jetstream.PublishOpt
	if ttl > 0 {
		opts = append(opts, jetstream.WithMsgTTL(max(ttl.Truncate(time.Second), time.Second)))
	}
	var seq uint64
	err := streams.Retry(ctx, func(ctx context.Context) error {
		ack, err := w.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte(id)}, opts...)
		if err == nil {
			seq = ack.Sequence
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("kv: index %s on %s: %w", id, subject, err)
	}
	return seq, nil
}

// remove deletes the entries at seqs; zero and ones already gone are
// skipped.
func (w *indexWriter) remove(ctx context.Context, seqs ...uint64) error {
	for _, seq := range seqs {
		if seq == 0 {
			continue
		}
		str, err := w.stream(ctx)
		if err == nil {
			err = str.DeleteMsg(ctx, seq)
		}
		if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
			// The server's refusal comes as text; a sequence that is
			// gone already (deleted by a reader, expired) is no error.
			if _, gerr := str.GetMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
				err = nil
			}
		}
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("kv: unindex %d: %w", seq, err)
		}
	}
	return nil
}

func (w *indexWriter) stream(ctx context.Context) (jetstream.Stream, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.str != nil {
		return w.str, nil
	}
	str, err := w.js.Stream(ctx, streams.Index)
	if err != nil {
		return nil, err
	}
	w.str = str
	return str, nil
}

// index writes r's two entries and sets their sequences in r.
func (s *envelopeStore) index(ctx context.Context, r *EnvelopeRecord) error {
	var ttl time.Duration
	if r.Settled() {
		ttl = s.keep
	}
	seq, err := s.idx.put(ctx, indexEnvelope(r.Status, r.Category), r.ID, ttl)
	if err != nil {
		return err
	}
	jseq, err := s.idx.put(ctx, indexJobEnvelopes(r.Job), r.ID, ttl)
	if err != nil {
		return errors.Join(err, s.idx.remove(ctx, seq))
	}
	r.IndexSeq, r.JobIndexSeq = seq, jseq
	return nil
}

// EnvelopePage is one page of envelope records.
type EnvelopePage struct {
	Records []EnvelopeRecord
	// Total is how many records match: exact when the page holds them
	// all, else the entries under the filter, give or take the few whose
	// move is being written.
	Total int
}

// Page returns the records f matches at positions [offset, offset+limit),
// in the order they entered their status, newest first when newest is
// set; with minAge above zero only those in their status at least that
// long. Without a job it reads O(log n + limit) entries whatever the DLQ
// holds; with a job and a status or category, that job's entries. A page
// is short by the entries it skipped: records that moved or expired while
// it was read.
func (s *envelopeStore) Page(ctx context.Context, f IndexFilter, minAge time.Duration, offset, limit int, newest bool) (EnvelopePage, error) {
	x := seqIndex{js: s.js, stream: streams.Index}
	var upto uint64
	if minAge > 0 {
		var err error
		if upto, err = x.seqAt(ctx, s.now().Add(-minAge)); err != nil {
			return EnvelopePage{}, err
		}
	}
	if f.Job != "" && (f.Status != "" || f.Category != "") {
		return s.jobPage(ctx, x, f, upto, offset, limit, newest)
	}
	filter, seqOf := indexEnvelopes(f.Status, f.Category), func(r EnvelopeRecord) uint64 { return r.IndexSeq }
	if f.Job != "" {
		filter, seqOf = indexJobEnvelopes(f.Job), func(r EnvelopeRecord) uint64 { return r.JobIndexSeq }
	}
	pg, err := x.page(ctx, filter, upto, offset, limit, newest)
	if err != nil {
		return EnvelopePage{}, err
	}
	recs, err := s.join(ctx, pg.Msgs, seqOf, f)
	total := pg.Total
	if offset <= 0 && pg.Total <= limit && err == nil {
		// The page was to hold every entry, so it read them all: it
		// knows exactly how many records match, without the entry a
		// record moving as it was read briefly leaves twice — counted
		// before its old entry was deleted, read after (CI saw Total 2
		// for one envelope that way).
		total = len(recs)
	}
	return EnvelopePage{Records: recs, Total: total}, err
}

// jobPage is Page for a job and a status or category: it reads the job's
// entries, oldest first, and keeps those f matches.
func (s *envelopeStore) jobPage(ctx context.Context, x seqIndex, f IndexFilter, upto uint64, offset, limit int, newest bool) (EnvelopePage, error) {
	var all []EnvelopeRecord
	seen := map[string]bool{}
	seqOf := func(r EnvelopeRecord) uint64 { return r.JobIndexSeq }
	err := x.scan(ctx, indexJobEnvelopes(f.Job), upto, 256, func(msgs []*jetstream.RawStreamMsg) error {
		recs, err := s.join(ctx, msgs, seqOf, IndexFilter{Job: f.Job})
		for _, r := range recs {
			if f.matches(r) && !seen[r.ID] {
				seen[r.ID] = true
				all = append(all, r)
			}
		}
		return err
	})
	if err != nil {
		return EnvelopePage{}, err
	}
	if newest {
		slices.Reverse(all)
	}
	from := min(max(offset, 0), len(all))
	return EnvelopePage{Records: all[from:min(from+max(limit, 0), len(all))], Total: len(all)}, nil
}

// join reads the records msgs' entries name, in one batched read, and
// returns those whose entry each is (seqOf), in msgs' order, once each. An
// entry whose record holds a later one, or whose record is gone, is
// deleted; a record that moved on between the entries' read and its own
// is listed here all the same when it still matches f (its new entry lies
// past this page, which was read before it was written).
func (s *envelopeStore) join(ctx context.Context, msgs []*jetstream.RawStreamMsg, seqOf func(EnvelopeRecord) uint64, f IndexFilter) ([]EnvelopeRecord, error) {
	ids, recs, err := entryRecords[EnvelopeRecord](ctx, s.js, BucketEnvelopes, msgs)
	if err != nil {
		return nil, err
	}
	out := make([]EnvelopeRecord, 0, len(msgs))
	seen := make(map[string]bool, len(msgs))
	list := func(r EnvelopeRecord) {
		if !seen[r.ID] {
			seen[r.ID] = true
			out = append(out, r)
		}
	}
	now := s.now()
	for i, m := range msgs {
		r, ok := recs[ids[i]]
		switch {
		case ok && seqOf(r) == m.Sequence:
			list(r)
		case ok && seqOf(r) > m.Sequence, !ok && now.Sub(m.Time) > strayGrace:
			// The record moved on from this entry, or never came, or
			// expired.
			if err := s.idx.remove(ctx, m.Sequence); err != nil {
				return out, err
			}
			if ok && f.matches(r) {
				list(r)
			}
		}
	}
	return out, nil
}
