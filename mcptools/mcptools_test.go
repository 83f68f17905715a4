package mcptools_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/mcptools"
	"github.com/salvagehq/salvage/recovery"
)

// shop is a real MCP server (the SDK's, over its in-memory transport)
// with a read-only lookup, an idempotent update that declares an
// idempotency key, a destructive refund with a status and a cancel tool,
// a tool that answers with an error and one that never answers.
type shop struct {
	mu      sync.Mutex
	refunds map[string]int // idempotency key -> refunds made
	metas   []string       // idempotency keys seen in _meta
	args    []string       // idempotency keys seen as arguments
}

func boolp(b bool) *bool { return &b }

func (s *shop) serve(t *testing.T) *mcp.ClientSession {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "shop server", Version: "1"}, nil)
	obj := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props}
	}
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
	srv.AddTool(&mcp.Tool{Name: "lookup", InputSchema: obj(nil), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(req)
			return &mcp.CallToolResult{StructuredContent: map[string]any{"customer": "c-1", "tier": "gold"}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "update-address", InputSchema: obj(map[string]any{"idempotency_key": map[string]any{"type": "string"}}),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: boolp(false)}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(req)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "address updated"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "issue-refund", InputSchema: obj(nil), Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(true)}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(req)
			key, _ := req.Params.Meta[mcptools.MetaIdempotencyKey].(string)
			s.mu.Lock()
			s.refunds[key]++
			s.mu.Unlock()
			return &mcp.CallToolResult{StructuredContent: map[string]any{"refund": "rf-" + key}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "refund-status", InputSchema: obj(map[string]any{"idempotency_key": map[string]any{"type": "string"}}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			args := record(req)
			key, _ := args[mcptools.IdempotencyArgument].(string)
			s.mu.Lock()
			n := s.refunds[key]
			s.mu.Unlock()
			return &mcp.CallToolResult{StructuredContent: map[string]any{"applied": n > 0, "resource_id": "rf-" + key}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "cancel-refund", InputSchema: obj(nil)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(req)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "cancelled"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "close-account", InputSchema: obj(nil)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(req)
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "account has open orders"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "slow", InputSchema: obj(nil), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "salvage-test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestAnnotationsDecideEachToolsBehaviour converts a real server's tools
// and calls each: read-only tools are pure calls, an idempotent one is a
// side effect repeated when unknown, a destructive one is verified with
// its status tool and compensated with its cancel tool; the idempotency
// key reaches the server in _meta, and as an argument where the schema
// declares one; an isError answer is permanent, a deadline a timeout, a
// lost session transient.
func TestAnnotationsDecideEachToolsBehaviour(t *testing.T) {
	s := &shop{refunds: map[string]int{}}
	cs := s.serve(t)
	ctx := context.Background()
	tools, err := mcptools.Tools(ctx, cs, mcptools.Options{Tools: map[string]mcptools.ToolOptions{
		"issue-refund": {Verify: "refund-status", Compensation: "cancel-refund"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]salvage.Tool{}
	for _, tool := range tools {
		byName[tool.Name] = tool
		if tool.System != "shop-server" {
			t.Errorf("%s: system %q, want the server's name as a token", tool.Name, tool.System)
		}
	}
	// They register as a pipeline's tools: every side effect verifiable,
	// the compensation among them.
	if _, err := recovery.NewTools(tools...); err != nil {
		t.Fatalf("register: %v", err)
	}
	for _, tc := range []struct {
		name       string
		pure       bool
		reversible bool
	}{
		{"lookup", true, false}, {"refund-status", true, false}, {"slow", true, false},
		{"update-address", false, false}, {"issue-refund", false, true}, {"cancel-refund", false, false}, {"close-account", false, false},
	} {
		tool, ok := byName[tc.name]
		if !ok {
			t.Fatalf("%s not converted (have %v)", tc.name, tools)
		}
		if (tool.Effect == nil) != tc.pure || (tool.Effect != nil && tool.Effect.Reversible != tc.reversible) {
			t.Errorf("%s: effect %+v; want pure %v, reversible %v", tc.name, tool.Effect, tc.pure, tc.reversible)
		}
	}
	if c := byName["issue-refund"].Effect.Compensation; c != "cancel-refund" {
		t.Errorf("issue-refund's compensation = %q", c)
	}

	call := func(name, key string) (salvage.ToolResult, error) {
		return byName[name].Call(ctx, salvage.ToolCall{IdempotencyKey: key, Input: json.RawMessage(`{"order":"o-1"}`)})
	}
	if res, err := call("lookup", "k-lookup"); err != nil || string(res.Output) != `{"customer":"c-1","tier":"gold"}` {
		t.Errorf("lookup = %s, %v; want its structured content", res.Output, err)
	}
	if res, err := call("update-address", "k-update"); err != nil || string(res.Output) != `"address updated"` {
		t.Errorf("update-address = %s, %v; want its text", res.Output, err)
	}
	if _, err := call("issue-refund", "k-refund"); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	metas, args := append([]string(nil), s.metas...), append([]string(nil), s.args...)
	s.mu.Unlock()
	if len(metas) != 3 || metas[2] != "k-refund" || len(args) != 1 || args[0] != "k-update" {
		t.Errorf("keys in _meta %v, as arguments %v; want all three in _meta, update-address's as an argument too", metas, args)
	}

	// Verification: the refund took effect; another key did not; the
	// idempotent update may simply be made again.
	if v, err := byName["issue-refund"].Effect.Verify(ctx, "k-refund"); err != nil || !v.Applied || v.ResourceID != "rf-k-refund" {
		t.Errorf("verify k-refund = %+v, %v; want applied", v, err)
	}
	if v, err := byName["issue-refund"].Effect.Verify(ctx, "k-other"); err != nil || v.Applied {
		t.Errorf("verify k-other = %+v, %v; want not applied", v, err)
	}
	if v, err := byName["update-address"].Effect.Verify(ctx, "k-update"); err != nil || v.Applied {
		t.Errorf("verify of an idempotent tool = %+v, %v; want not applied: repeat it", v, err)
	}
	if _, err := byName["close-account"].Effect.Verify(ctx, "k"); err == nil {
		t.Error("verify of a destructive tool with no verify tool answered; want an error, so its unknown outcome goes to a person")
	}

	// Errors by kind.
	if _, err := call("close-account", "k-close"); !errors.Is(err, salvage.ErrPermanent) {
		t.Errorf("an isError answer: %v; want permanent", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = byName["slow"].Call(short, salvage.ToolCall{IdempotencyKey: "k-slow", Input: json.RawMessage(`{}`)})
	cancel()
	if !errors.Is(err, salvage.ErrTimeout) {
		t.Errorf("a call past its deadline: %v; want a timeout", err)
	}
	if _, err := byName["lookup"].Call(ctx, salvage.ToolCall{Input: json.RawMessage(`[1]`)}); !errors.Is(err, salvage.ErrPermanent) {
		t.Errorf("an input that is not an object: %v; want permanent", err)
	}
	_ = cs.Close()
	if _, err := call("lookup", "k-lost"); !errors.Is(err, salvage.ErrTransient) {
		t.Errorf("a call on a lost session: %v; want transient", err)
	}
}

// TestOptionsNamingMissingToolsAreRefused: a verify or compensation tool
// the server does not list is an error, not a silent pure call.
func TestOptionsNamingMissingToolsAreRefused(t *testing.T) {
	cs := (&shop{refunds: map[string]int{}}).serve(t)
	_, err := mcptools.Tools(context.Background(), cs, mcptools.Options{Tools: map[string]mcptools.ToolOptions{
		"issue-refund": {Verify: "no-such-tool"},
	}})
	if !errors.Is(err, mcptools.ErrNoTool) {
		t.Errorf("Tools = %v; want ErrNoTool", err)
	}
	if _, err := mcptools.Tools(context.Background(), cs, mcptools.Options{Only: []string{"nope"}}); !errors.Is(err, mcptools.ErrNoTool) {
		t.Errorf("Only naming a missing tool: %v; want ErrNoTool", err)
	}
}
