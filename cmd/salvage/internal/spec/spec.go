// Package spec reads pipelines declared in YAML or JSON (`salvage up
// --pipelines FILE`): pipelines whose agents and tools are NATS services
// or the tools of MCP servers, so they need no Go. Every error names the
// file and line.
package spec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/mcptools"
)

// ErrInvalid is wrapped by every error about a pipelines file.
var ErrInvalid = errors.New("invalid pipelines file")

// maxFile bounds a pipelines file.
const maxFile = 1 << 20

// File is the document: {"mcp_servers": [...], "pipelines": [...]}.
type File struct {
	MCPServers []MCPServer `yaml:"mcp_servers" json:"mcp_servers"`
	Pipelines  []Pipeline  `yaml:"pipelines" json:"pipelines"`
	// Limits are rate limits the process that loads the file declares
	// when it starts (salvage.Config.Limits).
	Limits []Limit `yaml:"limits" json:"limits"`
}

// Limit declares a rate limit (salvage.Limit): key system.<system>,
// tool.<tool> or tenant.<tenant>, at least one bound (chunks: a tenant's
// only).
type Limit struct {
	Key               string `yaml:"key"`
	RequestsPerMinute int    `yaml:"requests_per_minute"`
	TokensPerMinute   int64  `yaml:"tokens_per_minute"`
	InFlight          int    `yaml:"in_flight"`
	Chunks            int    `yaml:"chunks"`
}

// Declared is what a pipelines file declares.
type Declared struct {
	Pipelines []*salvage.Pipeline
	Limits    []salvage.Limit
}

// MCPServer declares a Model Context Protocol server whose tools
// pipelines take by name: a command run as a child process speaking MCP
// on stdio, or the URL of a streamable HTTP endpoint.
type MCPServer struct {
	// Name is the server's name in the file and its tools' breaker
	// system.
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	URL     string   `yaml:"url"`
	// Headers are sent with every request to a URL server: an
	// Authorization, an API key. A value's ${NAME} is the environment
	// variable NAME of the process that dials the server, read when it
	// dials, so a secret need not be in the file.
	Headers map[string]string `yaml:"headers"`
}

// Pipeline declares one pipeline.
type Pipeline struct {
	Name string `yaml:"name"`
	// Split is whole, paragraphs or items (salvage.SplitWhole, …).
	Split     string `yaml:"split"`
	MaxChunks int    `yaml:"max_chunks"`
	// TenantFrom names the metadata field whose string is a job's tenant
	// when its submission names none (salvage.Pipeline.TenantFrom).
	TenantFrom string  `yaml:"tenant_from"`
	Stages     []Stage `yaml:"stages"`
	Tools      []Tool  `yaml:"tools"`
	// Concurrency, AckWait and MaxDeliver tune the pipeline's own chunk
	// pool; zero (absent) takes salvage up's --concurrency, --ack-wait
	// and --max-deliver.
	Concurrency int    `yaml:"concurrency"`
	AckWait     string `yaml:"ack_wait"`
	MaxDeliver  int    `yaml:"max_deliver"`
	// Retention is how long what its finished jobs leave is kept, by data
	// class; absent fields take salvage up's --keep-calls, --keep-effects
	// and --keep-records.
	Retention Retention `yaml:"retention"`
}

// Retention is a pipeline's salvage.Retention, as durations (1h, 336h).
type Retention struct {
	Calls   string `yaml:"calls"`
	Effects string `yaml:"effects"`
	Records string `yaml:"records"`
}

// Stage declares one stage; its agents run in parallel.
type Stage struct {
	Name     string `yaml:"name"`
	Optional bool   `yaml:"optional"`
	// RequiresApproval parks each chunk before the stage until a person
	// approves it (salvage approve).
	RequiresApproval bool    `yaml:"requires_approval"`
	Agents           []Agent `yaml:"agents"`
}

// Agent is served on Subject, or calls Tool with the chunk's input.
type Agent struct {
	Name    string `yaml:"name"`
	Subject string `yaml:"subject"`
	Tool    string `yaml:"tool"`
	Timeout string `yaml:"timeout"`
}

