package mcptools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/mcptools"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// tools converts the shop's tools with o and returns them by name.
func tools(t *testing.T, srv *mcptools.Server, o mcptools.Options) map[string]salvage.Tool {
	t.Helper()
	ts, err := srv.Tools(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]salvage.Tool{}
	for _, tool := range ts {
		byName[tool.Name] = tool
	}
	// They register as a pipeline's tools: every side effect
	// verifiable, every compensation among them.
	if _, err := recovery.NewTools(ts...); err != nil {
		t.Fatalf("register: %v", err)
	}
	return byName
}

var refundOptions = mcptools.Options{Tools: map[string]mcptools.ToolOptions{
	"issue-refund": {Verify: "refund-status", Compensation: "cancel-refund"},
}}

// TestAnnotationsDecideEachToolsBehaviour: each combination of
// annotations, and each override, gives the kind of call the package
// documents, over the in-memory transport and streamable HTTP.
func TestAnnotationsDecideEachToolsBehaviour(t *testing.T) {
	each(t, func(t *testing.T, _ *shop, tr transport) {
		srv := dial(t, tr)
		ctx := context.Background()
		const (
			pure = iota
			repeat
			verified
			person
		)
		for _, o := range []struct {
			name string
			opts mcptools.Options
			want map[string][2]int // tool -> kind, reversible (1)
		}{
			{"annotations", refundOptions, map[string][2]int{
				"lookup":         {pure},   // readOnlyHint
				"update-address": {repeat}, // idempotentHint, not destructive
				"purge-cache":    {repeat}, // destructiveHint and idempotentHint
				"issue-refund":   {verified, 1},
				"add-note":       {person}, // not destructive, not idempotent
				"cancel-refund":  {person}, // no annotations: the spec's defaults
				"close-account":  {person},
			}},
			{"overrides", mcptools.Options{Tools: map[string]mcptools.ToolOptions{
				"lookup":        {ReadOnly: boolp(false), Verify: "refund-status"},
				"add-note":      {Idempotent: boolp(true)},
				"purge-cache":   {Idempotent: boolp(false)},
				"cancel-refund": {ReadOnly: boolp(true)},
			}}, map[string][2]int{
				"lookup": {verified}, "add-note": {repeat}, "purge-cache": {person}, "cancel-refund": {pure},
			}},
		} {
			t.Run(o.name, func(t *testing.T) {
				byName := tools(t, srv, o.opts)
				for name, want := range o.want {
					tool, ok := byName[name]
					if !ok {
						t.Fatalf("%s not converted", name)
					}
					if tool.System != "shop-server" {
						t.Errorf("%s: system %q, want the server's name as a token", name, tool.System)
					}
					kind := pure
					if e := tool.Effect; e != nil {
						if (want[1] == 1) != e.Reversible {
							t.Errorf("%s: reversible %v, want %v", name, e.Reversible, want[1] == 1)
						}
						v, err := e.Verify(ctx, "k-never-made")
						switch {
						case err != nil:
							kind = person
						case v.Applied:
							t.Errorf("%s: a key never used verified as applied", name)
						case name == "lookup" || name == "issue-refund":
							kind = verified // asked the verify tool, which said no
						default:
							kind = repeat
						}
					}
					if kind != want[0] {
						t.Errorf("%s: kind %d, want %d (0 pure, 1 repeated, 2 verified, 3 left to a person)", name, kind, want[0])
					}
				}
			})
		}
		if c := tools(t, srv, refundOptions)["issue-refund"].Effect.Compensation; c != "cancel-refund" {
			t.Errorf("issue-refund's compensation = %q", c)
		}
	})
}

