// Package mcptools turns the tools of a Model Context Protocol server into
// salvage.Tools, so that an agent's MCP calls are journaled, retried by
// kind of failure, verified before they are repeated and compensated like
// any other tool's.
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
// permanent failure. A JSON-RPC or transport error is transient, and a
// context deadline a timeout. The breaker system is the server's name.
// The journaled output is the result's structuredContent when present, else
// its text.
//
// Only this package imports the MCP SDK: importing salvage alone does not.
package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage"
)

// MetaIdempotencyKey is the _meta key of a call's idempotency key.
const MetaIdempotencyKey = "io.salvagehq/idempotency-key"

// IdempotencyArgument is the input property that receives the idempotency
// key when a tool's input schema declares it.
const IdempotencyArgument = "idempotency_key"

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
	// Compensation names a tool of the same server that undoes an effect;
	// it receives salvage's compensation input.
	Compensation string
}

// Tools lists s's tools and returns them as salvage.Tools: the ones
// Options.Only names, else all, plus the verify and compensation tools the
// options name.
func Tools(ctx context.Context, s *mcp.ClientSession, o Options) ([]salvage.Tool, error) {
	listed := map[string]*mcp.Tool{}
	var order []string
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("mcptools: list tools: %w", err)
		}
		listed[t.Name] = t
		order = append(order, t.Name)
	}
	system := o.System
	if system == "" {
		if init := s.InitializeResult(); init != nil && init.ServerInfo != nil {
			system = token(init.ServerInfo.Name)
		}
	}
	want := o.Only
	if len(want) == 0 {
		want = order
	}
	take := map[string]bool{}
	for _, name := range want {
		take[name] = true
		if to, ok := o.Tools[name]; ok {
			if to.Compensation != "" {
				// A compensation is a tool of the pipeline too.
				take[to.Compensation] = true
			}
		}
	}
	var out []salvage.Tool
	for _, name := range order {
		if !take[name] {
			continue
		}
		t, err := convert(s, listed, listed[name], system, o.Tools[name])
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
func convert(s *mcp.ClientSession, listed map[string]*mcp.Tool, t *mcp.Tool, system string, to ToolOptions) (salvage.Tool, error) {
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
	keyArg := declares(t.InputSchema, IdempotencyArgument)
	tool := salvage.Tool{Name: t.Name, System: system, Call: caller(s, t.Name, keyArg)}
	if readOnly {
		return tool, nil
	}
	for _, name := range []string{to.Verify, to.Compensation} {
		if name != "" && listed[name] == nil {
			return tool, fmt.Errorf("%w: %q (named by %s's options)", ErrNoTool, name, t.Name)
		}
	}
	tool.Effect = &salvage.SideEffect{Reversible: to.Compensation != "", Compensation: to.Compensation,
		Verify: verifier(s, t.Name, to.Verify, idempotent)}
	return tool, nil
}

// caller makes one MCP call: the idempotency key in _meta, and in the
// arguments when the schema declares it.
func caller(s *mcp.ClientSession, name string, keyArg bool) func(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
	return func(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
		args, err := arguments(c.Input, c.IdempotencyKey, keyArg)
		if err != nil {
			return salvage.ToolResult{}, salvage.NotApplied(salvage.Permanent(400, err))
		}
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: mcp.Meta{MetaIdempotencyKey: c.IdempotencyKey}})
		if err != nil {
			return salvage.ToolResult{}, classify(ctx, name, err)
		}
		out, err := output(res)
		if err != nil {
			return salvage.ToolResult{}, salvage.Permanent(502, fmt.Errorf("mcp tool %s: %w", name, err))
		}
		if res.IsError {
			return salvage.ToolResult{}, salvage.Permanent(422, fmt.Errorf("mcp tool %s answered with an error: %s", name, out))
		}
		return salvage.ToolResult{Output: out}, nil
	}
}

// verifier is a side effect's Verify: the named verify tool; for an
// idempotent tool without one, "not applied" (repeating it is harmless);
// else an error, so an unknown outcome goes to a person.
func verifier(s *mcp.ClientSession, name, verify string, idempotent bool) func(ctx context.Context, key string) (salvage.Verification, error) {
	return func(ctx context.Context, key string) (salvage.Verification, error) {
		if verify == "" && idempotent {
			return salvage.Verification{}, nil
		}
		if verify == "" {
			return salvage.Verification{}, fmt.Errorf("mcp tool %s has no verify tool (mcptools.ToolOptions.Verify) and is not idempotent: its outcome stays unknown", name)
		}
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: verify, Arguments: map[string]any{IdempotencyArgument: key},
			Meta: mcp.Meta{MetaIdempotencyKey: key}})
		if err != nil {
			return salvage.Verification{}, classify(ctx, verify, err)
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

// classify is a failed call's error: a deadline is a timeout; anything
// else (JSON-RPC, transport, a lost session) transient.
func classify(ctx context.Context, name string, err error) error {
	err = fmt.Errorf("mcp tool %s: %w", name, err)
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return salvage.Timeout(err)
	}
	return salvage.Transient(503, err)
}

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

// token makes a server's name a subject token for the breaker.
func token(name string) string {
	return strings.Trim(notToken.ReplaceAllString(name, "-"), "-")
}
