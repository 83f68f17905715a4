// Package mcptools turns the tools of a Model Context Protocol server into
// salvage.Tools, so that an agent's MCP calls are journaled, retried by
// kind of failure, verified before they are repeated and compensated like
// any other tool's:
//
//	srv, err := mcptools.Dial(ctx, mcptools.Command("shop-mcp"))      // or StreamableHTTP(url, nil)
//	tools, err := srv.Tools(ctx, mcptools.Options{Tools: map[string]mcptools.ToolOptions{
//		"issue-refund": {Verify: "refund-status", Compensation: "cancel-refund"},
//	}})
//	pipeline.Tools = append(pipeline.Tools, tools...)
//
// The tool annotations decide each tool's defaults, and every one can be
// overridden by name (ToolOptions):
//
//	annotation                   Salvage treats the call as
//	readOnlyHint                 a pure call: made again when its outcome is unknown
//	idempotentHint               a side effect safe to repeat: an unknown outcome is made again
//	otherwise (destructive)      a side effect: an unknown outcome is verified with the tool
//	                             named in ToolOptions.Verify, else escalated to a person;
//	                             irreversible unless ToolOptions.Compensation names a tool
//
// Every call carries its idempotency key in the request's _meta
// (MetaIdempotencyKey), and as an argument too when the tool's input schema
// declares one (IdempotencyArgument): a server that honours it makes a
// repeated call a no-op. A result with isError is the tool's own answer: a
// permanent failure, unless Options.Classify says otherwise. A 429 from a streamable HTTP server is rate-limited,
// its Retry-After honoured; a context deadline is a timeout; a JSON-RPC
// "method not found" or "invalid params" is permanent and not applied;
// any other JSON-RPC or transport error, and a lost session, is transient
// (the Server connects a new session for the next call), except a
// streamable HTTP server's 404 for a session it forgot: it ran nothing,
// and the call is made again at once on a new session. The breaker
// system is the server's name. The journaled output is the result's
// structuredContent when present, else its text; tokens a tool reports in
// its result's _meta[MetaUsage] count toward the job's usage and budget.
//
// Only this package imports the MCP SDK: importing salvage alone does not.
package mcptools

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/streams"
)

// MetaIdempotencyKey is the _meta key of a call's idempotency key.
const MetaIdempotencyKey = "io.salvagehq/idempotency-key"

// MetaUsage is the key of a result's _meta under which a tool may report
// the tokens it spent: {"model": "…", "prompt_tokens": n,
// "completion_tokens": n}. They reach the call's journal row, the job's
// summary and its token budget.
const MetaUsage = "io.salvagehq/usage"

// IdempotencyArgument is the input property that receives the idempotency
// key when a tool's input schema declares it.
const IdempotencyArgument = "idempotency_key"

// MaxTools bounds the tools one server may list: a listing past it is
// refused (ErrTooManyTools) rather than read without end.
const MaxTools = 10_000

// ErrTooManyTools is returned for a server that lists over MaxTools tools.
var ErrTooManyTools = errors.New("mcptools: too many tools")

// ErrNoTool is returned for an option naming a tool the server does not
// list.
var ErrNoTool = errors.New("mcptools: no such tool on the server")

// Options says how a server's tools become salvage.Tools.
type Options struct {
	// System names the external system for the circuit breaker. Default
	// the server's name, made a subject token.
	System string
	// Only takes these tools; empty takes every tool the server lists.
	Only []string
	// Tools overrides the annotations' defaults, by tool name.
	Tools map[string]ToolOptions
	// Classify, when set, decides what a result with isError means: it
	// returns the error the call fails with (salvage.RateLimited,
	// salvage.Transient, salvage.Permanent, …; wrap with
	// salvage.NotApplied what surely did not take effect), or nil to keep
	// the default, permanent (422). A plain error is transient.
	Classify func(tool string, res *mcp.CallToolResult) error
	// Timeout bounds each call and each verification of a tool whose
	// ToolOptions set none. Default salvage.ServiceTimeoutDefault. A call
	// past it is a timeout: its outcome unknown, so a side effect is
	// verified before it is made again.
	Timeout time.Duration
}

// ToolOptions overrides what a tool's annotations say.
type ToolOptions struct {
	// ReadOnly, when set, says whether the tool changes nothing.
	ReadOnly *bool
	// Idempotent, when set, says whether repeating a call is harmless.
	Idempotent *bool
	// Verify names a tool of the same server that answers whether a call
	// with an idempotency key took effect: it is called with
	// {"idempotency_key": key} and answers {"applied": bool,
	// "resource_id"?: string} as structured content.
	Verify string
	// Timeout bounds each of its calls; default Options.Timeout.
	Timeout time.Duration
	// Compensation names a tool of the same server that undoes an effect.
	// Its arguments are salvage.CompensationInput: {"idempotency_key": the
	// key of the call it undoes, "output": that call's output}; its own
	// key is in _meta only.
	Compensation string
}

