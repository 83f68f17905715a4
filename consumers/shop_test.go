package consumers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/consumers/orchestrator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// The "shop" pipeline has real side effects, in a shop defined here: a
// chunk is one order; stage 1 reserves stock and charges the card (both
// reversible: release, refund), stage 2 may send an email (irreversible),
// stage 3 books shipping, which refuses orders marked to fail.
const shopPipeline = "shop"

// shopOrder is one chunk's input.
type shopOrder struct {
	ID    string `json:"id"`
	Email bool   `json:"email,omitempty"`
	Fail  bool   `json:"fail,omitempty"`
}

// shop is the external systems: every effect is kept by idempotency key,
// so a repeated request never applies twice, and every request counted.
type shop struct {
	mu sync.Mutex
	// effects maps tool -> idempotency key -> resource id.
	effects map[string]map[string]string
	// requests counts Call invocations per tool.
	requests map[string]int
	// undone lists compensations in the order they ran, as "tool:resource".
	undone []string
	// undoCalls are the ToolCalls the compensations received.
	undoCalls []salvagetype.ToolCall
	// paymentsDown makes a charge time out without taking effect; the
	// keys it was asked for wait in late, as if the request were still on
	// the wire.
	paymentsDown bool
	late         []string
	// shippingBroken refuses every shipment.
	shippingBroken bool
	// refundsBroken refuses every refund.
	refundsBroken bool
}

func newShop() *shop {
	return &shop{effects: map[string]map[string]string{}, requests: map[string]int{}}
}

func (s *shop) count(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[tool]
}

func (s *shop) applied(tool string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.effects[tool] {
		out[k] = v
	}
	return out
}

// land applies the charges that timed out: the provider took them after
// all. It brings payments back.
func (s *shop) land() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range s.late {
		s.apply("charge", key, "")
	}
	s.late, s.paymentsDown = nil, false
}

func (s *shop) setShippingBroken(b bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shippingBroken = b
}

// apply records an effect once per key and returns its resource id; the
// caller holds mu.
func (s *shop) apply(tool, key, order string) string {
	if s.effects[tool] == nil {
		s.effects[tool] = map[string]string{}
	}
	if id, ok := s.effects[tool][key]; ok {
		return id
	}
	id := fmt.Sprintf("%s-%s-%d", tool, order, len(s.effects[tool])+1)
	s.effects[tool][key] = id
	return id
}

func (s *shop) verify(tool string) func(context.Context, string) (salvagetype.Verification, error) {
	return func(_ context.Context, key string) (salvagetype.Verification, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		id, ok := s.effects[tool][key]
		return salvagetype.Verification{Applied: ok, ResourceID: id, Output: json.RawMessage(fmt.Sprintf("%q", id))}, nil
	}
}

