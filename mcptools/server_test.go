package mcptools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage/mcptools"
)

// shop is the state of a real MCP server (the SDK's) with a tool for each
// annotation combination and each way a call can end.
type shop struct {
	mu      sync.Mutex
	refunds map[string]int // idempotency key -> refunds made
	metas   []string       // idempotency keys seen in _meta
	args    []string       // idempotency keys seen as arguments
	// sessions counts the sessions the server was connected.
	sessions atomic.Int32
}

func boolp(b bool) *bool { return &b }

func obj(props map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": props}
}

var keyProp = map[string]any{"idempotency_key": map[string]any{"type": "string"}}

// server is a new mcp.Server on s's state.
func (s *shop) server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "shop server", Version: "1"}, nil)
	record := func(req *mcp.CallToolRequest) map[string]any {
		var args map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &args)
		s.mu.Lock()
		defer s.mu.Unlock()
		if k, ok := req.Params.Meta[mcptools.MetaIdempotencyKey].(string); ok {
			s.metas = append(s.metas, k)
		}
		if k, ok := args[mcptools.IdempotencyArgument].(string); ok {
			s.args = append(s.args, k)
		}
		return args
	}
	text := func(t string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: t}}}
	}
	add := func(name string, schema map[string]any, a *mcp.ToolAnnotations, h func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error)) {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: schema, Annotations: a}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(req)
			return h(ctx, req)
		})
	}
	add("lookup", obj(nil), &mcp.ToolAnnotations{ReadOnlyHint: true}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{StructuredContent: map[string]any{"customer": "c-1", "tier": "gold"}}, nil
	})
	add("summarize", obj(nil), &mcp.ToolAnnotations{ReadOnlyHint: true}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r := text("a summary")
		r.Meta = mcp.Meta{mcptools.MetaUsage: map[string]any{"model": "m-1" + strings.Repeat("x", 1000), "prompt_tokens": 120, "completion_tokens": 34}}
		return r, nil
	})
	add("bad-usage", obj(nil), &mcp.ToolAnnotations{ReadOnlyHint: true}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r := text("x")
		r.Meta = mcp.Meta{mcptools.MetaUsage: map[string]any{"prompt_tokens": "many"}}
		return r, nil
	})
	add("update-address", obj(keyProp), &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: boolp(false)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("address updated"), nil
	})
	add("issue-refund", obj(nil), &mcp.ToolAnnotations{DestructiveHint: boolp(true)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		key, _ := req.Params.Meta[mcptools.MetaIdempotencyKey].(string)
		s.mu.Lock()
		s.refunds[key]++
		s.mu.Unlock()
		return &mcp.CallToolResult{StructuredContent: map[string]any{"refund": "rf-" + key}}, nil
	})
	add("refund-status", obj(keyProp), &mcp.ToolAnnotations{ReadOnlyHint: true}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &args)
		key, _ := args[mcptools.IdempotencyArgument].(string)
		s.mu.Lock()
		n := s.refunds[key]
		s.mu.Unlock()
		return &mcp.CallToolResult{StructuredContent: map[string]any{"applied": n > 0, "resource_id": "rf-" + key}}, nil
	})
	add("cancel-refund", obj(keyProp), nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("cancelled"), nil
	})
	add("purge-cache", obj(nil), &mcp.ToolAnnotations{DestructiveHint: boolp(true), IdempotentHint: true}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("purged"), nil
	})
	add("add-note", obj(nil), &mcp.ToolAnnotations{DestructiveHint: boolp(false)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("noted"), nil
	})
	add("close-account", obj(nil), nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r := text("account has open orders")
		r.IsError = true
		return r, nil
	})
	add("slow", obj(nil), &mcp.ToolAnnotations{ReadOnlyHint: true}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	add("flaky", obj(nil), &mcp.ToolAnnotations{ReadOnlyHint: true}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("reached"), nil
	})
	add("busy", obj(nil), &mcp.ToolAnnotations{ReadOnlyHint: true}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("not busy after all"), nil
	})
	return srv
}

// transport is one way to reach the shop, with a way to lose the
// session the client holds.
type transport struct {
	name string
	// srv is the server itself.
	srv *mcp.Server
	// dial is the Transport for mcptools.Dial.
	dial mcptools.Transport
	// lose ends the server's side of every session.
	lose func()
	// limits says whether the server answers "busy" with a 429.
	limits bool
}

// inMemory reaches a new server session over the SDK's in-memory
// transport each time it is dialled.
func inMemory(t *testing.T, s *shop) transport {
	var (
		mu   sync.Mutex
		open []*mcp.ServerSession
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, ss := range open {
			_ = ss.Close()
		}
	})
	srv := s.server()
	return transport{name: "in-memory", srv: srv,
		dial: func() mcp.Transport {
			st, ct := mcp.NewInMemoryTransports()
			ss, err := srv.Connect(context.Background(), st, nil)
			if err != nil {
				t.Errorf("server connect: %v", err)
				return ct
			}
			s.sessions.Add(1)
			mu.Lock()
			open = append(open, ss)
			mu.Unlock()
			return ct
		},
		lose: func() {
			mu.Lock()
			defer mu.Unlock()
			for _, ss := range open {
				_ = ss.Close()
			}
			open = nil
		},
	}
}

// overHTTP serves the shop by streamable HTTP on loopback. A call of
// "busy" is answered 429 with Retry-After: 7, as a rate limiter in front
// of the server would, and one of "flaky" 503, as a proxy whose upstream
// is gone; lose swaps in a new handler that knows no session,
// as a restarted server would.
func overHTTP(t *testing.T, s *shop) transport {
	srv := s.server()
	newHandler := func() http.Handler {
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	}
	var h atomic.Pointer[http.Handler]
	first := newHandler()
	h.Store(&first)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if strings.Contains(string(body), `"method":"tools/call"`) && strings.Contains(string(body), `"name":"busy"`) {
				w.Header().Set("Retry-After", "7")
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return
			}
			if strings.Contains(string(body), `"method":"tools/call"`) && strings.Contains(string(body), `"name":"flaky"`) {
				http.Error(w, "upstream gone", http.StatusServiceUnavailable)
				return
			}
			if strings.Contains(string(body), `"method":"initialize"`) {
				s.sessions.Add(1)
			}
		}
		(*h.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.Close()
		// The sessions of a handler lose swapped out (a "restarted"
		// server) are nobody's to end but the server's.
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	})
	return transport{name: "streamable-http", srv: srv, dial: mcptools.StreamableHTTP(hs.URL, nil), limits: true,
		lose: func() {
			next := newHandler()
			h.Store(&next)
		}}
}

// each runs f once per transport, with a fresh shop.
func each(t *testing.T, f func(t *testing.T, s *shop, tr transport)) {
	for _, mk := range []func(*testing.T, *shop) transport{inMemory, overHTTP} {
		s := &shop{refunds: map[string]int{}}
		tr := mk(t, s)
		t.Run(tr.name, func(t *testing.T) { f(t, s, tr) })
	}
}

// dial connects to the shop through tr.
func dial(t *testing.T, tr transport) *mcptools.Server {
	t.Helper()
	srv, err := mcptools.Dial(context.Background(), tr.dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}