// TestCallsCarryKeysAndResults: the key reaches the server in _meta and,
// where the schema declares it, as an argument; structured content is
// the output, else the text; reported usage reaches the result; a
// refund verifies as applied under its key only.
func TestCallsCarryKeysAndResults(t *testing.T) {
	each(t, func(t *testing.T, s *shop, tr transport) {
		byName := tools(t, dial(t, tr), refundOptions)
		ctx := context.Background()
		call := func(name, key string) (salvage.ToolResult, error) {
			return byName[name].Call(ctx, salvage.ToolCall{IdempotencyKey: key, Input: json.RawMessage(`{"order":"o-1"}`)})
		}
		for _, c := range []struct {
			tool, key, out string
			usage          *salvage.Usage
		}{
			{"lookup", "k-lookup", `{"customer":"c-1","tier":"gold"}`, nil},
			{"update-address", "k-update", `"address updated"`, nil},
			{"issue-refund", "k-refund", `{"refund":"rf-k-refund"}`, nil},
			{"summarize", "k-sum", `"a summary"`, &salvage.Usage{Model: streams.Clip("m-1"+strings.Repeat("x", 1000), 256), PromptTokens: 120, CompletionTokens: 34}},
		} {
			res, err := call(c.tool, c.key)
			if err != nil || string(res.Output) != c.out {
				t.Errorf("%s = %s, %v; want %s", c.tool, res.Output, err, c.out)
			}
			if (res.Usage == nil) != (c.usage == nil) || (c.usage != nil && *res.Usage != *c.usage) {
				t.Errorf("%s: usage %+v, want %+v", c.tool, res.Usage, c.usage)
			}
		}
		s.mu.Lock()
		metas, args := append([]string(nil), s.metas...), append([]string(nil), s.args...)
		s.mu.Unlock()
		if len(metas) != 4 || metas[2] != "k-refund" || len(args) != 1 || args[0] != "k-update" {
			t.Errorf("keys in _meta %v, as arguments %v; want all four in _meta, update-address's as an argument too", metas, args)
		}
		// A compensation's argument is the key of the effect it undoes;
		// its own key is in _meta.
		in, _ := json.Marshal(salvage.CompensationInput{Key: "k-refund", Output: json.RawMessage(`{"refund":"rf-k-refund"}`)})
		if _, err := byName["cancel-refund"].Call(ctx, salvage.ToolCall{IdempotencyKey: "k-cancel", Input: in}); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		metas, args = s.metas[len(s.metas)-1:], s.args[len(s.args)-1:]
		s.mu.Unlock()
		if metas[0] != "k-cancel" || args[0] != "k-refund" {
			t.Errorf("compensation: key in _meta %s, as argument %s; want its own key k-cancel in _meta, the refund's k-refund as the argument", metas[0], args[0])
		}
		if v, err := byName["issue-refund"].Effect.Verify(ctx, "k-refund"); err != nil || !v.Applied || v.ResourceID != "rf-k-refund" {
			t.Errorf("verify k-refund = %+v, %v; want applied", v, err)
		}
		if v, err := byName["issue-refund"].Effect.Verify(ctx, "k-other"); err != nil || v.Applied {
			t.Errorf("verify k-other = %+v, %v; want not applied", v, err)
		}
	})
}