// Tools lists the server's tools and returns them as salvage.Tools: the
// ones Options.Only names, else all, plus the compensation tools the
// options name.
func (s *Server) Tools(ctx context.Context, o Options) ([]salvage.Tool, error) {
	cs, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	listed := map[string]*mcp.Tool{}
	var order []string
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("mcptools: list tools: %w", err)
		}
		if len(order) == MaxTools {
			return nil, fmt.Errorf("%w: the server lists over %d", ErrTooManyTools, MaxTools)
		}
		listed[t.Name] = t
		order = append(order, t.Name)
	}
	system := o.System
	if system == "" {
		system = token(s.Name())
	}
	want := o.Only
	if len(want) == 0 {
		want = order
	}
	take := map[string]bool{}
	compensations := map[string]bool{}
	for _, name := range want {
		take[name] = true
		if to, ok := o.Tools[name]; ok && to.Compensation != "" {
			// A compensation is a tool of the pipeline too.
			take[to.Compensation] = true
			compensations[to.Compensation] = true
		}
	}
	var out []salvage.Tool
	for _, name := range order {
		if !take[name] {
			continue
		}
		to := o.Tools[name]
		to.Timeout = cmp.Or(to.Timeout, o.Timeout, salvage.ServiceTimeoutDefault)
		t, err := s.convert(listed, listed[name], system, to, compensations[name], o.Classify)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
		delete(take, name)
	}
	if len(take) > 0 {
		return nil, fmt.Errorf("%w: %q", ErrNoTool, slices.Sorted(maps.Keys(take)))
	}
	return out, nil
}

// convert is one tool as a salvage.Tool.
// A compensation's input already carries idempotency_key: the key of the
// effect it undoes (salvage.CompensationInput), which its own key must
// not replace.
func (s *Server) convert(listed map[string]*mcp.Tool, t *mcp.Tool, system string, to ToolOptions, compensation bool,
	classify func(string, *mcp.CallToolResult) error) (salvage.Tool, error) {
	readOnly, idempotent := false, false
	if a := t.Annotations; a != nil {
		readOnly, idempotent = a.ReadOnlyHint, a.IdempotentHint
	}
	if to.ReadOnly != nil {
		readOnly = *to.ReadOnly
	}
	if to.Idempotent != nil {
		idempotent = *to.Idempotent
	}
	keyArg := declares(t.InputSchema, IdempotencyArgument) && !compensation
	tool := salvage.Tool{Name: t.Name, System: system, Call: s.caller(t.Name, keyArg, to.Timeout, classify)}
	if readOnly {
		return tool, nil
	}
	for _, name := range []string{to.Verify, to.Compensation} {
		if name != "" && listed[name] == nil {
			return tool, fmt.Errorf("%w: %q (named by %s's options)", ErrNoTool, name, t.Name)
		}
	}
	tool.Effect = &salvage.SideEffect{Reversible: to.Compensation != "", Compensation: to.Compensation,
		Verify: s.verifier(t.Name, to.Verify, idempotent, to.Timeout)}
	return tool, nil
}

// callTool makes one tools/call on a live session, its failure
// classified. A server that answers that it does not know the session
// (streamable HTTP's 404: its process restarted) ran nothing: the session
// is dropped and the call made once more on a new one, so a restarted
// server costs a reconnect, not a failed call and a breaker's count.
func (s *Server) callTool(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	for attempt := 0; ; attempt++ {
		cs, err := s.current(ctx)
		if err != nil {
			return nil, err
		}
		callCtx, wait := withWaitNote(ctx)
		res, err := cs.CallTool(callCtx, p)
		if err == nil {
			return res, nil
		}
		if errors.Is(err, mcp.ErrSessionMissing) {
			s.drop(cs)
			if attempt == 0 && ctx.Err() == nil {
				continue
			}
			return nil, salvage.NotApplied(classify(callCtx, p.Name, wait, err))
		}
		return nil, classify(callCtx, p.Name, wait, err)
	}
}

// caller makes one MCP call: the idempotency key in _meta, and in the
// arguments when the schema declares it; an isError result is classify's
// to class, permanent by default.
func (s *Server) caller(name string, keyArg bool, timeout time.Duration, classify func(string, *mcp.CallToolResult) error) func(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
	return func(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		args, err := arguments(c.Input, c.IdempotencyKey, keyArg)
		if err != nil {
			return salvage.ToolResult{}, salvage.NotApplied(salvage.Permanent(400, err))
		}
		res, err := s.callTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: mcp.Meta{MetaIdempotencyKey: c.IdempotencyKey}})
		if err != nil {
			return salvage.ToolResult{}, err
		}
		out, err := output(res)
		if err != nil {
			return salvage.ToolResult{}, salvage.Permanent(502, fmt.Errorf("mcp tool %s: %w", name, err))
		}
		if res.IsError {
			if classify != nil {
				if err := classify(name, res); err != nil {
					return salvage.ToolResult{}, err
				}
			}
			return salvage.ToolResult{}, salvage.Permanent(422, fmt.Errorf("mcp tool %s answered with an error: %s", name, streams.Clip(string(out), errorTextMax)))
		}
		usage, err := usageOf(res.Meta)
		if err != nil {
			return salvage.ToolResult{}, salvage.Permanent(502, fmt.Errorf("mcp tool %s: %w", name, err))
		}
		return salvage.ToolResult{Output: out, Usage: usage}, nil
	}
}

