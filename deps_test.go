package salvage_test

import (
	"os/exec"
	"strings"
	"testing"
)

// depsBudget bounds the packages a program pays for by importing Salvage
// (go list -deps, the standard library included): 239 when this test
// was written, nats.go's jetstream alone being 210.
const depsBudget = 250

// TestImportIsLight: importing the root package brings no NATS server,
// no jsm.go, no gRPC, no model SDK and no MCP SDK (those live in natsconf,
// otelsalvage, chatmodel and mcptools, imported only by who needs them),
// and stays within depsBudget packages.
func TestImportIsLight(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/salvagehq/salvage").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		for _, heavy := range []string{"github.com/nats-io/nats-server", "github.com/nats-io/jsm.go", "google.golang.org/grpc",
			"github.com/openai/openai-go", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters",
			"github.com/modelcontextprotocol/go-sdk"} {
			if strings.HasPrefix(d, heavy) {
				t.Errorf("importing salvage imports %s", d)
			}
		}
	}
	if len(deps) >= depsBudget {
		t.Errorf("importing salvage imports %d packages, want fewer than %d", len(deps), depsBudget)
	}
	t.Logf("%d packages", len(deps))
}