// Tool is served on Subject, or is the tool of that name of the MCP
// server MCP names: its annotations decide its kind unless ReadOnly or
// Idempotent say otherwise, Verify and Compensation name tools of the
// same server (mcptools.ToolOptions).
type Tool struct {
	Name                       string  `yaml:"name"`
	Subject                    string  `yaml:"subject"`
	MCP                        string  `yaml:"mcp"`
	ReadOnly                   *bool   `yaml:"read_only"`
	Idempotent                 *bool   `yaml:"idempotent"`
	Verify                     string  `yaml:"verify"`
	Compensation               string  `yaml:"compensation"`
	System                     string  `yaml:"system"`
	Timeout                    string  `yaml:"timeout"`
	RetryableAfterCompensation bool    `yaml:"retryable_after_compensation"`
	Effect                     *Effect `yaml:"effect"`
}

// Effect declares a tool's side effect.
type Effect struct {
	Reversible    bool   `yaml:"reversible"`
	Compensation  string `yaml:"compensation"`
	VerifySubject string `yaml:"verify_subject"`
}

// Reserved are the names of salvage's built-in pipelines: a file may not
// declare one (it would join the built-in pipeline's pool with another
// definition).
var Reserved = []string{"contract-review", "order-fulfillment"}

// version is the part of p's declaration its definition fingerprint does
// not see from the pipeline it builds: how it splits, what tool each agent
// calls, the MCP options of its tools, timeouts. Tuning (concurrency,
// ack_wait, max_deliver, retention, max_chunks, tenant_from) is left out.
func version(p Pipeline) string {
	p.Concurrency, p.AckWait, p.MaxDeliver, p.Retention, p.MaxChunks, p.TenantFrom = 0, "", 0, Retention{}, 0, ""
	data, _ := json.Marshal(p)
	sum := sha256.Sum256(data)
	return "file:" + hex.EncodeToString(sum[:8])
}

// Load reads and checks the pipelines in path; their MCP tools are taken
// through mcp (nil: declared but not connected, see Parse).
func Load(ctx context.Context, path string, mcp MCP) ([]*salvage.Pipeline, error) {
	d, err := LoadFile(ctx, path, mcp)
	if err != nil {
		return nil, err
	}
	return d.Pipelines, nil
}

// LoadFile is Load, with the rate limits the file declares.
func LoadFile(ctx context.Context, path string, mcp MCP) (*Declared, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFile {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrInvalid, path, maxFile)
	}
	return parse(ctx, path, data, mcp)
}

// Parse checks the pipelines in data, read from name, without
// connecting to an MCP server: each MCP tool is declared by name, and a
// call of it fails (ErrNotConnected). That is enough for a process that
// runs no worker and no recovery, which call no tool.
func Parse(name string, data []byte) ([]*salvage.Pipeline, error) {
	return ParseWith(context.Background(), name, data, nil)
}

// ParseWith checks the pipelines in data, read from name, and takes their
// MCP tools through mcp (nil: as Parse).
func ParseWith(ctx context.Context, name string, data []byte, mcp MCP) ([]*salvage.Pipeline, error) {
	d, err := parse(ctx, name, data, mcp)
	if err != nil {
		return nil, err
	}
	return d.Pipelines, nil
}

