package spec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/spec"
	"github.com/salvagehq/salvage/mcptools"
	"github.com/salvagehq/salvage/salvagetest"
)

// mcpLedgerEnv, set, makes the test binary an MCP server on stdio that
// appends what it does to the file it names.
const mcpLedgerEnv = "SPEC_TEST_MCP_LEDGER"

// serveMCPOnStdio is the shop: charge (destructive, not deduplicated;
// the first charge of order "slow" is taken and never answered),
// charge-status, refund, and ship (which refuses order "nowhere").
func serveMCPOnStdio(ledger string) int {
	appendLine := func(line string) {
		f, err := os.OpenFile(ledger, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			panic(err)
		}
		defer f.Close()
		_, _ = f.WriteString(line + "\n")
		_ = f.Sync()
	}
	lines := func() []string {
		data, _ := os.ReadFile(ledger)
		return strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	order := func(req *mcp.CallToolRequest) string {
		var o struct{ ID string }
		_ = json.Unmarshal(req.Params.Arguments, &o)
		return o.ID
	}
	key := func(req *mcp.CallToolRequest) string {
		k, _ := req.Params.Meta[mcptools.MetaIdempotencyKey].(string)
		return k
	}
	obj := map[string]any{"type": "object"}
	srv := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "charge", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		o := order(req)
		slow := o == "slow" && !strings.Contains(strings.Join(lines(), "\n"), "charge slow ")
		appendLine(fmt.Sprintf("charge %s %s", o, key(req)))
		if slow {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &mcp.CallToolResult{StructuredContent: map[string]any{"charge": "ch-" + o}}, nil
	})
	srv.AddTool(&mcp.Tool{Name: "charge-status", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"idempotency_key": map[string]any{"type": "string"}}},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var a struct {
				Key string `json:"idempotency_key"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &a)
			for _, l := range lines() {
				if f := strings.Fields(l); len(f) == 3 && f[0] == "charge" && f[2] == a.Key {
					return &mcp.CallToolResult{StructuredContent: map[string]any{"applied": true, "resource_id": "ch-" + f[1]}}, nil
				}
			}
			return &mcp.CallToolResult{StructuredContent: map[string]any{"applied": false}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "refund", InputSchema: obj, Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in salvage.CompensationInput
			_ = json.Unmarshal(req.Params.Arguments, &in)
			appendLine("refund " + in.Key)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "ship", InputSchema: obj, Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if order(req) == "nowhere" {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no address"}}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "shipped"}}}, nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// crm is an MCP server on streamable HTTP in this process, with one
// read-only lookup.
func crm(t *testing.T) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "crm", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "lookup", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: map[string]any{"customer": "c-1"}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		hs.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return hs.URL
}

// shopMCP declares both servers: the shop as a command (this test
// binary), the CRM by URL.
func shopMCP(crmURL string) string {
	return fmt.Sprintf(`mcp_servers:
  - name: shop
    command: [%q]
  - name: crm
    url: %s
pipelines:
  - name: orders
    split: items
    stages:
      - name: look
        agents:
          - name: finder
            tool: lookup
      - name: pay
        agents:
          - name: cashier
            tool: charge
      - name: ship
        agents:
          - name: shipper
            tool: ship
    tools:
      - name: lookup
        mcp: crm
      - name: charge
        mcp: shop
        timeout: 2s
        verify: charge-status
        compensation: refund
      - name: ship
        mcp: shop
`, os.Args[0], crmURL)
}

// TestDeclaredMCPTools: a pipelines file declares an MCP server run as a
// command and one at a URL and takes their tools by name. A charge whose
// answer never came is verified, not repeated; an order the shipper
// refuses has its charge refunded by the named compensation tool.
func TestDeclaredMCPTools(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger")
	t.Setenv(mcpLedgerEnv, ledger) // the shop, this binary, inherits it
	crmURL := crm(t)
	servers := &spec.Servers{} // closed before the CRM: its session ends
	t.Cleanup(func() { _ = servers.Close() })
	ctx := context.Background()
	ps, err := spec.ParseWith(ctx, "orders.yaml", []byte(shopMCP(crmURL)), servers)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]salvage.Tool{}
	for _, tool := range ps[0].Tools {
		byName[tool.Name] = tool
	}
	if len(byName) != 4 || byName["lookup"].Effect != nil || byName["lookup"].System != "crm" ||
		byName["charge"].Effect == nil || byName["charge"].Effect.Compensation != "refund" ||
		byName["refund"].System != "shop" {
		t.Fatalf("tools = %+v", ps[0].Tools)
	}

	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: ps})
	id, err := c.JobSubmit(ctx, "orders", []map[string]string{{"id": "ok"}, {"id": "slow"}, {"id": "nowhere"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := c.JobWait(wctx, id); err != nil {
		tr, _ := c.JobTrace(ctx, id)
		for _, ch := range tr.Chunks {
			t.Logf("chunk %d %s stage %d: %s", ch.Chunk, ch.Status, ch.Stage, ch.Error)
			for _, call := range ch.Calls {
				t.Logf("  %s %s %s %s", call.Tool, call.Status, call.ErrorClass, call.Error)
			}
		}
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobIncomplete || j.Summary.Done != 2 {
		t.Fatalf("job = %s, %d done; want incomplete, 2 done", j.Status, j.Summary.Done)
	}
	var got []string
	salvagetest.Eventually(t, time.Minute, func() bool {
		data, _ := os.ReadFile(ledger)
		got = strings.Split(strings.TrimSpace(string(data)), "\n")
		return strings.Contains(string(data), "refund ")
	}, "the refused order's charge to be refunded")
	charges := map[string]int{}
	var nowhereKey, refunded string
	for _, l := range got {
		f := strings.Fields(l)
		switch f[0] {
		case "charge":
			charges[f[1]]++
			if f[1] == "nowhere" {
				nowhereKey = f[2]
			}
		case "refund":
			refunded = f[1]
		}
	}
	if charges["ok"] != 1 || charges["slow"] != 1 || charges["nowhere"] != 1 || refunded != nowhereKey {
		t.Errorf("ledger %q: want one charge per order (the slow one verified, not repeated) and the refused order's refunded", got)
	}
}

// TestMCPToolsWithoutAConnection: Parse (a process that calls no tool)
// declares MCP tools by name and starts no server; calling one is refused,
// not made.
func TestMCPToolsWithoutAConnection(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(shopMCP("http://127.0.0.1:1/mcp"), fmt.Sprintf("%q", os.Args[0]), `"/nonexistent/shop"`, 1)
	ps, err := spec.Parse("orders.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range ps[0].Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "lookup,charge,ship,refund" && strings.Join(names, ",") != "charge,ship,refund,lookup" {
		t.Errorf("tools %v; want lookup, charge, ship and charge's compensation refund", names)
	}
	_, err = ps[0].Tools[0].Call(context.Background(), salvage.ToolCall{Input: json.RawMessage(`{}`)})
	if !errors.Is(err, spec.ErrNotConnected) || !errors.Is(err, salvage.ErrPermanent) {
		t.Errorf("a call without a connection: %v; want ErrNotConnected, permanent", err)
	}
}

// TestMCPDeclarationErrorsNameTheLine: each mistake in an MCP server or
// tool declaration names its line.
func TestMCPDeclarationErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	declarationErrors(t, "orders.yaml", shopMCP("http://127.0.0.1:1/mcp"), []declarationCase{
		{"undeclared server", "mcp: crm", "mcp: erp", "orders.yaml:23: MCP server erp is not declared"},
		{"command and url", "    url: http://127.0.0.1:1/mcp", "    url: http://127.0.0.1:1/mcp\n    command: [x]", "orders.yaml:4: MCP server crm needs a command"},
		{"neither", "    url: http://127.0.0.1:1/mcp", "", "orders.yaml:4: MCP server crm needs a command"},
		{"bad url", "url: http://127.0.0.1:1/mcp", "url: ftp://ops:hunter2@x/mcp", "url \"ftp://ops:xxxxx@x/mcp\": want http:// or https://"},
		{"url that does not parse", "url: http://127.0.0.1:1/mcp", "url: \"http://ops:hunter2@x:port/mcp\"", "url does not parse"},
		{"bad name", "name: crm", "name: c.r.m", "orders.yaml:4: bad subject token"},
		{"twice", "name: crm", "name: shop", "orders.yaml:4: MCP server shop is declared twice"},
		{"subject on an MCP tool", "        mcp: crm", "        mcp: crm\n        subject: tools.lookup", "orders.yaml:23: tool lookup comes from MCP server crm"},
		{"verify on a NATS tool", "      - name: ship\n        mcp: shop", "      - name: ship\n        subject: tools.ship\n        verify: x", "are for a tool of an MCP server"},
		{"its own compensation", "compensation: refund", "compensation: charge", "charge is undone by itself"},
		{"declared twice", "      - name: ship\n        mcp: shop", "      - name: charge\n        mcp: shop", "tool charge is declared twice"},
	})
}

// declarationCase is one mistake: the text old of a good document
// replaced by new, and what the error must say.
type declarationCase struct{ name, old, new, want string }

// declarationErrors parses base with each mistake in it: the error must
// be ErrInvalid and say what the case wants, and never show "hunter2",
// the secret the cases hide in URLs and header values.
func declarationErrors(t *testing.T, file, base string, cases []declarationCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(base, tt.old, tt.new, 1)
			if doc == base {
				t.Fatalf("%q is not in the document", tt.old)
			}
			_, err := spec.Parse(file, []byte(doc))
			if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v; want one containing %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %v shows a secret", err)
			}
		})
	}
}

// TestREADMEDeclarationParses: the pipelines file the README shows for
// MCP servers is one.
func TestREADMEDeclarationParses(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```yaml\nmcp_servers:")
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("README.md shows no pipelines file with mcp_servers")
	}
	ps, err := spec.Parse("README.md", []byte("mcp_servers:"+block))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || len(ps[0].Tools) != 2 {
		t.Errorf("README's pipelines = %+v; want one pipeline with issue-refund and its compensation", ps)
	}
}
