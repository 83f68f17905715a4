package cli_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/streams"
)

// TestDashboardRoleRunsNothingElse: `salvage up --role dashboard` serves
// the page and provisions the deployment, but runs no splitter, worker or
// orchestrator: a job submitted to it is not taken, and no pipeline is
// registered as run.
func TestDashboardRoleRunsNothingElse(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--role", "dashboard")
	code, stdout, errOut := run(t, "A short contract.", "submit", "contract-review", "-", "--server", url)
	if code != 0 || strings.TrimSpace(stdout) == "" || !strings.Contains(errOut, "no splitter took job") {
		t.Fatalf("submit to a dashboard-only deployment: exit %d, %q, %q", code, stdout, errOut)
	}
	nc := salvagetest.Connect(t, url)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	s, err := js.Stream(ctx, streams.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("SALVAGE_JOBS = %+v, %v; want the job still waiting", info, err)
	}
	stores, err := kv.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if ps, err := stores.Pipelines.List(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("pipelines registered by a dashboard-only process: %+v, %v", ps, err)
	}
}

// TestFleetsOfTheBinary: `salvage up --pipelines alpha.yaml` beside
// `salvage up --pipelines beta.yaml` and `salvage up --role dashboard`, one
// server: every job of both pipelines finishes, each answered by its own
// fleet's agent, with no envelope and no rejection; `salvage workers`
// lists each fleet with its pipeline.
func TestFleetsOfTheBinary(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--role", "dashboard")
	nc := salvagetest.Connect(t, url)
	rejections, err := nc.SubscribeSync("salvage.events.rejected.>")
	if err != nil {
		t.Fatal(err)
	}
	for _, fleet := range []struct{ name, roles string }{{"alpha", "worker,dead-letter,recovery,api"}, {"beta", "worker,recovery"}} {
		file := writeFile(t, fleet.name+".yaml", `pipelines:
  - name: `+fleet.name+`
    split: items
    stages:
      - name: answer
        agents:
          - name: answerer
            subject: agents.`+fleet.name+`
            timeout: 5s
`)
		up(t, "--server", url, "--pipelines", file, "--role", fleet.roles, "--worker-id", "fleet-"+fleet.name)
		reply := exec.Command(natsBinary(t), "--server", url, "reply", "agents."+fleet.name, "--command", "echo answered-by-"+fleet.name)
		if err := reply.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reply.Process.Kill(); _ = reply.Wait() })
	}
	for i := range 3 {
		for _, p := range []string{"alpha", "beta"} {
			code, out, errOut := run(t, fmt.Sprintf(`{"input": ["order %d", "order %d"]}`, i, i+100), "submit", p, "-", "--wait", "--server", url)
			if code != 0 {
				t.Fatalf("submit %s: exit %d\n%s\n%s", p, code, out, errOut)
			}
			job := strings.TrimSpace(strings.Split(out, "\n")[0])
			if code, res, _ := run(t, "", "results", job, "--json", "--server", url); code != 0 || strings.Count(res, "answered-by-"+p) != 2 {
				t.Fatalf("results of %s job %s: %s", p, job, res)
			}
		}
	}
	var none []salvage.EnvelopeRecord
	if code, out, errOut := run(t, "", "dlq", "ls", "--json", "--server", url); code != 0 || jsonItems(out, &none) != nil || len(none) != 0 {
		t.Fatalf("dlq ls: %d %s %s", code, out, errOut)
	}
	if m, err := rejections.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("a rejection: %s", m.Data)
	}
	code, out, errOut := run(t, "", "workers", "--json", "--server", url)
	var ws []struct {
		ID        string   `json:"id"`
		Pipelines []string `json:"pipelines"`
	}
	if code != 0 || jsonItems(out, &ws) != nil {
		t.Fatalf("salvage workers: %d %s %s", code, out, errOut)
	}
	runs := map[string]string{}
	for _, w := range ws {
		for _, p := range w.Pipelines {
			runs[p] += w.ID
		}
	}
	if runs["alpha"] != "fleet-alpha" || runs["beta"] != "fleet-beta" {
		t.Fatalf("salvage workers lists %s", out)
	}
}

// mcpPipelines declares a pipeline whose tool comes from an MCP server
// whose command does not exist.
const mcpPipelines = `mcp_servers:
  - name: shop
    command: ["/nonexistent/shop-mcp"]
pipelines:
  - name: refunds
    split: items
    stages:
      - name: refund
        agents:
          - name: cashier
            tool: issue-refund
    tools:
      - name: issue-refund
        mcp: shop
`

// TestOnlyToolCallersStartMCPServers: a worker process dials the MCP
// servers its pipelines file declares, and refuses to start, naming the
// file and line, when one cannot be started; a dashboard-only process,
// which calls no tool, starts none and runs.
func TestOnlyToolCallersStartMCPServers(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "mcp.yaml", mcpPipelines)
	code, _, errOut := run(t, "", "up", "--pipelines", file, "--listen", "127.0.0.1:-1", "--store", t.TempDir(), "--http", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "mcp.yaml:13: MCP server shop: mcptools: connect: fork/exec") {
		t.Errorf("a worker with an MCP server that cannot start: exit %d, %q; want a failure naming mcp.yaml:13 and why", code, errOut)
	}
	if url, _ := up(t, "--role", "dashboard", "--pipelines", file); url == "" {
		t.Error("a dashboard-only process with the same file did not start")
	}
}
