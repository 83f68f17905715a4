package consumers_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// setupApprovalShop runs the shop with shipping behind a person's
// approval: stage 1 reserves and charges, stage 2 ships once approved.
func setupApprovalShop(t *testing.T) (*bundle, *shop) {
	t.Helper()
	s := newShop()
	p := s.pipeline(t)
	ship := p.Stages[2]
	ship.RequiresApproval = true
	p.Stages = []salvagetype.Stage{p.Stages[0], ship}
	b := setup(t, setupOpts{pipelines: []*recovery.Plan{p}})
	b.startWorker(t, "w1")
	b.startOrchestrator(t, "o1")
	return b, s
}

func (b *bundle) waitStatus(t *testing.T, job string, chunk int, status salvagetype.ChunkStatus) kv.Checkpoint {
	t.Helper()
	var cp kv.Checkpoint
	salvagetest.Eventually(t, time.Minute, func() bool {
		var err error
		cp, _, err = b.stores.Parts()[0].Checkpoints.Get(b.ctx, job, chunk)
		return err == nil && cp.Status == status
	}, "chunk %d of %s to be %s (last %+v)", chunk, job, status, &cp)
	return cp
}

// A stage that requires approval parks the chunk (announced, its message
// on SALVAGE_HOLD, its job running); the approval sends it on without
// repeating the first stage's effects.
func TestApprovalReleasesTheChunk(t *testing.T) {
	t.Parallel()
	b, s := setupApprovalShop(t)
	events := b.subscribe(t, "salvage.events.*.approval")
	job := b.submitOrders(t, shopOrder{ID: "o-1"})
	cp := b.waitStatus(t, job, 1, salvagetype.ChunkAwaitingApproval)
	if cp.Stage != 2 || s.count("ship") != 0 || s.count("charge") != 1 {
		t.Fatalf("parked at stage %d with %d shipments and %d charges; want stage 2, none shipped, one charge", cp.Stage, s.count("ship"), s.count("charge"))
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(events()) == 1 }, "the approval event")
	var ev salvagetype.ApprovalEvent
	if err := json.Unmarshal(events()[0].Data, &ev); err != nil || ev.Job != job || ev.Chunk != 1 || ev.Stage != 2 || ev.StageName != "ship" {
		t.Fatalf("approval event %s: %v", events()[0].Data, err)
	}
	if n := b.streamMsgs(t, streams.Hold); n != 1 {
		t.Fatalf("%d messages on SALVAGE_HOLD; want the parked chunk", n)
	}
	if j, _ := b.stores.Jobs.Get(b.ctx, job); j.Status != salvagetype.JobRunning {
		t.Fatalf("job %s while its chunk awaits approval; want running", j.Status)
	}
	op := operator.New(b.JS, b.stores)
	if _, err := op.Approve(b.ctx, job, 2, operator.Decision{Approve: true, By: "ann"}); !errors.Is(err, salvagetype.ErrNotAwaitingApproval) {
		t.Fatalf("approving a chunk that does not exist: %v", err)
	}
	if _, err := op.Approve(b.ctx, job, 1, operator.Decision{Approve: true, By: "ann", Note: "looks fine"}); err != nil {
		t.Fatal(err)
	}
	b.waitJob(t, job, salvagetype.JobDone)
	cp = b.checkpoint(t, job, 1)
	if len(cp.Approvals) != 1 || cp.Approvals[0].By != "ann" || cp.Approvals[0].Stage != 2 || cp.Approvals[0].Note != "looks fine" {
		t.Fatalf("approvals %+v", cp.Approvals)
	}
	// The chunk's timeline: parked, approved, delivered again.
	var kinds []salvagetype.EventKind
	for _, ev := range cp.Events {
		kinds = append(kinds, ev.Kind)
		if ev.Kind == salvagetype.EventApproved && (ev.Stage != 2 || ev.Detail != "ann: looks fine") {
			t.Errorf("approved event %+v", ev)
		}
	}
	if got := fmt.Sprint(kinds); !strings.Contains(got, fmt.Sprint(salvagetype.EventAwaitingApproval, " ", salvagetype.EventApproved, " ", salvagetype.EventDelivered)) {
		t.Errorf("chunk events %q: want the park, the approval, then the delivery it released", got)
	}
	if s.count("ship") != 1 || s.count("charge") != 1 || s.count("reserve") != 1 {
		t.Fatalf("requests reserve %d, charge %d, ship %d; want one each", s.count("reserve"), s.count("charge"), s.count("ship"))
	}
	if n := b.streamMsgs(t, streams.Hold); n != 0 {
		t.Fatalf("%d messages left on SALVAGE_HOLD", n)
	}
	if _, err := op.Approve(b.ctx, job, 1, operator.Decision{Approve: true, By: "ann"}); !errors.Is(err, salvagetype.ErrNotAwaitingApproval) {
		t.Fatalf("approving a done chunk: %v", err)
	}
}

// A rejection compensates what the chunk did, newest first, and its
// envelope ends abandoned, marked as a person's doing.
func TestRejectionCompensatesAndAbandons(t *testing.T) {
	t.Parallel()
	b, s := setupApprovalShop(t)
	job := b.submitOrders(t, shopOrder{ID: "o-2"})
	b.waitStatus(t, job, 1, salvagetype.ChunkAwaitingApproval)
	op := operator.New(b.JS, b.stores)
	if _, err := op.Approve(b.ctx, job, 1, operator.Decision{By: "bob", Note: "fraud"}); err != nil {
		t.Fatal(err)
	}
	rec := b.envelopeOf(t, job, 1, func(r kv.EnvelopeRecord) bool { return r.Status == salvagetype.EnvelopeAbandoned }, "abandoned")
	if rec.Strategy != salvagetype.StrategyCompensateAndAbandon || !rec.Human {
		t.Fatalf("envelope %+v; want COMPENSATE_AND_ABANDON by a person", rec)
	}
	s.mu.Lock()
	undone := append([]string(nil), s.undone...)
	s.mu.Unlock()
	if len(undone) != 2 || undone[0] != "refund:charge-o-2-1" || undone[1] != "release:reserve-o-2-1" {
		t.Fatalf("compensations %v; want the refund, then the release", undone)
	}
	if s.count("ship") != 0 {
		t.Fatal("a rejected chunk shipped")
	}
	if n := b.streamMsgs(t, streams.Hold); n != 0 {
		t.Fatalf("%d messages left on SALVAGE_HOLD", n)
	}
	b.waitJob(t, job, salvagetype.JobIncomplete)
}
