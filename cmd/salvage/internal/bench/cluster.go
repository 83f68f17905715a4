package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/natsconf"
)

// benchClusterNodes is the size of the benchmark's cluster.
const benchClusterNodes = 3

// benchNodeConf is one node's config: the server's default sync_interval
// (a quorum of three holds each acknowledged write), routes to all.
const benchNodeConf = `server_name: bench-%d
listen: 127.0.0.1:%d
max_payload: 1MB
jetstream { store_dir: %q }
cluster { name: salvage-bench, listen: 127.0.0.1:%d, routes: [%s] }
`

// natsServerBinary finds the nats-server to run the cluster rows with:
// flag, else nats-server on PATH, else ./bin/nats-server (make tools).
func natsServerBinary(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	if p, err := filepath.Abs(filepath.Join("bin", "nats-server")); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no nats-server binary: make tools installs ./bin/nats-server, or pass --nats-server")
}

// startBenchCluster starts benchClusterNodes nats-server processes of
// binary on loopback as one JetStream cluster, in a temporary directory,
// and connects to all of them once an R3 stream can be created.
func startBenchCluster(ctx context.Context, binary string) (s *benchServer, err error) {
	dir, err := os.MkdirTemp("", "salvage-bench-cluster-")
	if err != nil {
		return nil, err
	}
	s = &benchServer{dir: dir, replicas: benchClusterNodes, servers: fmt.Sprintf("%d nats-server processes, R%d", benchClusterNodes, benchClusterNodes)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	ports, err := natsconf.FreePorts(2 * benchClusterNodes)
	if err != nil {
		return s, err
	}
	routes := make([]string, benchClusterNodes)
	urls := make([]string, benchClusterNodes)
	for i := range benchClusterNodes {
		routes[i] = "nats-route://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[benchClusterNodes+i]))
		urls[i] = "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i]))
	}
	for i := range benchClusterNodes {
		conf := filepath.Join(dir, fmt.Sprintf("node-%d.conf", i+1))
		body := fmt.Sprintf(benchNodeConf, i+1, ports[i], filepath.Join(dir, fmt.Sprintf("store-%d", i+1)), ports[benchClusterNodes+i], strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return s, err
		}
		cmd := exec.Command(binary, "-c", conf)
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("node-%d.log", i+1)))
		if err != nil {
			return s, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		demo.DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			logf.Close()
			return s, fmt.Errorf("start %s: %w", binary, err)
		}
		logf.Close()
		s.procs = append(s.procs, cmd)
	}
	s.url = strings.Join(urls, ",")
	if s.nc, err = natsconf.Connect(natsconf.ConnectConfig{URL: s.url, Name: "salvage bench", Wait: true}); err != nil {
		return s, err
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		return s, err
	}
	// Ready once the meta group has a leader and an R3 stream's group
	// forms.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.js.CreateStream(cctx, jetstream.StreamConfig{Name: "BENCH_READY", Subjects: []string{"bench.ready"}, Replicas: benchClusterNodes})
		cancel()
		if err == nil {
			_ = s.js.DeleteStream(ctx, "BENCH_READY")
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return s, fmt.Errorf("the %d-node cluster did not form in 30s: %w (logs in %s)", benchClusterNodes, err, dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
