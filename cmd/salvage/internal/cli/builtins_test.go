package cli_test

import (
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestDemoPipelinesOnlyWhenAsked: `salvage up` without flags registers no
// demo pipeline; with --demo-pipelines it runs contract-review; started
// again without the flag on that deployment, it says the demo pipeline is
// registered and that it does not run it.
func TestDemoPipelinesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	ports, err := natsconf.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	store := t.TempDir()
	start := func(log *logBuffer, extra ...string) (string, *exec.Cmd) {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"up", "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "warn", "--listen", addr, "--store", store}, extra...)...)
		demo.DieWithParent(cmd)
		cmd.Stderr = os.Stderr
		if log != nil {
			cmd.Stderr = log
		}
		return startPrinting(t, cmd, "NATS_URL="), cmd
	}
	stop := func(cmd *exec.Cmd) {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	pipelines := func(url string) []string {
		t.Helper()
		code, out, errOut := run(t, "", "pipelines", "--json", "--server", url)
		var ps []salvage.PipelineStatus
		if code != 0 || jsonItems(out, &ps) != nil {
			t.Fatalf("pipelines: %d %s%s", code, out, errOut)
		}
		var names []string
		for _, p := range ps {
			names = append(names, p.Pipeline)
		}
		return names
	}

	// Its --sim would go unused: it says so.
	var simLog logBuffer
	url, plain := start(&simLog, "--sim", "http://127.0.0.1:9")
	if got := pipelines(url); len(got) != 0 {
		t.Fatalf("salvage up without flags registered %v; want no pipeline", got)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		return strings.Contains(simLog.String(), "run only with --demo-pipelines")
	}, "a warning that --sim goes unused without --demo-pipelines (logged: %s)", &simLog)
	stop(plain)

	url, withDemo := start(nil, "--demo-pipelines")
	if got := pipelines(url); !slices.Contains(got, contractreview.Name) {
		t.Fatalf("salvage up --demo-pipelines registered %v; want %s", got, contractreview.Name)
	}
	stop(withDemo)

	// The warning is logged before NATS_URL is printed, but stderr is
	// copied on its own: wait for it.
	var log logBuffer
	start(&log)
	salvagetest.Eventually(t, time.Minute, func() bool {
		got := log.String()
		return strings.Contains(got, "built-in demo pipeline "+contractreview.Name+" is registered") && strings.Contains(got, "--demo-pipelines")
	}, "a warning that %s is registered and not run here, naming --demo-pipelines (logged: %s)", contractreview.Name, &log)
}
