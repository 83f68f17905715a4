package natsconf

import (
	"net"
	"sync/atomic"
	"testing"
)

// TestStartClusterPicksAgainWhenAPortIsTaken: a port taken between being
// picked and being bound costs StartCluster one more pick, not the test
// that asked for a cluster. Not parallel: it swaps the package's
// pickPorts, and the package's parallel tests start only after it ends.
func TestStartClusterPicksAgainWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", net.JoinHostPort(HostDefault, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var picks atomic.Int32
	pickPorts = func(n int) ([]int, error) {
		ports, err := FreePorts(n)
		if err == nil && picks.Add(1) == 1 {
			ports[n-1] = taken.Addr().(*net.TCPAddr).Port // the last node's route port
		}
		return ports, err
	}
	t.Cleanup(func() { pickPorts = FreePorts })
	c, err := StartCluster(ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	if got := picks.Load(); got != 2 {
		t.Fatalf("ports picked %d times, want 2 (a clash, then a start)", got)
	}
}
