package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage/mcptools"
)

// Order is one chunk's input: who is refunded how much, and where the
// news goes.
type Order struct {
	ID      string `json:"id"`
	Cents   int    `json:"cents"`
	Email   string `json:"email"`
	Address string `json:"address,omitempty"`
}

// entry is one line of the shop's ledger: what it did, by idempotency key.
type entry struct {
	Op        string `json:"op"` // refund, cancel, address, notify
	Key       string `json:"key"`
	Order     string `json:"order,omitempty"`
	Cents     int    `json:"cents,omitempty"`
	RefundID  string `json:"refund_id,omitempty"`
	RefundKey string `json:"refund_key,omitempty"` // a cancel's refund
	PID       int    `json:"pid"`
}

// ledger is the shop's durable record, a file of JSON lines appended and
// synced before a tool answers: the effects survive the server's death,
// and every server process on the same file sees them.
type ledger struct {
	mu   sync.Mutex
	path string
}

func (l *ledger) append(e entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.PID = os.Getpid()
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		return err
	}
	return f.Sync()
}

// readLedger returns every entry in path; a torn last line (a process
// killed mid-write) is skipped.
func readLedger(path string) ([]entry, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []entry
	for line := range strings.SplitSeq(string(data), "\n") {
		var e entry
		if json.Unmarshal([]byte(line), &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// shopServer is the MCP server: a read-only lookup that reports the
// tokens it spent, an idempotent address update, a destructive refund
// (which, like many payment APIs, does not deduplicate by key) with a
// status tool and a cancel tool, and a notification that refuses an
// order with no e-mail. hang names orders (comma-separated) whose first
// refund is taken and then never answered, as by a server that dies
// mid-call.
func shopServer(l *ledger, hang string) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
	addOrderTools(srv, l)
	addRefundTools(srv, l, hang)
	return srv
}

// callKey is the idempotency key a call carries in its _meta.
func callKey(req *mcp.CallToolRequest) string {
	k, _ := req.Params.Meta[mcptools.MetaIdempotencyKey].(string)
	return k
}

// orderOf reads a call's order.
func orderOf(req *mcp.CallToolRequest) (Order, error) {
	var o Order
	if err := json.Unmarshal(req.Params.Arguments, &o); err != nil || o.ID == "" {
		return o, fmt.Errorf("want an order {\"id\", \"cents\", \"email\"}: %v", err)
	}
	return o, nil
}

// text is a result of one line of text.
func text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// failed is a tool's error as MCP reports it: a result, not a protocol
// error.
func failed(err error) *mcp.CallToolResult {
	r := text("%v", err)
	r.IsError = true
	return r
}

// orderSchema is the input schema of a tool that takes an order, with
// the idempotency argument when withKey.
func orderSchema(withKey bool) map[string]any {
	props := map[string]any{"id": map[string]any{"type": "string"}, "cents": map[string]any{"type": "integer"},
		"email": map[string]any{"type": "string"}, "address": map[string]any{"type": "string"}}
	if withKey {
		props[mcptools.IdempotencyArgument] = map[string]any{"type": "string"}
	}
	return map[string]any{"type": "object", "properties": props}
}

// addOrderTools adds the tools on an order: the lookup, the address
// update and the notification.
func addOrderTools(srv *mcp.Server, l *ledger) {
	f := false
	srv.AddTool(&mcp.Tool{Name: "lookup-order", Description: "Read an order's customer and amount.", InputSchema: orderSchema(false),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			o, err := orderOf(req)
			if err != nil {
				return failed(err), nil
			}
			return &mcp.CallToolResult{
				StructuredContent: map[string]any{"order": o.ID, "cents": o.Cents, "customer": "cust-" + o.ID},
				// A lookup that asks a model reports what it spent.
				Meta: mcp.Meta{mcptools.MetaUsage: map[string]any{"model": "shop-classifier", "prompt_tokens": 40, "completion_tokens": 8}},
			}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "update-address", Description: "Set an order's address; setting it twice is harmless.", InputSchema: orderSchema(true),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &f}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			o, err := orderOf(req)
			if err != nil {
				return failed(err), nil
			}
			if err := l.append(entry{Op: "address", Key: callKey(req), Order: o.ID}); err != nil {
				return nil, err
			}
			return text("address of %s set", o.ID), nil
		})
	srv.AddTool(&mcp.Tool{Name: "notify-customer", Description: "E-mail the customer that the refund is on its way.", InputSchema: orderSchema(false),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &f}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			o, err := orderOf(req)
			if err != nil {
				return failed(err), nil
			}
			if o.Email == "" {
				return failed(fmt.Errorf("order %s has no e-mail on file", o.ID)), nil
			}
			if err := l.append(entry{Op: "notify", Key: callKey(req), Order: o.ID}); err != nil {
				return nil, err
			}
			return text("%s notified", o.Email), nil
		})
}

