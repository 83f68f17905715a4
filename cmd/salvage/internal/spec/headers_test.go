package spec_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/spec"
)

const crmToken = "s3cret-crm-token"

// lockedCRM is crm behind a check of two headers: 401 without them.
// It counts the requests it refused.
func lockedCRM(t *testing.T) (string, *atomic.Int64) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "crm", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "lookup", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: map[string]any{"customer": "c-1"}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var refused atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+crmToken || r.Header.Get("X-Tenant") != "acme" {
			refused.Add(1)
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return hs.URL, &refused
}

// lockedDoc declares the locked CRM with headers reading variable env.
func lockedDoc(url, env string) string {
	return fmt.Sprintf(`mcp_servers:
  - name: crm
    url: %s
    headers:
      Authorization: "Bearer ${%s}"
      X-Tenant: acme
pipelines:
  - name: lookups
    stages:
      - name: look
        agents:
          - name: finder
            tool: lookup
    tools:
      - name: lookup
        mcp: crm
`, url, env)
}

// TestMCPServerHeadersFromTheEnvironment: a URL server's headers reach
// it on every request, a secret read from the dialling process's
// environment; an unset variable or a refused token fails the dial with
// an error that names the variable and never shows the secret.
func TestMCPServerHeadersFromTheEnvironment(t *testing.T) {
	url, refused := lockedCRM(t)
	ctx := context.Background()
	t.Setenv("SPEC_TEST_CRM_TOKEN", crmToken)
	servers := &spec.Servers{}
	t.Cleanup(func() { _ = servers.Close() })
	ps, err := spec.ParseWith(ctx, "lookups.yaml", []byte(lockedDoc(url, "SPEC_TEST_CRM_TOKEN")), servers)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ps[0].Tools[0].Call(ctx, salvage.ToolCall{Job: "J", Chunk: 1, Stage: 1, Agent: "finder", Seq: 1, IdempotencyKey: "k", Input: []byte(`{}`)})
	if err != nil || !strings.Contains(string(res.Output), "c-1") {
		t.Fatalf("lookup = %s, %v; want the customer", res.Output, err)
	}
	if n := refused.Load(); n != 0 {
		t.Errorf("the CRM refused %d requests carrying the headers", n)
	}

	t.Setenv("SPEC_TEST_WRONG_TOKEN", "wrong-"+crmToken)
	for _, tt := range []struct{ name, env, want string }{
		{"unset variable", "SPEC_TEST_NO_SUCH_TOKEN", "environment variable SPEC_TEST_NO_SUCH_TOKEN is not set"},
		{"refused token", "SPEC_TEST_WRONG_TOKEN", "MCP server crm"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			servers := &spec.Servers{}
			defer servers.Close()
			_, err := spec.ParseWith(ctx, "lookups.yaml", []byte(lockedDoc(url, tt.env)), servers)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v; want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), crmToken) {
				t.Errorf("error %v shows the token", err)
			}
		})
	}
}

// TestMCPHeaderDeclarationErrors: each mistake in a server's headers is
// refused by name, without quoting a value.
func TestMCPHeaderDeclarationErrors(t *testing.T) {
	t.Parallel()
	base := lockedDoc("http://127.0.0.1:1/mcp", "SPEC_TEST_UNSET_TOKEN")
	// A process that dials no server (a dashboard, the API) reads the file
	// without the secret in its environment.
	if _, err := spec.Parse("lookups.yaml", []byte(base)); err != nil {
		t.Fatalf("the file without its variable set: %v", err)
	}
	declarationErrors(t, "lookups.yaml", base, []declarationCase{
		{"on a command server", "    url: http://127.0.0.1:1/mcp", "    command: [crm-mcp]", "headers are for a url server"},
		{"not a header name", "X-Tenant: acme", "\"X Tenant\": acme", `"X Tenant" is not a header name`},
		{"the transport's own", "X-Tenant: acme", "mcp-session-id: hunter2", "header mcp-session-id is the MCP transport's own"},
		{"a ${ left open", "${SPEC_TEST_UNSET_TOKEN}", "${SPEC_TEST_UNSET_TOKEN", "a ${ without its }"},
		{"not a variable's name", "${SPEC_TEST_UNSET_TOKEN}", "${CRM-TOKEN}", "${CRM-TOKEN} is not an environment variable's name"},
		{"a line break", "X-Tenant: acme", "X-Tenant: \"acme\\nhunter2\"", "header X-Tenant has a line break"},
	})
}
