// Package orders is the order-fulfillment demo pipeline: each order is a
// chunk that looks up the customer's loyalty tier in the CRM (an optional
// read: without it the order goes on, and its job ends partial), reserves
// inventory (WMS), creates an invoice (ERP), charges the payment, sends a
// confirmation email and updates the CRM — five side effects in five
// external systems, every one of them journaled, verified when its
// outcome is unknown, and (except the email) compensable.
package orders

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
)

// Name is the pipeline's name: jobs go to salvage.jobs.order-fulfillment.
const Name = "order-fulfillment"

// Item is one order line.
type Item struct {
	SKU   string  `json:"sku"`
	Qty   int     `json:"qty"`
	Price float64 `json:"price"`
}

// Order is one chunk's input.
type Order struct {
	ID            string  `json:"order_id"`
	Customer      string  `json:"customer"`
	Email         string  `json:"email"`
	Items         []Item  `json:"items"`
	Amount        float64 `json:"amount"`
	PaymentMethod string  `json:"payment_method"`
}

// Input is the job input: one order, or {"orders": [...]}.
type Input struct {
	Orders []Order `json:"orders"`
}

// Effect is what a tool returns: the sim's answer.
type Effect = sim.EffectResponse

// Split makes one chunk per order.
func Split(raw json.RawMessage) ([]json.RawMessage, error) {
	var in Input
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("%w: order-fulfillment takes an order or {\"orders\": [...]}: %w", salvage.ErrBadInput, err)
	}
	if len(in.Orders) == 0 {
		var one Order
		if err := json.Unmarshal(raw, &one); err != nil || one.ID == "" {
			return nil, fmt.Errorf("%w: no orders", salvage.ErrBadInput)
		}
		in.Orders = []Order{one}
	}
	seen := map[string]bool{}
	out := make([]json.RawMessage, 0, len(in.Orders))
	for i, o := range in.Orders {
		if err := salvage.ValidateToken("order_id", o.ID); err != nil {
			return nil, fmt.Errorf("%w: order %d: %w", salvage.ErrBadInput, i+1, err)
		}
		if seen[o.ID] {
			return nil, fmt.Errorf("%w: order %s appears twice", salvage.ErrBadInput, o.ID)
		}
		seen[o.ID] = true
		if o.Amount <= 0 || len(o.Items) == 0 {
			return nil, fmt.Errorf("%w: order %s needs items and a positive amount", salvage.ErrBadInput, o.ID)
		}
		data, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	return out, nil
}

// Tool names.
const (
	ToolReserve = "reserve-inventory"
	ToolRelease = "release-inventory"
	ToolInvoice = "create-invoice"
	ToolVoid    = "void-invoice"
	ToolCharge  = "charge-payment"
	ToolRefund  = "refund-payment"
	ToolEmail   = "send-email"
	ToolCRM     = "update-crm"
	ToolRevert  = "revert-crm"
	ToolLookup  = "lookup-customer"
	systemWMS   = "wms"
	systemERP   = "erp"
	systemPay   = "payments"
	systemEmail = "email"
	systemCRM   = "crm"
	opReserve   = "reserve"
	opInvoice   = "invoice"
	opCharge    = "charge"
	opSend      = "send"
	opUpdate    = "update"
	undoRelease = "release"
	undoVoid    = "void"
	undoRefund  = "refund"
	undoRevert  = "revert"
)

// Tools returns the order tools calling the sim through c.
func Tools(c *sim.Client) []salvage.Tool {
	effect := func(name, system, op, undo, compensation string) salvage.Tool {
		t := salvage.Tool{Name: name, System: system, Call: func(ctx context.Context, call salvage.ToolCall) (salvage.ToolResult, error) {
			resp, err := c.Effect(ctx, system, op, call.IdempotencyKey, json.RawMessage(call.Input))
			if err != nil {
				return salvage.ToolResult{}, err
			}
			out, err := json.Marshal(resp)
			return salvage.ToolResult{Output: out, ResourceID: resp.ResourceID}, err
		}}
		t.Effect = &salvage.SideEffect{
			Reversible: undo != "", Compensation: compensation,
			Verify: func(ctx context.Context, key string) (salvage.Verification, error) {
				resp, err := c.Verify(ctx, system, key)
				if err != nil {
					return salvage.Verification{}, err
				}
				out, _ := json.Marshal(resp)
				return salvage.Verification{Applied: resp.Applied, ResourceID: resp.ResourceID, Output: out}, nil
			},
		}
		return t
	}
	undo := func(name, system, op string) salvage.Tool {
		return salvage.Tool{Name: name, System: system, Call: func(ctx context.Context, call salvage.ToolCall) (salvage.ToolResult, error) {
			var in salvage.CompensationInput
			if err := json.Unmarshal(call.Input, &in); err != nil {
				return salvage.ToolResult{}, salvage.Permanent(400, err)
			}
			resp, err := c.Compensate(ctx, system, op, call.IdempotencyKey, in.Key)
			if err != nil {
				return salvage.ToolResult{}, err
			}
			out, err := json.Marshal(resp)
			return salvage.ToolResult{Output: out, ResourceID: resp.ResourceID}, err
		}}
	}
	lookup := salvage.Tool{Name: ToolLookup, System: systemCRM, Call: func(ctx context.Context, call salvage.ToolCall) (salvage.ToolResult, error) {
		var in struct {
			Customer string `json:"customer"`
		}
		if err := json.Unmarshal(call.Input, &in); err != nil {
			return salvage.ToolResult{}, salvage.Permanent(400, err)
		}
		p, err := c.Customer(ctx, systemCRM, in.Customer)
		if err != nil {
			return salvage.ToolResult{}, err
		}
		out, err := json.Marshal(p)
		return salvage.ToolResult{Output: out}, err
	}}
	return []salvage.Tool{
		lookup,
		effect(ToolReserve, systemWMS, opReserve, undoRelease, ToolRelease),
		undo(ToolRelease, systemWMS, undoRelease),
		effect(ToolInvoice, systemERP, opInvoice, undoVoid, ToolVoid),
		undo(ToolVoid, systemERP, undoVoid),
		effect(ToolCharge, systemPay, opCharge, undoRefund, ToolRefund),
		undo(ToolRefund, systemPay, undoRefund),
		effect(ToolEmail, systemEmail, opSend, "", ""),
		effect(ToolCRM, systemCRM, opUpdate, undoRevert, ToolRevert),
		undo(ToolRevert, systemCRM, undoRevert),
	}
}

