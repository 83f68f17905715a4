// Checkout charges a card for each order, then books its shipping, on an
// embedded NATS server. The payment provider lives in this process: it
// times out once after taking a charge, and the shipper refuses an order
// without an address. Salvage verifies the timed-out charge instead of
// charging twice, and refunds the refused order's charge.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/natsconf"
)

// Order is one chunk's input.
type Order struct {
	ID      string `json:"id"`
	Cents   int    `json:"cents"`
	Address string `json:"address"`
}

// payments is the external system: it keeps charges by idempotency key,
// so a repeated request never charges twice.
type payments struct {
	mu       sync.Mutex
	charges  map[string]string // idempotency key -> charge id
	refunded map[string]bool   // charge id -> refunded
	requests int
	slowOnce map[string]bool // orders whose first charge times out after it is taken
}

func (p *payments) charge(key string, o Order) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	id, ok := p.charges[key]
	if !ok {
		id = fmt.Sprintf("ch_%d", len(p.charges)+1)
		p.charges[key] = id
	}
	if p.slowOnce[o.ID] {
		delete(p.slowOnce, o.ID)
		return id, false // taken, but the answer never arrives
	}
	return id, true
}

func (p *payments) lookup(key string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.charges[key]
	return id, ok
}

func (p *payments) refund(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refunded[id] = true
}

func checkout(p *payments) *salvage.Pipeline {
	charge := salvage.Tool{
		Name:   "charge",
		System: "payments",
		Effect: &salvage.SideEffect{
			Reversible:   true,
			Compensation: "refund",
			// Asked before anything else when a charge's outcome is unknown.
			Verify: func(ctx context.Context, key string) (salvage.Verification, error) {
				id, ok := p.lookup(key)
				return salvage.Verification{Applied: ok, ResourceID: id, Output: json.RawMessage(`"` + id + `"`)}, nil
			},
		},
		Call: func(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
			var o Order
			if err := json.Unmarshal(c.Input, &o); err != nil {
				return salvage.ToolResult{}, salvage.Permanent(400, err)
			}
			id, answered := p.charge(c.IdempotencyKey, o)
			if !answered {
				return salvage.ToolResult{}, salvage.Timeout(errors.New("payments: no answer in 5s"))
			}
			return salvage.ToolResult{Output: json.RawMessage(`"` + id + `"`), ResourceID: id}, nil
		},
	}
	refund := salvage.Tool{
		Name:   "refund",
		System: "payments",
		Call: func(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
			var in salvage.CompensationInput // the charge's key and output
			if err := json.Unmarshal(c.Input, &in); err != nil {
				return salvage.ToolResult{}, salvage.Permanent(400, err)
			}
			var id string
			if err := json.Unmarshal(in.Output, &id); err != nil {
				return salvage.ToolResult{}, salvage.Permanent(400, err)
			}
			p.refund(id)
			return salvage.ToolResult{Output: json.RawMessage(`"refunded"`)}, nil
		},
	}
	ship := salvage.Tool{
		Name:   "book-shipping",
		System: "shipping",
		Call: func(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
			var o Order
			if err := json.Unmarshal(c.Input, &o); err != nil || o.Address == "" {
				return salvage.ToolResult{}, salvage.Permanent(422, fmt.Errorf("shipping: order %s has no address", o.ID))
			}
			return salvage.ToolResult{Output: json.RawMessage(`"booked"`)}, nil
		},
	}
	call := func(tool string) func(context.Context, *salvage.Turn) (any, error) {
		return func(ctx context.Context, t *salvage.Turn) (any, error) {
			return t.Tool(ctx, tool, t.Input)
		}
	}
	return &salvage.Pipeline{
		Name: "checkout",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var orders []json.RawMessage
			if err := json.Unmarshal(in, &orders); err != nil || len(orders) == 0 {
				return nil, fmt.Errorf("%w: want a JSON array of orders", salvage.ErrBadInput)
			}
			return orders, nil
		},
		Stages: []salvage.Stage{
			{Name: "pay", Agents: []salvage.Agent{{Name: "cashier", Run: call("charge")}}},
			{Name: "ship", Agents: []salvage.Agent{{Name: "shipper", Run: call("book-shipping")}}},
		},
		Tools: []salvage.Tool{charge, refund, ship},
	}
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "checkout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := natsconf.StartServer(natsconf.ServerConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}

	p := &payments{charges: map[string]string{}, refunded: map[string]bool{}, slowOnce: map[string]bool{"o-2": true}}
	client, err := salvage.NewClient(js, &salvage.Config{
		Pipelines: []*salvage.Pipeline{checkout(p)},
		RetryBase: 10 * time.Millisecond, // tier 1 waits briefly in this example
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer client.Stop(context.Background())

	orders := []Order{{"o-1", 1200, "1 Main St"}, {"o-2", 800, "2 High St"}, {"o-3", 4500, ""}}
	id, err := client.JobSubmit(ctx, "checkout", orders, nil)
	if err != nil {
		return err
	}
	job, err := client.JobWait(ctx, id)
	if err != nil {
		return err
	}
	fmt.Printf("job %s: %d done, %d dead-lettered\n", job.Status, job.Summary.Done, job.Summary.DeadLettered)

	// The failed order's envelope: the orchestrator refunds its charge.
	for {
		list, err := client.EnvelopeList(ctx, salvage.EnvelopeFilter{Job: id}, nil)
		if err != nil {
			return err
		}
		if len(list.Envelopes) == 1 && list.Envelopes[0].Status.Final() {
			e := list.Envelopes[0]
			fmt.Printf("chunk %d: %s, %s\n", e.Chunk, e.Category, e.Status)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Printf("payments: %d requests, %d charges, %d refunded\n", p.requests, len(p.charges), len(p.refunded))
	return nil
}
