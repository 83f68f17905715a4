package spec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/spec"
	"github.com/salvagehq/salvage/salvagetest"
)

const shop = `pipelines:
  - name: shop
    split: items
    stages:
      - name: pay
        agents:
          - name: cashier
            tool: charge
      - name: ship
        agents:
          - name: shipper
            subject: agents.ship
            timeout: 2s
    tools:
      - name: charge
        subject: tools.charge
        system: payments
        timeout: 300ms
        effect:
          reversible: true
          compensation: refund
          verify_subject: tools.charge.verify
      - name: refund
        subject: tools.refund
        system: payments
`

// payments serves tools.charge, its verify subject and tools.refund;
// the first charge of order "slow" is taken but answered too late.
type payments struct {
	mu       sync.Mutex
	charges  map[string]string // idempotency key -> charge id
	byOrder  map[string]string // order -> charge id
	requests int
	refunded []string
	slow     bool
}

// TestDeclaredToolsWithSideEffects: a pipeline declared in YAML whose
// steps are NATS services: a charge that timed out after taking effect is
// verified on its verify subject and not repeated; an order the shipper
// refuses is refunded through the declared compensation subject.
func TestDeclaredToolsWithSideEffects(t *testing.T) {
	t.Parallel()
	ps, err := spec.Parse("shop.yaml", []byte(shop))
	if err != nil {
		t.Fatal(err)
	}
	srv := salvagetest.StartServer(t)
	p := &payments{charges: map[string]string{}, byOrder: map[string]string{}}
	svc, err := micro.AddService(srv.Conn, micro.Config{Name: "payments", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	add := func(name, subject string, h micro.HandlerFunc) {
		if err := svc.AddEndpoint(name, h, micro.WithEndpointSubject(subject)); err != nil {
			t.Fatal(err)
		}
	}
	add("charge", "tools.charge", func(r micro.Request) {
		var req salvage.ServiceRequest
		_ = json.Unmarshal(r.Data(), &req)
		var order struct{ ID string }
		_ = json.Unmarshal(req.Input, &order)
		key := r.Headers().Get(salvage.HeaderIdempotencyKey)
		p.mu.Lock()
		p.requests++
		id, ok := p.charges[key]
		if !ok {
			id = fmt.Sprintf("ch_%d", len(p.charges)+1)
			p.charges[key] = id
			p.byOrder[order.ID] = id
		}
		slow := order.ID == "slow" && !p.slow
		p.slow = p.slow || slow
		p.mu.Unlock()
		if slow {
			return // taken, never answered: the caller times out
		}
		_ = r.RespondJSON(id)
	})
	add("verify", "tools.charge.verify", func(r micro.Request) {
		var v salvage.VerifyRequest
		_ = json.Unmarshal(r.Data(), &v)
		p.mu.Lock()
		id, ok := p.charges[v.Key]
		p.mu.Unlock()
		_ = r.RespondJSON(salvage.VerifyReply{Applied: ok, ResourceID: id, Output: json.RawMessage(fmt.Sprintf("%q", id))})
	})
	add("refund", "tools.refund", func(r micro.Request) {
		var req salvage.ServiceRequest
		_ = json.Unmarshal(r.Data(), &req)
		var in salvage.CompensationInput
		_ = json.Unmarshal(req.Input, &in)
		var id string
		_ = json.Unmarshal(in.Output, &id)
		p.mu.Lock()
		p.refunded = append(p.refunded, id)
		p.mu.Unlock()
		_ = r.RespondJSON("refunded")
	})
	add("ship", "agents.ship", func(r micro.Request) {
		var req salvage.ServiceRequest
		_ = json.Unmarshal(r.Data(), &req)
		var order struct{ ID string }
		_ = json.Unmarshal(req.Input, &order)
		if order.ID == "nowhere" {
			_ = r.Error("422", "no address for order nowhere", nil)
			return
		}
		_ = r.RespondJSON("shipped")
	})

	c := srv.Client(t, &salvage.Config{Pipelines: ps})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "shop", []map[string]string{{"id": "ok"}, {"id": "slow"}, {"id": "nowhere"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobIncomplete || j.Summary.Done != 2 {
		t.Fatalf("job = %+v", j)
	}
	var rec salvage.EnvelopeRecord
	salvagetest.Eventually(t, time.Minute, func() bool {
		list, err := c.EnvelopeList(ctx, salvage.EnvelopeFilter{Job: id}, nil)
		if err != nil || len(list.Envelopes) != 1 {
			return false
		}
		rec = list.Envelopes[0]
		return rec.Status.Final()
	}, "the refused order's envelope to settle")
	if rec.Chunk != 3 || rec.Category != salvage.CategoryPartialExecution || rec.Status != salvage.EnvelopeAbandoned {
		t.Errorf("envelope = %+v", rec)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.charges) != 3 || p.requests != 3 {
		t.Errorf("%d charges in %d requests; want 3 and 3 (the slow one verified, not repeated)", len(p.charges), p.requests)
	}
	if len(p.refunded) != 1 || p.refunded[0] != p.byOrder["nowhere"] {
		t.Errorf("refunded %v; want the refused order's charge once", p.refunded)
	}
}
