package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/streams"
)

// BuildIndex gives every job and envelope record written before
// SALVAGE_INDEX existed its entry, once: it returns at once when the index
// says it was built (its indexBuilt message). It reads every
// record, oldest first, so the entries keep the records' order; the
// dead-letter role runs it when it starts. It returns how many entries it
// wrote. A record an older process writes later gets its entry when it
// next changes.
func (st *Stores) BuildIndex(ctx context.Context) (int, error) {
	str, err := st.Jobs.idx.stream(ctx)
	if err != nil {
		return 0, fmt.Errorf("kv: open %s: %w", streams.Index, err)
	}
	_, err = str.GetLastMsgForSubject(ctx, indexBuilt)
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, fmt.Errorf("kv: read %s: %w", indexBuilt, err)
	}
	n := 0
	jobs, err := st.Jobs.List(ctx)
	if err != nil {
		return n, err
	}
	slices.Reverse(jobs) // oldest first
	for _, j := range jobs {
		if j.IndexSeq != 0 {
			continue
		}
		if err := st.Jobs.reindex(ctx, j.ID); err != nil {
			return n, err
		}
		n++
	}
	envs, err := st.Envelopes.List(ctx)
	if err != nil {
		return n, err
	}
	slices.SortFunc(envs, func(a, b EnvelopeRecord) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for _, r := range envs {
		if r.IndexSeq != 0 {
			continue
		}
		_, err := st.Envelopes.Mutate(ctx, r.ID, func(r *EnvelopeRecord) error {
			if r.IndexSeq != 0 {
				return ErrNoChange
			}
			return nil // Mutate writes the entry of a record without one
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return n, err
		}
		n++
	}
	_, err = st.Jobs.js.PublishMsg(ctx, &nats.Msg{Subject: indexBuilt}, jetstream.WithExpectLastSequencePerSubject(0))
	if err != nil && !isWrongLast(err) {
		return n, fmt.Errorf("kv: mark %s: %w", indexBuilt, err)
	}
	return n, nil
}