// effect is a tool that applies one effect per idempotency key.
func (s *shop) effect(tool, system string, effect *salvagetype.SideEffect) salvagetype.Tool {
	return salvagetype.Tool{Name: tool, System: system, Effect: effect, Call: func(ctx context.Context, c salvagetype.ToolCall) (salvagetype.ToolResult, error) {
		var o shopOrder
		if err := json.Unmarshal(c.Input, &o); err != nil {
			return salvagetype.ToolResult{}, salvagetype.Permanent(400, err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests[tool]++
		switch {
		case tool == "charge" && s.paymentsDown:
			s.late = append(s.late, c.IdempotencyKey)
			return salvagetype.ToolResult{}, salvagetype.Timeout(errors.New("payments: no answer"))
		case tool == "ship" && (o.Fail || s.shippingBroken):
			return salvagetype.ToolResult{}, salvagetype.Permanent(422, fmt.Errorf("shipping refuses order %s", o.ID))
		}
		id := s.apply(tool, c.IdempotencyKey, o.ID)
		return salvagetype.ToolResult{Output: json.RawMessage(fmt.Sprintf("%q", id)), ResourceID: id}, nil
	}}
}

// undo is a compensation tool: it takes back the effect named by the
// output of the call it undoes.
func (s *shop) undo(tool string) salvagetype.Tool {
	return salvagetype.Tool{Name: tool, System: "shop", Call: func(ctx context.Context, c salvagetype.ToolCall) (salvagetype.ToolResult, error) {
		var in salvagetype.CompensationInput
		var id string
		if err := json.Unmarshal(c.Input, &in); err != nil {
			return salvagetype.ToolResult{}, salvagetype.Permanent(400, err)
		}
		if err := json.Unmarshal(in.Output, &id); err != nil {
			return salvagetype.ToolResult{}, salvagetype.Permanent(400, err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests[tool]++
		if tool == "refund" && s.refundsBroken {
			return salvagetype.ToolResult{}, salvagetype.Permanent(422, fmt.Errorf("refund of %s refused", id))
		}
		s.undone = append(s.undone, tool+":"+id)
		s.undoCalls = append(s.undoCalls, c)
		return salvagetype.ToolResult{Output: json.RawMessage(`"undone"`)}, nil
	}}
}

func (s *shop) pipeline(t *testing.T) *recovery.Plan {
	t.Helper()
	tools, err := recovery.NewTools(
		s.effect("reserve", "stock", &salvagetype.SideEffect{Reversible: true, Compensation: "release", Verify: s.verify("reserve")}),
		s.effect("charge", "payments", &salvagetype.SideEffect{Reversible: true, Compensation: "refund", Verify: s.verify("charge")}),
		s.effect("email", "email", &salvagetype.SideEffect{Verify: s.verify("email")}),
		s.effect("ship", "shipping", nil),
		s.undo("release"), s.undo("refund"),
	)
	if err != nil {
		t.Fatal(err)
	}
	call := func(tools ...string) func(context.Context, *salvagetype.Turn) (any, error) {
		return func(ctx context.Context, turn *salvagetype.Turn) (any, error) {
			var o shopOrder
			if err := json.Unmarshal(turn.Input, &o); err != nil {
				return nil, salvagetype.Permanent(400, err)
			}
			for _, tool := range tools {
				if tool == "email" && !o.Email {
					continue
				}
				if _, err := turn.Tool(ctx, tool, o); err != nil {
					return nil, err
				}
			}
			return "ok", nil
		}
	}
	return &recovery.Plan{
		Name: shopPipeline,
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var orders []json.RawMessage
			if err := json.Unmarshal(in, &orders); err != nil {
				return nil, fmt.Errorf("%w: %w", salvagetype.ErrBadInput, err)
			}
			return orders, nil
		},
		Tools: tools,
		Stages: []salvagetype.Stage{
			{Name: "pay", Agents: []salvagetype.Agent{{Name: "cashier", Run: call("reserve", "charge")}}},
			{Name: "notify", Agents: []salvagetype.Agent{{Name: "mailer", Run: call("email")}}},
			{Name: "ship", Agents: []salvagetype.Agent{{Name: "shipper", Run: call("ship")}}},
		},
	}
}

// setupShop starts a server with the shop pipeline registered, a worker
// and the dead-letterer; no orchestrator (startOrchestrator adds one).
func setupShop(t *testing.T) (*bundle, *shop) {
	t.Helper()
	s := newShop()
	b := setup(t, setupOpts{pipelines: []*recovery.Plan{s.pipeline(t)}})
	b.startWorker(t, "w1")
	return b, s
}

func (b *bundle) startOrchestrator(t *testing.T, id string) {
	t.Helper()
	o, err := orchestrator.New(b.JS, b.stores, orchestrator.Config{ID: id, Registry: b.reg, Retry: testRetry})
	if err != nil {
		t.Fatal(err)
	}
	b.goRun(o.Run)
}

// submitOrders publishes a shop job, one chunk per order.
func (b *bundle) submitOrders(t *testing.T, orders ...shopOrder) string {
	t.Helper()
	id := ulid.Make().String()
	body, _ := json.Marshal(map[string]any{"job_id": id, "input": orders})
	if _, err := b.JS.Publish(b.ctx, streams.Pipeline(shopPipeline).Subject(), body); err != nil {
		t.Fatal(err)
	}
	return id
}

// envelopeOf waits for chunk's latest envelope record to satisfy ok.
func (b *bundle) envelopeOf(t *testing.T, job string, chunk int, ok func(kv.EnvelopeRecord) bool, what string) kv.EnvelopeRecord {
	t.Helper()
	var last kv.EnvelopeRecord
	salvagetest.Eventually(t, 2*time.Minute, func() bool {
		pg, err := operator.New(b.JS, b.stores).Page(b.ctx, operator.EnvelopeFilter{Job: job}, 0, 1000, false)
		if err != nil {
			return false
		}
		for _, r := range pg.Records {
			if r.Chunk == chunk && r.Status != salvagetype.EnvelopeSuperseded {
				last = r
				return ok(r)
			}
		}
		return false
	}, "chunk %d's envelope %s (last: %+v)", chunk, what, &last)
	return last
}

// row returns chunk's journal row for tool in epoch 0.
func (b *bundle) row(t *testing.T, job string, chunk int, tool string) kv.StoredRow {
	t.Helper()
	rows, err := b.stores.Parts()[0].Journal.Load(b.ctx, job, chunk, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Tool == tool {
			return r
		}
	}
	t.Fatalf("chunk %d has no %s row", chunk, tool)
	return kv.StoredRow{}
}

// TestOrchestratorCompensates: an order refused at shipping after its
// stock was reserved and its card charged is compensated newest first
// (refund, then release) and abandoned with nothing left; one that also
// sent an email (irreversible) is compensated as far as it can be and
// escalated, naming the email. Two orchestrators run; each compensation
// runs once, under the place of the call it undoes.
func TestOrchestratorCompensates(t *testing.T) {
	t.Parallel()
	b, s := setupShop(t)
	escalations := b.subscribe(t, streams.EscalationSubject(salvagetype.CategoryCompensationNeeded))
	b.startOrchestrator(t, "o1")
	b.startOrchestrator(t, "o2")
	job := b.submitOrders(t, shopOrder{ID: "A"}, shopOrder{ID: "B", Fail: true}, shopOrder{ID: "C", Email: true, Fail: true})

	j := b.waitJob(t, job, salvagetype.JobIncomplete)
	if j.Summary.Done != 1 || j.Summary.DeadLettered != 2 {
		t.Fatalf("job summary = %+v, want 1 done and 2 dead-lettered", j.Summary)
	}
	abandoned := b.envelopeOf(t, job, 2, func(r kv.EnvelopeRecord) bool { return r.Final() }, "final")
	escalated := b.envelopeOf(t, job, 3, func(r kv.EnvelopeRecord) bool { return r.Final() }, "final")

	if abandoned.Status != salvagetype.EnvelopeAbandoned || abandoned.Category != salvagetype.CategoryPartialExecution || len(abandoned.Left) != 0 {
		t.Errorf("order B's envelope = %s %s, left %v; want PARTIAL_EXECUTION abandoned with nothing left", abandoned.Category, abandoned.Status, abandoned.Left)
	}
	if escalated.Status != salvagetype.EnvelopeEscalated || escalated.Category != salvagetype.CategoryCompensationNeeded ||
		len(escalated.Left) != 1 || escalated.Left[0].Tool != "email" || escalated.Left[0].System != "email" || escalated.Left[0].ResourceID == "" {
		t.Errorf("order C's envelope = %s %s, left %+v; want COMPENSATION_NEEDED escalated, the email left", escalated.Category, escalated.Status, escalated.Left)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(escalations()) == 1 }, "the escalation of order C")
	if m := escalations()[0]; m.Header.Get(salvagetype.HeaderEnvelope) != escalated.ID {
		t.Errorf("escalation names envelope %q, want %s", m.Header.Get(salvagetype.HeaderEnvelope), escalated.ID)
	}

	s.mu.Lock()
	undone, undoCalls := append([]string(nil), s.undone...), append([]salvagetype.ToolCall(nil), s.undoCalls...)
	s.mu.Unlock()
	charges, reserves := s.applied("charge"), s.applied("reserve")
	if len(charges) != 3 || len(reserves) != 3 || s.count("charge") != 3 || len(s.applied("email")) != 1 {
		t.Errorf("effects: %d charges in %d requests, %d reserves, %d emails; want 3, 3, 3, 1", len(charges), s.count("charge"), len(reserves), len(s.applied("email")))
	}
	// Each order's effects undone newest first, each once; order A's kept.
	byOrder := map[string][]string{} // order -> compensation tools, in order
	for _, u := range undone {
		tool, resource, _ := strings.Cut(u, ":") // "refund:charge-B-2"
		parts := strings.Split(resource, "-")
		byOrder[parts[1]] = append(byOrder[parts[1]], tool)
	}
	if len(undone) != 4 || fmt.Sprint(byOrder["B"]) != "[refund release]" || fmt.Sprint(byOrder["C"]) != "[refund release]" || len(byOrder["A"]) != 0 {
		t.Errorf("compensations ran %v; want refund then release for B and for C, once each, none for A", undone)
	}
	for _, c := range undoCalls {
		if c.Job != job || (c.Chunk != 2 && c.Chunk != 3) || c.Stage != 1 || c.Agent != "cashier" || c.IdempotencyKey == "" {
			t.Errorf("a compensation call was placed at %s/%d stage %d agent %s key %q; want the cashier's call it undoes", c.Job, c.Chunk, c.Stage, c.Agent, c.IdempotencyKey)
		}
	}
	for chunk := 2; chunk <= 3; chunk++ {
		for _, tool := range []string{"charge", "reserve"} {
			if r := b.row(t, job, chunk, tool); r.Status != salvagetype.CallCompensated {
				t.Errorf("chunk %d's %s row is %s, want COMPENSATED", chunk, tool, r.Status)
			}
		}
	}
	if r := b.row(t, job, 3, "email"); r.Status != salvagetype.CallSucceeded {
		t.Errorf("the email row is %s: nothing can take an email back", r.Status)
	}
	if r := b.row(t, job, 1, "charge"); r.Status != salvagetype.CallSucceeded {
		t.Errorf("order A's charge row is %s", r.Status)
	}
}

// TestOrchestratorVerifiesBeforeResuming: payments time out without an
// answer through both tiers, so the chunk's envelope is TOOL_TIMEOUT with
// the charge in flight. The charge then lands after all; the orchestrator
// asks the provider before anything else, records the charge as
// succeeded (verified), and resumes the chunk, which finishes without
// charging again.
func TestOrchestratorVerifiesBeforeResuming(t *testing.T) {
	t.Parallel()
	b, s := setupShop(t)
	s.mu.Lock()
	s.paymentsDown = true
	s.mu.Unlock()
	job := b.submitOrders(t, shopOrder{ID: "A"})
	env := b.envelopeOf(t, job, 1, func(r kv.EnvelopeRecord) bool { return r.Status == salvagetype.EnvelopeOpen }, "open")
	if env.Category != salvagetype.CategoryToolTimeout || env.Strategy != salvagetype.StrategyVerify {
		t.Fatalf("envelope = %s/%s, want TOOL_TIMEOUT/VERIFY_THEN_DECIDE", env.Category, env.Strategy)
	}
	if r := b.row(t, job, 1, "charge"); r.Status != salvagetype.CallUnknown {
		t.Fatalf("charge row = %s, want UNKNOWN", r.Status)
	}
	s.land()
	requests := s.count("charge")
	b.startOrchestrator(t, "o1")

	b.waitJob(t, job, salvagetype.JobDone)
	rec := b.envelopeOf(t, job, 1, func(r kv.EnvelopeRecord) bool { return r.Final() }, "final")
	if rec.Status != salvagetype.EnvelopeResolved || rec.ResolvedBy != "chunk" {
		t.Errorf("envelope = %s by %q, want resolved by the chunk", rec.Status, rec.ResolvedBy)
	}
	if n := s.count("charge"); n != requests || len(s.applied("charge")) != 1 {
		t.Errorf("charge requests %d -> %d, charges %d: the resume charged again", requests, n, len(s.applied("charge")))
	}
	if r := b.row(t, job, 1, "charge"); r.Status != salvagetype.CallSucceeded || !r.Verified || r.Fingerprint == nil || r.Fingerprint.ResourceID == "" {
		t.Errorf("charge row = %s verified %v fingerprint %+v, want SUCCEEDED, verified, with the charge id", r.Status, r.Verified, r.Fingerprint)
	}
	if len(s.applied("ship")) != 1 {
		t.Error("the resumed order was not shipped")
	}
}

// TestOperator: with no orchestrator, a person works the DLQ. A replay
// while shipping is still broken supersedes the envelope with a new one;
// the superseded one refuses a replay; after the fix a replay finishes
// the chunk from its journal without repeating the charge. Resolve by
// hand, ack, unknown and malformed ids behave as the API promises.
func TestOperator(t *testing.T) {
	t.Parallel()
	b, s := setupShop(t)
	s.setShippingBroken(true)
	op := operator.New(b.JS, b.stores)
	job := b.submitOrders(t, shopOrder{ID: "A"})
	first := b.envelopeOf(t, job, 1, func(r kv.EnvelopeRecord) bool { return r.Status == salvagetype.EnvelopeOpen }, "open")

	d, err := op.Show(b.ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Envelope.FailedTool != "ship" || d.Envelope.FailedStage != 3 || d.Envelope.Category != salvagetype.CategoryPartialExecution ||
		len(d.Envelope.PendingCompensations) != 2 || d.Checkpoint == nil || len(d.Journal) != 3 {
		t.Errorf("show = failed %s at %d, %s, %d to compensate, checkpoint %v, %d rows", d.Envelope.FailedTool, d.Envelope.FailedStage,
			d.Envelope.Category, len(d.Envelope.PendingCompensations), d.Checkpoint != nil, len(d.Journal))
	}

	// Replayed while still broken: a new envelope carries the chunk's fate.
	if _, err := op.Replay(b.ctx, first.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	second := b.envelopeOf(t, job, 1, func(r kv.EnvelopeRecord) bool { return r.ID != first.ID && r.Status == salvagetype.EnvelopeOpen }, "a new open one")
	if rec, _, _ := b.stores.Envelopes.Get(b.ctx, first.ID); rec.Status != salvagetype.EnvelopeSuperseded || rec.SupersededBy != second.ID {
		t.Errorf("first envelope = %s superseded by %q, want superseded by %s", rec.Status, rec.SupersededBy, second.ID)
	}
	if _, err := op.Replay(b.ctx, first.ID, "ops"); !errors.Is(err, salvagetype.ErrSuperseded) {
		t.Errorf("replay of a superseded envelope: %v, want ErrSuperseded", err)
	}

	// Fixed: the replay finishes the chunk, charging nothing again.
	s.setShippingBroken(false)
	if _, err := op.Replay(b.ctx, second.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	b.waitJob(t, job, salvagetype.JobDone)
	rec := b.envelopeOf(t, job, 1, func(r kv.EnvelopeRecord) bool { return r.Final() }, "final")
	if rec.ID != second.ID || rec.Status != salvagetype.EnvelopeResolved || rec.ResolvedBy != "chunk" || !rec.Human || rec.Replays != 1 {
		t.Errorf("envelope after the fix = %+v, want the second resolved by its chunk, a person's doing", rec)
	}
	if s.count("charge") != 1 || s.count("reserve") != 1 || s.count("ship") != 3 {
		t.Errorf("requests: charge %d, reserve %d, ship %d; want 1, 1, 3 (two refusals, one shipment)", s.count("charge"), s.count("reserve"), s.count("ship"))
	}
	if _, err := op.Replay(b.ctx, second.ID, "ops"); !errors.Is(err, salvagetype.ErrAlreadyResolved) {
		t.Errorf("second replay: %v, want ErrAlreadyResolved", err)
	}
	if _, err := op.Resolve(b.ctx, second.ID, "ops", "again"); !errors.Is(err, salvagetype.ErrAlreadyResolved) {
		t.Errorf("resolve of a resolved envelope: %v, want ErrAlreadyResolved", err)
	}
	if acked, err := op.Ack(b.ctx, second.ID, "ops"); err != nil || acked.AckedBy != "ops" || acked.AckedAt.IsZero() {
		t.Errorf("ack = %+v, %v", acked, err)
	}

	// Resolved by hand: the person says what they did.
	s.setShippingBroken(true)
	job2 := b.submitOrders(t, shopOrder{ID: "B"})
	open := b.envelopeOf(t, job2, 1, func(r kv.EnvelopeRecord) bool { return r.Status == salvagetype.EnvelopeOpen }, "open")
	byHand, err := op.Resolve(b.ctx, open.ID, "ops", "shipped by courier")
	if err != nil || byHand.Status != salvagetype.EnvelopeResolved || byHand.ResolvedBy != "ops" || !byHand.Human ||
		len(byHand.Notes) == 0 || byHand.Notes[len(byHand.Notes)-1] == "" {
		t.Errorf("resolve by hand = %+v, %v", byHand, err)
	}
	if pg, err := op.Page(b.ctx, operator.EnvelopeFilter{Status: salvagetype.EnvelopeResolved}, 0, 10, false); err != nil || len(pg.Records) != 2 || pg.Total != 2 {
		t.Errorf("resolved envelopes listed: %d of %d, %v; want 2", len(pg.Records), pg.Total, err)
	}

	for _, tt := range []struct {
		id   string
		want error
	}{{"01JNOSUCHENVELOPE000000000", salvagetype.ErrUnknownEnvelope}, {"a.b", salvagetype.ErrInvalidToken}, {"x>", salvagetype.ErrInvalidToken}} {
		if _, err := op.Show(b.ctx, tt.id); !errors.Is(err, tt.want) {
			t.Errorf("show %q: %v, want %v", tt.id, err, tt.want)
		}
		if _, err := op.Replay(b.ctx, tt.id, "ops"); !errors.Is(err, tt.want) {
			t.Errorf("replay %q: %v, want %v", tt.id, err, tt.want)
		}
	}
}
