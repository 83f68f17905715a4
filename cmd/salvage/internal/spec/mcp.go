package spec

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/mcptools"
)

// ErrNotConnected is the error of a call of an MCP tool in a process
// that did not connect to its server (Parse, or a role that calls no
// tool).
var ErrNotConnected = errors.New("this process did not connect to the tool's MCP server")

// MCP takes tools from the MCP servers a pipelines file declares.
type MCP interface {
	// Tools returns the tools of server that o takes.
	Tools(ctx context.Context, server MCPServer, o mcptools.Options) ([]salvage.Tool, error)
}

// Servers is the MCP a process that calls tools uses: it dials each
// server once, when a pipeline first takes its tools, and keeps it (a
// lost session is reconnected by mcptools). Close ends every session and
// stops the servers it runs as child processes.
type Servers struct {
	mu     sync.Mutex
	dialed map[string]*mcptools.Server
}

// Tools dials server when it is new and takes its tools.
func (s *Servers) Tools(ctx context.Context, server MCPServer, o mcptools.Options) ([]salvage.Tool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, ok := s.dialed[server.Name]
	if !ok {
		var t mcptools.Transport
		if len(server.Command) > 0 {
			t = mcptools.Command(server.Command[0], server.Command[1:]...)
		} else {
			var client *http.Client
			if len(server.Headers) > 0 {
				h, err := serverHeaders(server, os.LookupEnv)
				if err != nil {
					return nil, fmt.Errorf("MCP server %s: %w", server.Name, err)
				}
				client = &http.Client{Transport: headerTransport{base: http.DefaultTransport, h: h}}
			}
			t = mcptools.StreamableHTTP(server.URL, client)
		}
		var err error
		if srv, err = mcptools.Dial(ctx, t); err != nil {
			return nil, fmt.Errorf("MCP server %s: %w", server.Name, err)
		}
		if s.dialed == nil {
			s.dialed = map[string]*mcptools.Server{}
		}
		s.dialed[server.Name] = srv
	}
	ts, err := srv.Tools(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("MCP server %s: %w", server.Name, err)
	}
	return ts, nil
}

// Close closes every server dialled.
func (s *Servers) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, srv := range s.dialed {
		errs = append(errs, srv.Close())
	}
	s.dialed = nil
	return errors.Join(errs...)
}

// mcpTools is what one pipeline takes from one server.
type mcpTools struct {
	server MCPServer
	at     string // the path of its first tool, for errors
	opts   mcptools.Options
	// retryable is each tool's retryable_after_compensation.
	retryable map[string]bool
}

// take returns the tools, through mcp or, without one, declared only.
func (m *mcpTools) take(ctx context.Context, mcp MCP) ([]salvage.Tool, error) {
	var ts []salvage.Tool
	if mcp == nil {
		names := append([]string(nil), m.opts.Only...)
		for _, name := range m.opts.Only {
			if c := m.opts.Tools[name].Compensation; c != "" && !slices.Contains(names, c) {
				names = append(names, c)
			}
		}
		for _, name := range names {
			ts = append(ts, salvage.Tool{Name: name, System: m.server.Name, Call: notConnected(m.server.Name)})
		}
	} else {
		var err error
		if ts, err = mcp.Tools(ctx, m.server, m.opts); err != nil {
			return nil, err
		}
	}
	for i := range ts {
		ts[i].RetryableAfterCompensation = m.retryable[ts[i].Name]
	}
	return ts, nil
}

// notConnected is the call of a tool whose server this process did not
// dial: refused, never made.
func notConnected(server string) func(context.Context, salvage.ToolCall) (salvage.ToolResult, error) {
	return func(context.Context, salvage.ToolCall) (salvage.ToolResult, error) {
		return salvage.ToolResult{}, salvage.NotApplied(salvage.Permanent(500, fmt.Errorf("MCP server %s: %w", server, ErrNotConnected)))
	}
}

// checkServer checks a declared server.
func checkServer(m MCPServer) error {
	if err := salvage.ValidateToken("MCP server name", m.Name); err != nil {
		return err
	}
	switch {
	case (len(m.Command) == 0) == (m.URL == ""):
		return fmt.Errorf("MCP server %s needs a command (run on stdio) or a url (streamable HTTP), not both", m.Name)
	case len(m.Command) > 0 && m.Command[0] == "":
		return fmt.Errorf("MCP server %s: the command's first word is the program", m.Name)
	case m.URL != "":
		u, err := url.Parse(m.URL)
		if err != nil {
			// Not echoed: a URL may carry a password.
			return fmt.Errorf("MCP server %s: url does not parse: want http:// or https:// and a host", m.Name)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("MCP server %s: url %q: want http:// or https:// and a host", m.Name, u.Redacted())
		}
	}
	return checkHeaders(m)
}

// checkMCPTool checks a tool taken from an MCP server.
func checkMCPTool(t Tool, servers map[string]MCPServer) error {
	switch {
	case t.Name == "":
		return errors.New("a tool needs a name: the MCP server's name for it")
	case t.Subject != "" || t.Effect != nil || t.System != "":
		return fmt.Errorf("tool %s comes from MCP server %s: its annotations (or read_only, idempotent, verify, compensation) decide its effect, and the server's name is its system; subject, effect and system are for a tool served on NATS", t.Name, t.MCP)
	case t.Compensation == t.Name:
		return fmt.Errorf("%s is undone by itself: name the tool that undoes it", t.Name)
	}
	if _, ok := servers[t.MCP]; !ok {
		return fmt.Errorf("MCP server %s is not declared in mcp_servers", t.MCP)
	}
	return nil
}
