package consumers_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// A bulk replay by category replays exactly the envelopes of that
// category, once each: a dry run first changes nothing, a second run
// finds them all in flight and publishes nothing more.
func TestBulkReplayByCategory(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	stop := b.startWorker(t, "w1")
	modes := make([]string, 0, 25)
	for range 20 {
		modes = append(modes, modeAlwaysFails)
	}
	for range 5 {
		modes = append(modes, modePermanent)
	}
	job := b.submit(t, modes...)
	salvagetest.Eventually(t, 60*time.Second, func() bool {
		recs, err := b.stores.Envelopes.List(b.ctx)
		return err == nil && len(recs) == 25
	}, "25 envelopes")
	stop() // the replayed chunks wait in the queue, so nothing supersedes them
	b.waitJob(t, job, salvagetype.JobIncomplete)

	op := operator.New(b.JS, b.stores)

	filter := operator.EnvelopeFilter{Category: salvagetype.CategoryExternalSystemDown}
	dry, err := op.Bulk(b.ctx, operator.BulkRequest{Action: salvagetype.BulkReplay, Filter: filter, By: "ops", DryRun: true})
	if err != nil || dry.Matched != 20 || dry.Acted != 20 || len(dry.IDs) != 20 {
		t.Fatalf("dry run %+v, %v; want 20 matched and listed", dry, err)
	}
	if n := b.streamMsgs(t, streams.Chunks); n != 0 {
		t.Fatalf("a dry run published %d chunks", n)
	}
	res, err := op.Bulk(b.ctx, operator.BulkRequest{Action: salvagetype.BulkReplay, Filter: filter, By: "ops"})
	if err != nil || res.Acted != 20 || res.Unchanged != 0 || len(res.Failed) != 0 {
		t.Fatalf("bulk replay %+v, %v", res, err)
	}
	again, err := op.Bulk(b.ctx, operator.BulkRequest{Action: salvagetype.BulkReplay, Filter: filter, By: "ops"})
	if err != nil || again.Acted != 0 || again.Unchanged != 20 {
		t.Fatalf("second bulk replay %+v, %v; want every replay found in flight", again, err)
	}
	recs, err := b.stores.Envelopes.List(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	replayed := map[string]bool{}
	for _, r := range recs {
		switch r.Category {
		case salvagetype.CategoryExternalSystemDown:
			if r.Replays != 1 || !r.Requeued || r.Status != salvagetype.EnvelopeRecovering {
				t.Fatalf("envelope %s: replays %d, requeued %v, %s", r.ID, r.Replays, r.Requeued, r.Status)
			}
			replayed[r.ID] = true
		default:
			if r.Replays != 0 || r.Status != salvagetype.EnvelopeOpen {
				t.Fatalf("envelope %s of %s was touched: %+v", r.ID, r.Category, r)
			}
		}
	}
	s, err := b.JS.Stream(b.ctx, streams.Chunks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(b.ctx)
	if err != nil || info.State.Msgs != 20 {
		t.Fatalf("SALVAGE_CHUNKS holds %d messages; want the 20 replays", info.State.Msgs)
	}
	seen := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(b.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		id := m.Header.Get(salvagetype.HeaderReplayOf)
		if !replayed[id] || seen[id] {
			t.Fatalf("message %d replays %q: not one of the 20, or twice", seq, id)
		}
		seen[id] = true
	}
	if _, err := op.Bulk(b.ctx, operator.BulkRequest{Action: "delete", Filter: filter}); !errors.Is(err, salvagetype.ErrBadBulk) {
		t.Fatalf("an unknown action: %v", err)
	}
}
