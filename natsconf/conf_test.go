package natsconf_test

import (
	"context"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
)

// freePort reserves a loopback port and releases it for a server.
func freePort(t *testing.T) int {
	t.Helper()
	ports, err := natsconf.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// startConf starts a server from a config file shipped in natsconf, on
// a free client port and a temporary store; ready waits for it.
func startConf(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Port, opts.StoreDir, opts.NoSigs = freePort(t), t.TempDir(), true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

func ready(t *testing.T, ns *server.Server) {
	t.Helper()
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatalf("%s not ready", ns.Name())
	}
}

// TestShippedConfigs: the config files in natsconf say what the README
// says (JetStream, sync_interval, payload, cluster and routes), and they
// run: the single node takes a stream, the three cluster nodes elect a
// meta leader and take an R3 stream.
func TestShippedConfigs(t *testing.T) {
	single, err := server.ProcessConfigFile("single.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !single.JetStream || !single.SyncAlways || single.MaxPayload != 1<<20 || single.Port != 4222 || single.Host != "127.0.0.1" {
		t.Fatalf("single.conf: jetstream %v, sync always %v, max_payload %d, listen %s:%d", single.JetStream, single.SyncAlways, single.MaxPayload, single.Host, single.Port)
	}
	ns := startConf(t, single)
	ready(t, ns)
	js, _ := jetstream.New(salvagetest.Connect(t, ns.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}

	// The cluster: the files' ports are moved to free ones, routes too.
	var nodes []*server.Options
	routePorts := map[int]int{}
	for i := 1; i <= 3; i++ {
		o, err := server.ProcessConfigFile(filepath.Join(".", "cluster-"+strconv.Itoa(i)+".conf"))
		if err != nil {
			t.Fatal(err)
		}
		if !o.JetStream || o.SyncAlways || o.Cluster.Name != "salvage" || len(o.Routes) != 3 || o.ServerName != "salvage-"+strconv.Itoa(i) || o.Port != 4221+i {
			t.Fatalf("cluster-%d.conf: jetstream %v, sync always %v, cluster %q, %d routes, name %q, port %d", i, o.JetStream, o.SyncAlways, o.Cluster.Name, len(o.Routes), o.ServerName, o.Port)
		}
		routePorts[o.Cluster.Port] = freePort(t)
		nodes = append(nodes, o)
	}
	for _, o := range nodes {
		o.Cluster.Port = routePorts[o.Cluster.Port]
		for k, r := range o.Routes {
			p, _ := strconv.Atoi(r.Port())
			o.Routes[k] = &url.URL{Scheme: r.Scheme, Host: net.JoinHostPort(r.Hostname(), strconv.Itoa(routePorts[p]))}
		}
	}
	var servers []*server.Server
	for _, o := range nodes {
		servers = append(servers, startConf(t, o))
	}
	for _, s := range servers {
		ready(t, s)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return true
			}
		}
		return false
	}, "a JetStream meta leader among the three nodes")
	js, _ = jetstream.New(salvagetest.Connect(t, servers[0].ClientURL()))
	salvagetest.Eventually(t, time.Minute, func() bool {
		// A request the forming cluster drops is asked again.
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := js.CreateStream(actx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3})
		return err == nil
	}, "an R3 stream on the cluster")
}