// parse checks what data, read from name, declares.
func parse(ctx context.Context, name string, data []byte, mcp MCP) (*Declared, error) {
	var doc File
	if err := yaml.UnmarshalWithOptions(data, &doc, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalid, name, yaml.FormatError(err, false, false))
	}
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalid, name, yaml.FormatError(err, false, false))
	}
	if len(doc.Pipelines) == 0 {
		return nil, fmt.Errorf("%w: %s: no pipelines (want {\"pipelines\": [...]})", ErrInvalid, name)
	}
	c := &checker{name: name, file: file, mcp: mcp, servers: map[string]MCPServer{}}
	for i, m := range doc.MCPServers {
		mp := fmt.Sprintf("$.mcp_servers[%d]", i)
		if err := checkServer(m); err != nil {
			return nil, c.fail(mp, "%v", err)
		}
		if _, ok := c.servers[m.Name]; ok {
			return nil, c.fail(mp+".name", "MCP server %s is declared twice", m.Name)
		}
		c.servers[m.Name] = m
	}
	var out []*salvage.Pipeline
	seen := map[string]bool{}
	for i, p := range doc.Pipelines {
		pp := fmt.Sprintf("$.pipelines[%d]", i)
		if err := salvage.ValidateToken("pipeline name", p.Name); err != nil {
			return nil, c.fail(pp, "%v", err)
		}
		if seen[p.Name] {
			return nil, c.fail(pp+".name", "pipeline %s is declared twice", p.Name)
		}
		if slices.Contains(Reserved, p.Name) {
			return nil, c.fail(pp+".name", "pipeline name %s is reserved for the built-in pipeline of that name: choose another", p.Name)
		}
		seen[p.Name] = true
		sp, err := c.pipeline(ctx, pp, p)
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	limits, err := c.limits(doc.Limits)
	if err != nil {
		return nil, err
	}
	return &Declared{Pipelines: out, Limits: limits}, nil
}

// checker checks one pipelines file: every error names the line of the
// node it is about.
type checker struct {
	name    string
	file    *ast.File
	mcp     MCP
	servers map[string]MCPServer
}

// at names the line of the node at path.
func (c *checker) at(path string) string {
	p, err := yaml.PathString(path)
	if err != nil {
		return c.name
	}
	node, err := p.FilterFile(c.file)
	if err != nil || node == nil {
		return c.name
	}
	return fmt.Sprintf("%s:%d", c.name, line(node))
}

// fail is an error about the node at path.
func (c *checker) fail(path, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, c.at(path), fmt.Sprintf(format, args...))
}

// pipeline checks pipeline p, at path pp, and builds it.
func (c *checker) pipeline(ctx context.Context, pp string, p Pipeline) (*salvage.Pipeline, error) {
	sp := &salvage.Pipeline{Name: p.Name, MaxChunks: p.MaxChunks, TenantFrom: p.TenantFrom, Version: version(p)}
	switch p.Split {
	case "whole", "":
		sp.Split = salvage.SplitWhole
	case "paragraphs":
		sp.Split = salvage.SplitParagraphs
	case "items":
		sp.Split = salvage.SplitItems
	default:
		return nil, c.fail(pp+".split", "split %q: want whole, paragraphs or items", p.Split)
	}
	if p.MaxChunks < 0 {
		return nil, c.fail(pp+".max_chunks", "max_chunks must not be negative")
	}
	if p.Concurrency < 0 {
		return nil, c.fail(pp+".concurrency", "concurrency must not be negative")
	}
	if p.MaxDeliver < 0 {
		return nil, c.fail(pp+".max_deliver", "max_deliver must not be negative")
	}
	ackWait, err := duration(p.AckWait)
	if err != nil {
		return nil, c.fail(pp+".ack_wait", "%v", err)
	}
	sp.Concurrency, sp.AckWait, sp.MaxDeliver = p.Concurrency, ackWait, p.MaxDeliver
	for _, f := range []struct {
		name string
		in   string
		out  *time.Duration
	}{{"calls", p.Retention.Calls, &sp.Retention.Calls}, {"effects", p.Retention.Effects, &sp.Retention.Effects}, {"records", p.Retention.Records, &sp.Retention.Records}} {
		if *f.out, err = duration(f.in); err != nil {
			return nil, c.fail(pp+".retention."+f.name, "%v", err)
		}
	}
	if err := sp.Retention.Validate(); err != nil {
		return nil, c.fail(pp+".retention", "%v", err)
	}
	tools, err := c.tools(ctx, pp, p, sp)
	if err != nil {
		return nil, err
	}
	if len(p.Stages) == 0 {
		return nil, c.fail(pp, "pipeline %s has no stages", p.Name)
	}
	for j, s := range p.Stages {
		stage, err := c.stage(fmt.Sprintf("%s.stages[%d]", pp, j), s, tools)
		if err != nil {
			return nil, err
		}
		sp.Stages = append(sp.Stages, stage)
	}
	return sp, nil
}

