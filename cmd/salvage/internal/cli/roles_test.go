package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/streams"
)

// TestDashboardRoleRunsNothingElse: `salvage up --role dashboard` serves
// the page and provisions the deployment, but runs no splitter, worker or
// orchestrator: a job submitted to it is not taken, and no pipeline is
// registered as run.
func TestDashboardRoleRunsNothingElse(t *testing.T) {
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
