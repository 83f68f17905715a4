package natsconf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// clusterNodesDefault is the size of a cluster StartCluster starts: the
// smallest that keeps a quorum (2 of 3) when one node is down.
const clusterNodesDefault = 3

// ClusterConfig configures a JetStream cluster of in-process servers on
// loopback, for tests and benchmarks. Zero fields take their defaults;
// Dir is required.
type ClusterConfig struct {
	// Name is the cluster's name; nodes are <Name>-1, <Name>-2, … .
	// Default "salvage".
	Name string
	// Nodes is how many servers. Default clusterNodesDefault.
	Nodes int
	// Dir holds one store directory per node (<Dir>/<node name>).
	Dir string
	// SyncInterval is each node's sync_interval (see ServerConfig). With
	// replicas, a write is acknowledged once a quorum holds it; the
	// server's default (0) is what a cluster usually runs.
	SyncInterval time.Duration
	// Logging turns on the servers' own log output.
	Logging bool
}

// Cluster is a running in-process JetStream cluster. Its nodes keep their
// client and route ports across Stop and Restart, so clients reconnect to
// a restarted node and the others route to it again.
type Cluster struct {
	cfg   ClusterConfig
	mu    sync.Mutex
	nodes []*Server
	confs []ServerConfig
}

// StartCluster starts cfg.Nodes servers that route to each other and
// blocks until the JetStream meta group has a leader. It picks free
// loopback ports; when one was taken before its server bound it, the
// cluster is started again on fresh ports (at most startAttempts times).
func StartCluster(cfg ClusterConfig) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: ClusterConfig.Dir is empty", ErrInvalidConfig)
	}
	if cfg.Name == "" {
		cfg.Name = "salvage"
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = clusterNodesDefault
	}
	// The ports are picked free and bound a moment later, so a server of
	// another process (or test) can take one in between; that start is
	// made again on fresh ports, a bounded number of times.
	var err error
	for range startAttempts {
		var c *Cluster
		if c, err = startClusterOnce(cfg); err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
		for i := range cfg.Nodes {
			if rmErr := os.RemoveAll(filepath.Join(cfg.Dir, nodeName(cfg, i))); rmErr != nil {
				return nil, fmt.Errorf("natsconf: clear a node's store after a port clash: %w", rmErr)
			}
		}
	}
	return nil, err
}

// clusterReadyTimeout bounds how long a node may take to accept
// connections: three nodes starting at once on a loaded machine took more
// than the single server's 10 s (a CI run under load). A bound on the
// wait, not a speed.
const clusterReadyTimeout = time.Minute

// startAttempts bounds how often StartCluster picks fresh ports after one
// it picked was taken before its server bound it.
const startAttempts = 3

// pickPorts picks a cluster's ports; a test puts a taken one among them.
var pickPorts = FreePorts

// nodeName is the server name of node i of cfg's cluster.
func nodeName(cfg ClusterConfig, i int) string { return cfg.Name + "-" + strconv.Itoa(i+1) }

// startClusterOnce starts cfg's cluster on ports it picks free.
func startClusterOnce(cfg ClusterConfig) (*Cluster, error) {
	ports, err := pickPorts(2 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	routes := make([]string, cfg.Nodes)
	for i := range cfg.Nodes {
		routes[i] = "nats-route://" + net.JoinHostPort(HostDefault, strconv.Itoa(ports[cfg.Nodes+i]))
	}
	c := &Cluster{cfg: cfg, nodes: make([]*Server, cfg.Nodes)}
	for i := range cfg.Nodes {
		name := nodeName(cfg, i)
		c.confs = append(c.confs, ServerConfig{
			Host: HostDefault, Port: ports[i], StoreDir: filepath.Join(cfg.Dir, name), SyncInterval: cfg.SyncInterval,
			ServerName: name, Logging: cfg.Logging, ClusterName: cfg.Name, ReadyTimeout: clusterReadyTimeout,
			ClusterListen: net.JoinHostPort(HostDefault, strconv.Itoa(ports[cfg.Nodes+i])), Routes: routes,
		})
	}
	// The nodes start together, each on its own goroutine.
	errs := make([]error, cfg.Nodes)
	var wg sync.WaitGroup
	for i := range cfg.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nodes[i], errs[i] = StartServer(c.confs[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Shutdown()
		return nil, err
	}
	if err := c.WaitReady(30 * time.Second); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// URLs is every node's client URL, comma-separated, as clients take them.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.confs))
	for i, sc := range c.confs {
		urls[i] = "nats://" + net.JoinHostPort(sc.Host, strconv.Itoa(sc.Port))
	}
	return strings.Join(urls, ",")
}

// Names are the nodes' server names, in order.
func (c *Cluster) Names() []string {
	names := make([]string, len(c.confs))
	for i, sc := range c.confs {
		names[i] = sc.ServerName
	}
	return names
}

// Index returns the index of the node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, sc := range c.confs {
		if sc.ServerName == name {
			return i
		}
	}
	return -1
}

// Node returns node i, nil while it is stopped.
func (c *Cluster) Node(i int) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Stop shuts node i down; its store stays for Restart.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	n.Shutdown()
}

// Restart starts node i again on its store directory and ports.
func (c *Cluster) Restart(i int) error {
	n, err := StartServer(c.confs[i])
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
	return nil
}

// WaitReady blocks until a running node leads the JetStream meta group,
// knows every running node online (so an R3 stream can be placed) and
// every running node is current with it, or timeout passes.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		running, peers, current := 0, 0, true
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			running++
			if n.ns.JetStreamIsLeader() {
				// The peers the leader knows online, with their stats:
				// what placing an R3 stream needs.
				peers = len(n.ns.JetStreamClusterPeers())
			}
			current = current && n.ns.JetStreamIsCurrent()
		}
		c.mu.Unlock()
		if peers == running && current {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: cluster %s has no JetStream meta leader after %s", ErrServerNotReady, c.cfg.Name, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Shutdown stops every running node.
func (c *Cluster) Shutdown() {
	for i := range c.nodes {
		if c.Node(i) != nil {
			c.Stop(i)
		}
	}
}

// clusterOptions makes opts one node of cfg's cluster.
func clusterOptions(opts *server.Options, cfg ServerConfig) error {
	host, port, err := net.SplitHostPort(cfg.ClusterListen)
	if err != nil {
		return fmt.Errorf("%w: ClusterListen %q: %v", ErrInvalidConfig, cfg.ClusterListen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("%w: ClusterListen %q: bad port", ErrInvalidConfig, cfg.ClusterListen)
	}
	opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: host, Port: p}
	opts.Routes = server.RoutesFromStr(strings.Join(cfg.Routes, ","))
	return nil
}

// FreePorts reserves n distinct free loopback ports and releases them for
// servers to take (StartCluster's, or processes a benchmark starts).
func FreePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(HostDefault, "0"))
		if err != nil {
			return nil, fmt.Errorf("natsconf: reserve a port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