// tools checks pipeline p's tools (at path pp), adds them to sp — those
// served on subjects, then those of each MCP server, in the order the file
// names the servers — and returns the names declared.
func (c *checker) tools(ctx context.Context, pp string, p Pipeline, sp *salvage.Pipeline) (map[string]bool, error) {
	tools := map[string]bool{}
	fromMCP := map[string]*mcpTools{}
	var serverOrder []string
	// declare records a checked tool's name, once, and reads its timeout.
	declare := func(tp string, t Tool) (time.Duration, error) {
		if tools[t.Name] {
			return 0, c.fail(tp+".name", "tool %s is declared twice", t.Name)
		}
		tools[t.Name] = true
		timeout, err := duration(t.Timeout)
		if err != nil {
			return 0, c.fail(tp+".timeout", "%v", err)
		}
		return timeout, nil
	}
	for j, t := range p.Tools {
		tp := fmt.Sprintf("%s.tools[%d]", pp, j)
		if t.MCP != "" {
			if err := checkMCPTool(t, c.servers); err != nil {
				return nil, c.fail(tp, "%v", err)
			}
			timeout, err := declare(tp, t)
			if err != nil {
				return nil, err
			}
			m := fromMCP[t.MCP]
			if m == nil {
				m = &mcpTools{server: c.servers[t.MCP], at: tp, retryable: map[string]bool{}, opts: mcptools.Options{System: t.MCP, Tools: map[string]mcptools.ToolOptions{}}}
				fromMCP[t.MCP] = m
				serverOrder = append(serverOrder, t.MCP)
			}
			m.opts.Only = append(m.opts.Only, t.Name)
			m.opts.Tools[t.Name] = mcptools.ToolOptions{ReadOnly: t.ReadOnly, Idempotent: t.Idempotent, Verify: t.Verify,
				Compensation: t.Compensation, Timeout: timeout}
			m.retryable[t.Name] = t.RetryableAfterCompensation
			continue
		}
		if err := c.checkSubjectTool(tp, t); err != nil {
			return nil, err
		}
		timeout, err := declare(tp, t)
		if err != nil {
			return nil, err
		}
		st := salvage.Tool{Name: t.Name, Subject: t.Subject, System: t.System, Timeout: timeout, RetryableAfterCompensation: t.RetryableAfterCompensation}
		if st.Effect, err = c.effect(tp, t); err != nil {
			return nil, err
		}
		sp.Tools = append(sp.Tools, st)
	}
	for _, name := range serverOrder {
		m := fromMCP[name]
		ts, err := m.take(ctx, c.mcp)
		if err != nil {
			return nil, c.fail(m.at, "%v", err)
		}
		for _, t := range ts {
			tools[t.Name] = true
		}
		sp.Tools = append(sp.Tools, ts...)
	}
	for j, t := range p.Tools {
		if e := t.Effect; e != nil && e.Compensation != "" && !tools[e.Compensation] {
			return nil, c.fail(fmt.Sprintf("%s.tools[%d].effect.compensation", pp, j), "compensation tool %s is not declared", e.Compensation)
		}
	}
	return tools, nil
}

// checkSubjectTool checks tool t, at path tp, served on a subject.
func (c *checker) checkSubjectTool(tp string, t Tool) error {
	if t.Verify != "" || t.Compensation != "" || t.ReadOnly != nil || t.Idempotent != nil {
		return c.fail(tp, "verify, compensation, read_only and idempotent are for a tool of an MCP server (mcp: NAME); a tool served on a subject declares an effect")
	}
	if t.Name == "" || t.Subject == "" {
		return c.fail(tp, "a tool needs a name and a subject")
	}
	if err := salvage.ValidateSubject("tool "+t.Name, t.Subject); err != nil {
		return c.fail(tp+".subject", "%v", err)
	}
	return nil
}