// New returns the pipeline calling the sim through c.
func New(c *sim.Client) *salvage.Pipeline {
	step := func(agent string, calls ...string) salvage.Agent {
		return salvage.Agent{Name: agent, Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			var o Order
			if err := json.Unmarshal(t.Input, &o); err != nil {
				return nil, salvage.Permanent(400, err)
			}
			out := map[string]Effect{}
			for _, name := range calls {
				raw, err := t.Tool(ctx, name, request(name, o))
				if err != nil {
					return nil, err
				}
				var e Effect
				if err := json.Unmarshal(raw, &e); err != nil {
					return nil, salvage.Permanent(0, fmt.Errorf("%s output: %w", name, err))
				}
				out[name] = e
			}
			return out, nil
		}}
	}
	profiler := salvage.Agent{Name: "profiler", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
		var o Order
		if err := json.Unmarshal(t.Input, &o); err != nil {
			return nil, salvage.Permanent(400, err)
		}
		raw, err := t.Tool(ctx, ToolLookup, map[string]string{"customer": o.Customer})
		if err != nil {
			return nil, err
		}
		return map[string]json.RawMessage{ToolLookup: raw}, nil
	}}
	return &salvage.Pipeline{
		Name:  Name,
		Split: Split,
		Tools: Tools(c),
		Stages: []salvage.Stage{
			// The tier only personalises the email: an order goes on
			// without it (the stage's gap makes its job partial).
			{Name: "profile", Agents: []salvage.Agent{profiler}, Optional: true},
			{Name: "reserve", Agents: []salvage.Agent{step("inventory", ToolReserve)}},
			{Name: "bill", Agents: []salvage.Agent{step("billing", ToolInvoice, ToolCharge)}},
			{Name: "notify", Agents: []salvage.Agent{step("notifier", ToolEmail)}},
			{Name: "record", Agents: []salvage.Agent{step("crm", ToolCRM)}},
		},
		Result: result,
	}
}

// request is the body a tool sends for an order.
func request(tool string, o Order) map[string]any {
	r := map[string]any{"order": o.ID}
	switch tool {
	case ToolReserve:
		r["items"] = o.Items
	case ToolInvoice, ToolCharge:
		r["amount"], r["customer"], r["payment_method"] = o.Amount, o.Customer, o.PaymentMethod
	case ToolEmail:
		r["to"], r["template"] = o.Email, "order-confirmation"
	case ToolCRM:
		r["customer"], r["status"] = o.Customer, "fulfilled"
	}
	return r
}

// Fulfilment is what a finished order publishes.
type Fulfilment struct {
	Order   string            `json:"order_id"`
	Effects map[string]string `json:"effects"`
	// Tier is the customer's loyalty tier; empty when the CRM could not
	// be read.
	Tier string `json:"tier,omitempty"`
}

func result(input json.RawMessage, outs []salvage.StageOutput) (json.RawMessage, error) {
	var o Order
	if err := json.Unmarshal(input, &o); err != nil {
		return nil, err
	}
	f := Fulfilment{Order: o.ID, Effects: map[string]string{}}
	for _, so := range outs {
		if so.Agent == "profiler" {
			var m map[string]sim.Profile
			if err := json.Unmarshal(so.Output, &m); err != nil {
				return nil, fmt.Errorf("stage %d output: %w", so.Stage, err)
			}
			f.Tier = m[ToolLookup].Tier
			continue
		}
		var m map[string]Effect
		if err := json.Unmarshal(so.Output, &m); err != nil {
			return nil, fmt.Errorf("stage %d output: %w", so.Stage, err)
		}
		for tool, e := range m {
			f.Effects[tool] = e.ResourceID
		}
	}
	return json.Marshal(f)
}

// Generate makes n plausible orders, o-0001 on, deterministic for seed.
func Generate(n int, seed int64) []Order {
	out := make([]Order, n)
	for i := range out {
		id := fmt.Sprintf("o-%04d", i+1)
		qty := 1 + int((seed+int64(i)*7)%4)
		price := float64(5+(seed+int64(i)*13)%95) + 0.99
		out[i] = Order{
			ID: id, Customer: fmt.Sprintf("customer-%03d", (seed+int64(i)*31)%500), Email: id + "@example.test",
			Items:         []Item{{SKU: fmt.Sprintf("sku-%03d", (seed+int64(i)*17)%300), Qty: qty, Price: price}},
			Amount:        float64(qty) * price,
			PaymentMethod: []string{"card", "sepa", "invoice"}[i%3],
		}
	}
	return out
}