// TestErrorsByKind: every way a call can fail maps to the class the
// package documents, and whether Salvage must verify its outcome.
func TestErrorsByKind(t *testing.T) {
	each(t, func(t *testing.T, _ *shop, tr transport) {
		srv := dial(t, tr)
		byName := tools(t, srv, refundOptions)
		for _, c := range []struct {
			name    string
			tool    string
			input   string
			timeout time.Duration
			class   salvagetype.Class
			unknown bool // its outcome must be verified
			skip    bool
		}{
			{name: "isError answer", tool: "close-account", input: `{}`, class: salvagetype.ClassPermanent},
			{name: "past the deadline", tool: "slow", input: `{}`, timeout: 100 * time.Millisecond, class: salvagetype.ClassTimeout, unknown: true},
			{name: "input not an object", tool: "lookup", input: `[1]`, class: salvagetype.ClassPermanent},
			{name: "usage not a count", tool: "bad-usage", input: `{}`, class: salvagetype.ClassPermanent, unknown: true},
			{name: "429 with Retry-After", tool: "busy", input: `{}`, class: salvagetype.ClassRateLimited, skip: !tr.limits},
			{name: "503 from a proxy", tool: "flaky", input: `{}`, class: salvagetype.ClassTransient, unknown: true, skip: !tr.limits},
		} {
			t.Run(c.name, func(t *testing.T) {
				if c.skip {
					t.Skip("only a streamable HTTP server answers with an HTTP status")
				}
				ctx := context.Background()
				if c.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
					defer cancel()
				}
				_, err := byName[c.tool].Call(ctx, salvage.ToolCall{IdempotencyKey: "k-" + c.tool, Input: json.RawMessage(c.input)})
				if got := recovery.ClassOf(err); err == nil || got != c.class {
					t.Fatalf("%s: %v (class %v); want %v", c.tool, err, got, c.class)
				}
				if got := recovery.OutcomeUnknown(err); got != c.unknown {
					t.Errorf("%s: outcome unknown %v, want %v (%v)", c.tool, got, c.unknown, err)
				}
				if c.tool == "bad-usage" && !errors.Is(err, salvage.ErrBadUsage) {
					t.Errorf("bad usage: %v; want ErrBadUsage", err)
				}
				var ce *salvage.CallError
				if c.class == salvagetype.ClassRateLimited && (!errors.As(err, &ce) || ce.RetryAfter != 7*time.Second) {
					t.Errorf("429: %v; want the server's Retry-After of 7s", err)
				}
			})
		}
		// Options.Classify decides what an isError answer means.
		classified := tools(t, srv, mcptools.Options{Only: []string{"close-account", "lookup"},
			Classify: func(tool string, res *mcp.CallToolResult) error {
				if tool == "close-account" && len(res.Content) == 1 {
					return salvage.NotApplied(salvage.RateLimited(3*time.Second, errors.New("the account service asks to wait")))
				}
				return nil
			}})
		_, err := classified["close-account"].Call(context.Background(), salvage.ToolCall{IdempotencyKey: "k-c", Input: json.RawMessage(`{}`)})
		var ce *salvage.CallError
		if !errors.As(err, &ce) || recovery.ClassOf(err) != salvagetype.ClassRateLimited || ce.RetryAfter != 3*time.Second {
			t.Errorf("an isError answer the classifier calls rate-limited: %v", err)
		}
		// Options.Timeout bounds a call whose context has no deadline.
		bounded, err := srv.Tools(context.Background(), mcptools.Options{Only: []string{"slow"}, Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bounded[0].Call(context.Background(), salvage.ToolCall{IdempotencyKey: "k-bounded", Input: json.RawMessage(`{}`)}); !errors.Is(err, salvage.ErrTimeout) {
			t.Errorf("a call past Options.Timeout: %v; want a timeout", err)
		}
		// A tool the server stopped listing: refused before it ran.
		tr.srv.RemoveTools("add-note")
		_, err = byName["add-note"].Call(context.Background(), salvage.ToolCall{IdempotencyKey: "k-note", Input: json.RawMessage(`{}`)})
		if recovery.ClassOf(err) != salvagetype.ClassPermanent || recovery.OutcomeUnknown(err) {
			t.Errorf("a tool the server no longer has: %v (class %v); want permanent, not applied", err, recovery.ClassOf(err))
		}
	})
}

// TestALostSessionIsReconnected: the server forgets the session (its
// process or handler restarted); the call that finds it lost fails
// transient, so its outcome is verified, and a later call runs on a new
// session. Over streamable HTTP the server says so before it runs the
// call (404, session not found): the same call goes on a new session and
// succeeds, and no call fails.
func TestALostSessionIsReconnected(t *testing.T) {
	each(t, func(t *testing.T, s *shop, tr transport) {
		byName := tools(t, dial(t, tr), refundOptions)
		ctx := context.Background()
		lookup := func() error {
			_, err := byName["lookup"].Call(ctx, salvage.ToolCall{IdempotencyKey: "k", Input: json.RawMessage(`{}`)})
			return err
		}
		if err := lookup(); err != nil {
			t.Fatal(err)
		}
		before := s.sessions.Load()
		tr.lose()
		if tr.name == "streamable-http" {
			if err := lookup(); err != nil {
				t.Fatalf("the first call after the server forgot the session: %v; want it made on a new session", err)
			}
			if got := s.sessions.Load(); got != before+1 {
				t.Errorf("sessions %d after the loss, want %d: one new session", got, before+1)
			}
			return
		}
		failed := 0
		var last error
		salvagetest.Eventually(t, time.Minute, func() bool {
			if last = lookup(); last == nil {
				return true
			}
			failed++
			if !errors.Is(last, salvage.ErrTransient) {
				t.Fatalf("a call on a lost session: %v; want transient", last)
			}
			return false
		}, "a call to succeed after the session was lost (%d failed, the last: %v)", &failed, &last)
		if got := s.sessions.Load(); got != before+1 {
			t.Errorf("sessions %d after the loss, want %d: one new session", got, before+1)
		}
	})
}

// TestOptionsNamingMissingToolsAreRefused: a verify or compensation tool
// the server does not list is an error, not a silent pure call.
func TestOptionsNamingMissingToolsAreRefused(t *testing.T) {
	s := &shop{refunds: map[string]int{}}
	srv := dial(t, inMemory(t, s))
	ctx := context.Background()
	if _, err := srv.Tools(ctx, mcptools.Options{Tools: map[string]mcptools.ToolOptions{"issue-refund": {Verify: "no-such-tool"}}}); !errors.Is(err, mcptools.ErrNoTool) {
		t.Errorf("Tools = %v; want ErrNoTool", err)
	}
	if _, err := srv.Tools(ctx, mcptools.Options{Only: []string{"nope"}}); !errors.Is(err, mcptools.ErrNoTool) {
		t.Errorf("Only naming a missing tool: %v; want ErrNoTool", err)
	}
	_ = srv.Close()
	if _, err := srv.Tools(ctx, mcptools.Options{}); !errors.Is(err, mcptools.ErrClosed) {
		t.Errorf("Tools after Close: %v; want ErrClosed", err)
	}
}

// gatedTransport holds each Connect until its gate opens, as a server
// slow to start would.
type gatedTransport struct {
	mcp.Transport
	gate     <-chan struct{}
	entering *atomic.Int32
}

func (g gatedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	g.entering.Add(1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Transport.Connect(ctx)
}

// TestASlowReconnectHoldsNoCallPastItsDeadline: while one call connects a
// new session to a server slow to start, another call waits only as long
// as its own context lets it, and fails not applied: it was never sent.
// Once the session is up, calls go through it.
func TestASlowReconnectHoldsNoCallPastItsDeadline(t *testing.T) {
	s := &shop{refunds: map[string]int{}}
	tr := inMemory(t, s)
	gate := make(chan struct{})
	var gated atomic.Bool
	var entering atomic.Int32
	srv := dial(t, transport{dial: func() mcp.Transport {
		inner := tr.dial()
		if !gated.Load() {
			return inner
		}
		return gatedTransport{Transport: inner, gate: gate, entering: &entering}
	}})
	lookup := tools(t, srv, mcptools.Options{Only: []string{"lookup"}})["lookup"]
	call := func(ctx context.Context) error {
		_, err := lookup.Call(ctx, salvage.ToolCall{IdempotencyKey: "k", Input: json.RawMessage(`{}`)})
		return err
	}
	gated.Store(true)
	tr.lose()
	// Calls fail on the lost session until one sees it lost and dials.
	first := make(chan error, 1)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for ; ; <-tick.C {
			err := call(context.Background())
			if err == nil || entering.Load() > 0 {
				first <- err
				return
			}
		}
	}()
	salvagetest.Eventually(t, time.Minute, func() bool { return entering.Load() > 0 }, "no call began to connect")
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := call(short)
	cancel()
	if !errors.Is(err, salvage.ErrTimeout) || recovery.OutcomeUnknown(err) {
		t.Errorf("a call waiting for another's dial past its deadline: %v; want a timeout, not applied", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the dialling call returned before its server started: %v", err)
	default:
	}
	close(gate)
	if err := <-first; err != nil {
		t.Errorf("the dialling call: %v", err)
	}
	if err := call(context.Background()); err != nil {
		t.Errorf("a call on the new session: %v", err)
	}
}

// TestListingsAndNamesAreBounded: a server listing more than MaxTools
// tools is refused, not read without end, and a long server name makes
// a breaker system of at most 64 bytes of token characters.
func TestListingsAndNamesAreBounded(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "a very / long: name " + strings.Repeat("x", 200), Version: "1"}, nil)
	h := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}
	srv.AddTool(&mcp.Tool{Name: "t-0", InputSchema: obj(nil), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, h)
	connect := func() mcp.Transport {
		st, ct := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(context.Background(), st, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ss.Close() })
		return ct
	}
	s := dial(t, transport{dial: connect})
	ts := tools(t, s, mcptools.Options{})
	if sys := ts["t-0"].System; len(sys) > 64 || sys != "a-very-long-name-"+strings.Repeat("x", 47) {
		t.Errorf("system %q (%d bytes); want the name as a token, cut to 64", sys, len(sys))
	}
	for i := 1; i <= mcptools.MaxTools; i++ {
		srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("t-%d", i), InputSchema: obj(nil)}, h)
	}
	if _, err := s.Tools(context.Background(), mcptools.Options{}); !errors.Is(err, mcptools.ErrTooManyTools) {
		t.Errorf("a listing of %d tools: %v; want ErrTooManyTools", mcptools.MaxTools+1, err)
	}
}