// addRefundTools adds the refund, its status and its cancellation.
func addRefundTools(srv *mcp.Server, l *ledger, hang string) {
	t := true
	srv.AddTool(&mcp.Tool{Name: "issue-refund", Description: "Refund an order. Not deduplicated: each call pays out.", InputSchema: orderSchema(false),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &t}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			o, err := orderOf(req)
			if err != nil {
				return failed(err), nil
			}
			before, err := readLedger(l.path)
			if err != nil {
				return nil, err
			}
			id := fmt.Sprintf("rf-%s-%d", o.ID, time.Now().UnixNano())
			if err := l.append(entry{Op: "refund", Key: callKey(req), Order: o.ID, Cents: o.Cents, RefundID: id}); err != nil {
				return nil, err
			}
			if slices.Contains(strings.Split(hang, ","), o.ID) && count(before, "refund", o.ID) == 0 {
				// Paid out, and the answer never leaves.
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return &mcp.CallToolResult{StructuredContent: map[string]any{"refund_id": id}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "refund-status", Description: "Whether a refund with this idempotency key was made.", InputSchema: orderSchema(true),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Key string `json:"idempotency_key"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			es, err := readLedger(l.path)
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				if e.Op == "refund" && e.Key == args.Key {
					return &mcp.CallToolResult{StructuredContent: map[string]any{"applied": true, "resource_id": e.RefundID}}, nil
				}
			}
			return &mcp.CallToolResult{StructuredContent: map[string]any{"applied": false}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "cancel-refund", Description: "Cancel the refund made under idempotency_key; cancelling twice is harmless.",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{
			mcptools.IdempotencyArgument: map[string]any{"type": "string"}, "output": map[string]any{"type": "object"}}},
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				Key string `json:"idempotency_key"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.Key == "" {
				return failed(fmt.Errorf("want the refund's idempotency_key: %v", err)), nil
			}
			es, err := readLedger(l.path)
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				if e.Op == "cancel" && e.RefundKey == in.Key {
					return text("already cancelled"), nil
				}
			}
			if err := l.append(entry{Op: "cancel", Key: callKey(req), RefundKey: in.Key}); err != nil {
				return nil, err
			}
			return text("cancelled"), nil
		})
}

// serveShop runs the MCP server: on stdio, or on --http.
func serveShop(args []string) error {
	fs := flag.NewFlagSet("shop", flag.ContinueOnError)
	path := fs.String("ledger", "", "the ledger file (required)")
	addr := fs.String("http", "", "serve streamable HTTP on this address (127.0.0.1:8931) at /mcp, not stdio")
	hang := fs.String("hang-refund", "", "take these orders' first refunds (comma-separated) and never answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("shop: --ledger is required")
	}
	srv := shopServer(&ledger{path: *path}, *hang)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *addr == "" {
		return srv.Run(ctx, &mcp.StdioTransport{})
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	fmt.Printf("shop: MCP on http://%s/mcp\n", ln.Addr())
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
