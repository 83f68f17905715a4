package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Restoring envelopes whose DLQ message is gone.
const (
	// restoreIntervalDefault is how often an orchestrator looks for
	// unsettled envelopes whose SALVAGE_DLQ message is gone.
	restoreIntervalDefault = 30 * time.Second
	// restorePage is how many records one index read brings.
	restorePage = 256
	// restoreFullEvery forces a full look every that many rounds, even
	// when the stream's state says nothing was removed since the last.
	restoreFullEvery = 10
)

// restoreStatuses are the statuses whose envelopes still need their
// message: Salvage works on open and recovering ones, a person on
// escalated ones.
var restoreStatuses = []salvagetype.EnvelopeStatus{salvagetype.EnvelopeOpen, salvagetype.EnvelopeRecovering, salvagetype.EnvelopeEscalated}

// dlqMark is what an orchestrator saw of SALVAGE_DLQ at its last full
// look: while the stream is the same one, nothing was deleted inside it
// and its first sequence is at most bound (the lowest message an
// unsettled envelope of its pipelines had, or the stream's end then), no
// such envelope can have lost its message since.
type dlqMark struct {
	ok      bool
	created time.Time
	deleted int
	bound   uint64
	rounds  int
}

// restoreLoop restores lost envelopes every RestoreInterval until ctx
// ends. It blocks.
func (o *Orchestrator) restoreLoop(ctx context.Context) {
	t := time.NewTicker(o.cfg.RestoreInterval)
	defer t.Stop()
	var mark dlqMark
	for {
		n, err := o.restoreLost(ctx, &mark)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			o.log.Warn().Err(err).Msg("look for envelopes whose DLQ message is gone; will look again")
		case n > 0:
			o.log.Warn().Int("restored", n).Msg("envelopes whose DLQ message was gone published again from their records")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// restoreLost publishes again, from its record's body, every unsettled
// envelope of this orchestrator's pipelines whose SALVAGE_DLQ message is
// gone (purged, aged out, lost), and points its record at the new
// message: recovery then goes on as if nothing had happened, and `nats
// stream get` finds it. Cost: one stream info a round while nothing was
// removed from the stream; else the unsettled envelopes, a page at a time.
func (o *Orchestrator) restoreLost(ctx context.Context, mark *dlqMark) (int, error) {
	var s jetstream.Stream
	var info *jetstream.StreamInfo
	err := streams.Retry(ctx, func(ctx context.Context) error {
		var err error
		if s, err = flow.StreamHandle(ctx, o.js, streams.DLQ); err != nil {
			return err
		}
		info, err = s.Info(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("consumers: restore: %w", err)
	}
	st := info.State
	mark.rounds++
	if mark.ok && mark.rounds < restoreFullEvery && info.Created.Equal(mark.created) && st.NumDeleted == mark.deleted && st.FirstSeq <= mark.bound {
		return 0, nil
	}
	// Messages are read only when the stream may hold another's at an
	// envelope's sequence, or a hole there.
	read := !mark.ok || !info.Created.Equal(mark.created) || st.NumDeleted > 0
	lowest := uint64(math.MaxUint64)
	restored := 0
	// seen are the envelopes looked at this round: one that changes
	// status while the round pages is met again under its new one.
	seen := map[string]bool{}
	for _, status := range restoreStatuses {
		for offset := 0; ; offset += restorePage {
			pg, err := o.stores.Envelopes.Page(ctx, kv.IndexFilter{Status: status}, 0, offset, restorePage, false)
			if err != nil {
				return restored, err
			}
			for _, rec := range pg.Records {
				// Another fleet's orchestrators restore theirs.
				if seen[rec.ID] || !o.runs(rec) {
					continue
				}
				seen[rec.ID] = true
				lost, err := envelopeLost(ctx, o.js, st, rec, read)
				if err != nil {
					return restored, err
				}
				if !lost {
					lowest = min(lowest, rec.DLQSeq)
					continue
				}
				if err := o.restore(ctx, rec); err != nil {
					return restored, err
				}
				restored++
			}
			if len(pg.Records) < restorePage {
				break
			}
		}
	}
	*mark = dlqMark{ok: true, created: info.Created, deleted: st.NumDeleted, bound: min(lowest, st.LastSeq+1)}
	return restored, nil
}

// envelopeLost reports whether rec's message is gone from SALVAGE_DLQ
// (whose state is st): before the stream's first sequence, or, when read
// is set, a hole or another envelope's message at its sequence.
func envelopeLost(ctx context.Context, js jetstream.JetStream, st jetstream.StreamState, rec kv.EnvelopeRecord, read bool) (bool, error) {
	if rec.DLQSeq == 0 {
		return false, nil // being written: its dead-letterer finishes it
	}
	if rec.DLQSeq < st.FirstSeq {
		return true, nil
	}
	if !read {
		// Past st.LastSeq: published since the look (a restore of this
		// round among them); a hole there shows in the next look.
		return false, nil
	}
	m, err := flow.GetMsg(ctx, js, streams.DLQ, rec.DLQSeq)
	if err != nil {
		return false, err
	}
	if m == nil {
		return true, nil
	}
	if id := m.Header.Get(salvagetype.HeaderEnvelope); id != "" {
		return id != rec.ID, nil
	}
	env, err := recovery.DecodeEnvelope(m.Data) // published before the header
	return err != nil || env.ID != rec.ID, nil
}

// restore publishes rec's envelope again from its body and points the
// record at the new message. The message id derives from the lost
// sequence, so two orchestrators restoring it at once publish it once; a
// crash before the record moved is repaired by the next look.
func (o *Orchestrator) restore(ctx context.Context, rec kv.EnvelopeRecord) error {
	log := o.log.With().Str("envelope_id", rec.ID).Str("job_id", rec.Job).Int("chunk", rec.Chunk).Str("trace_id", rec.TraceID).Logger()
	body, err := o.stores.Envelopes.Body(ctx, rec.ID)
	if errors.Is(err, kv.ErrNotFound) {
		log.Error().Uint64("dlq_seq", rec.DLQSeq).Msg("envelope's DLQ message is gone and its record keeps no body; a person must settle it")
		return nil
	}
	if err != nil {
		return err
	}
	env, err := recovery.DecodeEnvelope(body)
	if err != nil {
		return fmt.Errorf("consumers: restore envelope %s: %w", rec.ID, err)
	}
	ack, err := flow.PublishEnvelopeMsg(ctx, o.js, env, body, fmt.Sprintf("%s.restored.%d", rec.ID, rec.DLQSeq))
	if err != nil {
		return err
	}
	_, err = o.stores.Envelopes.Mutate(ctx, rec.ID, func(r *kv.EnvelopeRecord) error {
		if r.DLQSeq != rec.DLQSeq {
			return kv.ErrNoChange // restored by another meanwhile
		}
		r.Notes = append(r.Notes, fmt.Sprintf("its message %s %d was gone; published again from its record as %d", streams.DLQ, r.DLQSeq, ack.Sequence))
		r.DLQSeq = ack.Sequence
		return nil
	})
	if err != nil {
		return err
	}
	log.Warn().Uint64("lost_seq", rec.DLQSeq).Uint64("dlq_seq", ack.Sequence).Msg("envelope's DLQ message was gone; published again from its record")
	return nil
}

// runs reports whether rec is an envelope of a pipeline this orchestrator
// runs (its chunk subject names it).
func (o *Orchestrator) runs(rec kv.EnvelopeRecord) bool {
	ref, err := streams.ParseChunkSubject(rec.Subject)
	if err != nil {
		return false
	}
	_, err = o.cfg.Registry.Get(ref.Pipeline)
	return err == nil
}