// effect checks the side effect tool t (at path tp) declares, if any.
func (c *checker) effect(tp string, t Tool) (*salvage.SideEffect, error) {
	e := t.Effect
	if e == nil {
		return nil, nil
	}
	if e.VerifySubject == "" {
		return nil, c.fail(tp+".effect", "a side effect needs a verify_subject: Salvage asks it before repeating a call whose outcome is unknown")
	}
	if err := salvage.ValidateSubject("tool "+t.Name+" verify", e.VerifySubject); err != nil {
		return nil, c.fail(tp+".effect.verify_subject", "%v", err)
	}
	if e.Reversible && e.Compensation == "" {
		return nil, c.fail(tp+".effect", "a reversible effect names its compensation tool")
	}
	if e.Compensation == t.Name {
		return nil, c.fail(tp+".effect.compensation", "%s is undone by itself: name the tool that undoes it", t.Name)
	}
	return &salvage.SideEffect{Reversible: e.Reversible, Compensation: e.Compensation, VerifySubject: e.VerifySubject}, nil
}

// stage checks stage s, at path sp, whose agents may call tools.
func (c *checker) stage(sp string, s Stage, tools map[string]bool) (salvage.Stage, error) {
	if len(s.Agents) == 0 {
		return salvage.Stage{}, c.fail(sp, "stage %q has no agents", s.Name)
	}
	stage := salvage.Stage{Name: s.Name, Optional: s.Optional, RequiresApproval: s.RequiresApproval}
	names := map[string]bool{}
	for k, a := range s.Agents {
		ap := fmt.Sprintf("%s.agents[%d]", sp, k)
		if err := salvage.ValidateToken("agent name", a.Name); err != nil {
			return stage, c.fail(ap, "%v", err)
		}
		if names[a.Name] {
			return stage, c.fail(ap+".name", "agent %s appears twice in the stage", a.Name)
		}
		names[a.Name] = true
		timeout, err := duration(a.Timeout)
		if err != nil {
			return stage, c.fail(ap+".timeout", "%v", err)
		}
		switch {
		case (a.Subject == "") == (a.Tool == ""):
			return stage, c.fail(ap, "agent %s needs a subject (a service that answers its turns) or a tool (called with the chunk's input), not both", a.Name)
		case a.Tool != "" && !tools[a.Tool]:
			return stage, c.fail(ap+".tool", "tool %s is not declared in the pipeline's tools", a.Tool)
		case a.Tool != "":
			stage.Agents = append(stage.Agents, callsTool(a.Name, a.Tool))
		case salvage.ValidateSubject("agent "+a.Name, a.Subject) != nil:
			return stage, c.fail(ap+".subject", "%v", salvage.ValidateSubject("agent "+a.Name, a.Subject))
		default:
			stage.Agents = append(stage.Agents, salvage.Agent{Name: a.Name, Subject: a.Subject, Timeout: timeout})
		}
	}
	return stage, nil
}

// limits checks the file's limits.
func (c *checker) limits(ls []Limit) ([]salvage.Limit, error) {
	var limits []salvage.Limit
	keys := map[string]bool{}
	for i, l := range ls {
		lp := fmt.Sprintf("$.limits[%d]", i)
		limit := salvage.Limit{Key: l.Key, RequestsPerMinute: l.RequestsPerMinute, TokensPerMinute: l.TokensPerMinute, InFlight: l.InFlight, Chunks: l.Chunks}
		if err := limit.Validate(); err != nil {
			return nil, c.fail(lp, "%v", err)
		}
		if keys[l.Key] {
			return nil, c.fail(lp+".key", "limit %s is declared twice", l.Key)
		}
		keys[l.Key] = true
		limits = append(limits, limit)
	}
	return limits, nil
}

// callsTool is an agent whose turn is one call of tool with the chunk's
// input; the tool's output is the agent's.
func callsTool(name, tool string) salvage.Agent {
	return salvage.Agent{Name: name, Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
		out, err := t.Tool(ctx, tool, t.Input)
		if err != nil {
			return nil, err
		}
		return out, nil
	}}
}

func duration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration such as 30s", s)
	}
	return d, nil
}

// line is the 1-based line a node starts on.
func line(n ast.Node) int {
	if t := n.GetToken(); t != nil && t.Position != nil {
		return t.Position.Line
	}
	return 0
}