// verifier is a side effect's Verify: the named verify tool; for an
// idempotent tool without one, "not applied" (repeating it is harmless);
// else an error, so an unknown outcome goes to a person.
func (s *Server) verifier(name, verify string, idempotent bool, timeout time.Duration) func(ctx context.Context, key string) (salvage.Verification, error) {
	return func(ctx context.Context, key string) (salvage.Verification, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if verify == "" && idempotent {
			return salvage.Verification{}, nil
		}
		if verify == "" {
			return salvage.Verification{}, fmt.Errorf("mcp tool %s has no verify tool (mcptools.ToolOptions.Verify) and is not idempotent: its outcome stays unknown", name)
		}
		res, err := s.callTool(ctx, &mcp.CallToolParams{Name: verify, Arguments: map[string]any{IdempotencyArgument: key},
			Meta: mcp.Meta{MetaIdempotencyKey: key}})
		if err != nil {
			return salvage.Verification{}, err
		}
		if res.IsError {
			return salvage.Verification{}, fmt.Errorf("mcp verify tool %s answered with an error", verify)
		}
		var v struct {
			Applied    bool   `json:"applied"`
			ResourceID string `json:"resource_id"`
		}
		raw, err := json.Marshal(res.StructuredContent)
		if err == nil {
			err = json.Unmarshal(raw, &v)
		}
		if err != nil || res.StructuredContent == nil {
			return salvage.Verification{}, fmt.Errorf("mcp verify tool %s: want structured content {\"applied\": bool}: %v", verify, err)
		}
		return salvage.Verification{Applied: v.Applied, ResourceID: v.ResourceID}, nil
	}
}

// classify is a failed call's error. A 429 is rate-limited (its
// Retry-After kept); a deadline a timeout; a JSON-RPC answer that the
// method or its parameters are wrong is permanent and not applied (the
// server refused it before running it); anything else (another JSON-RPC
// error, a transport error, a lost session) transient, so an effect's
// outcome is verified before it is made again.
func classify(ctx context.Context, name string, wait *waitNote, err error) error {
	err = fmt.Errorf("mcp tool %s: %w", name, err)
	if after, limited := wait.get(); limited {
		return salvage.RateLimited(after, err)
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return salvage.Timeout(err)
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) && (we.Code == jsonrpc.CodeMethodNotFound || we.Code == jsonrpc.CodeInvalidParams) {
		return salvage.NotApplied(salvage.Permanent(400, err))
	}
	return salvage.Transient(503, err)
}

// usageOf reads the tokens a tool reports in its result's
// _meta[MetaUsage]; nil when it reports none.
func usageOf(meta mcp.Meta) (*salvage.Usage, error) {
	v, ok := meta[MetaUsage]
	if !ok || v == nil {
		return nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var u salvage.Usage
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		return nil, fmt.Errorf("%w: _meta[%q] is not {\"model\", \"prompt_tokens\", \"completion_tokens\"}: %v", salvage.ErrBadUsage, MetaUsage, err)
	}
	// As a NATS tool's model header is: a name, not a document.
	u.Model = streams.Clip(u.Model, modelNameMax)
	return &u, nil
}

// errorTextMax bounds how much of an isError answer its error quotes.
const errorTextMax = 1024

// modelNameMax bounds the model name a result reports.
const modelNameMax = 256

// arguments is the call's input as MCP arguments, with the idempotency
// key set when the schema declares it.
func arguments(input json.RawMessage, key string, keyArg bool) (map[string]any, error) {
	args := map[string]any{}
	if len(input) > 0 && string(input) != "null" {
		if err := json.Unmarshal(input, &args); err != nil {
			return nil, fmt.Errorf("an MCP tool takes a JSON object: %w", err)
		}
	}
	if keyArg {
		args[IdempotencyArgument] = key
	}
	return args, nil
}

// output is what a result journals: its structured content, else its
// text content as a JSON string.
func output(res *mcp.CallToolResult) (json.RawMessage, error) {
	if res.StructuredContent != nil {
		return json.Marshal(res.StructuredContent)
	}
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return json.Marshal(strings.Join(parts, "\n"))
}

// declares reports whether an input schema has property name.
func declares(schema any, name string) bool {
	raw, err := json.Marshal(schema)
	if err != nil {
		return false
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	_, ok := s.Properties[name]
	return ok
}

var notToken = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// systemMax bounds the breaker system a server's name becomes.
const systemMax = 64

// token makes a server's name a subject token for the breaker, at most
// systemMax bytes.
func token(name string) string {
	t := strings.Trim(notToken.ReplaceAllString(name, "-"), "-")
	return strings.TrimRight(t[:min(len(t), systemMax)], "-")
}
