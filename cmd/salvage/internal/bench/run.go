package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/natsconf"
)

// bench runs the sections of `salvage bench`.
type bench struct {
	e   *Env
	o   benchOpts
	log zerolog.Logger
}

func (b *bench) run(ctx context.Context) (*benchReport, error) {
	start := time.Now()
	r := &benchReport{Machine: machine(), GoVersion: runtime.Version()}
	if slices.Contains(b.o.only, "throughput") {
		for _, si := range []time.Duration{natsconf.SyncAlways, 0} {
			t, err := b.throughput(ctx, si, "")
			if err != nil {
				return nil, fmt.Errorf("throughput, sync_interval %s: %w", natsconf.SyncIntervalString(si), err)
			}
			r.Throughput = append(r.Throughput, t)
		}
		// The same shape on three nats-server processes with R3 streams
		// and buckets, beside the single node's.
		if bin, err := natsServerBinary(b.o.natsServer); err != nil {
			r.ClusterSkipped = err.Error()
		} else {
			t, err := b.throughput(ctx, 0, bin)
			if err != nil {
				return nil, fmt.Errorf("throughput on a %d-node cluster: %w", benchClusterNodes, err)
			}
			r.Throughput = append(r.Throughput, t)
		}
	}
	if slices.Contains(b.o.only, "critical") {
		c, err := b.critical(ctx)
		if err != nil {
			return nil, fmt.Errorf("critical path: %w", err)
		}
		r.Critical = &c
	}
	if slices.Contains(b.o.only, "crash") {
		c, err := b.crash(ctx)
		if err != nil {
			return nil, fmt.Errorf("crash to resume: %w", err)
		}
		r.Crash = &c
	}
	if slices.Contains(b.o.only, "growth") {
		g, s, err := b.growth(ctx)
		if err != nil {
			return nil, fmt.Errorf("cost growth: %w", err)
		}
		r.Growth, r.Storage = g, s
	}
	if slices.Contains(b.o.only, "soak") {
		k, err := b.soak(ctx, b.o.soak)
		if err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
		r.Soak = &k
	}
	if slices.Contains(b.o.only, "listing") {
		l, err := b.listing(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing: %w", err)
		}
		r.Listing = &l
	}
	if slices.Contains(b.o.only, "ramp") {
		k, err := b.ramp(ctx)
		if err != nil {
			return nil, fmt.Errorf("release ramp: %w", err)
		}
		r.Ramp = &k
	}
	if slices.Contains(b.o.only, "fleet") {
		if bin, err := natsServerBinary(b.o.natsServer); err != nil {
			r.FleetSkipped = err.Error()
		} else if r.Fleet, err = b.fleet(ctx, bin); err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
	}
	if slices.Contains(b.o.only, "dashboard") {
		d, err := b.dashboard(ctx)
		if err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		r.Dashboard = d
	}
	if slices.Contains(b.o.only, "partitions") {
		if bin, err := natsServerBinary(b.o.natsServer); err != nil {
			r.PartitionsSkipped = err.Error()
		} else if r.Partitions, err = b.partitions(ctx, bin, []int{1, benchClusterNodes}); err != nil {
			return nil, fmt.Errorf("partitions: %w", err)
		}
	}
	if slices.Contains(b.o.only, "limits") {
		if bin, err := natsServerBinary(b.o.natsServer); err != nil {
			r.LimitsSkipped = err.Error()
		} else if r.Limits, err = b.limits(ctx, bin); err != nil {
			return nil, fmt.Errorf("limits: %w", err)
		}
	}
	if slices.Contains(b.o.only, "tenants") {
		if bin, err := natsServerBinary(b.o.natsServer); err != nil {
			r.TenantsSkipped = err.Error()
		} else if r.Tenants, err = b.tenants(ctx, bin); err != nil {
			return nil, fmt.Errorf("tenants: %w", err)
		}
	}
	r.WallSecs = time.Since(start).Seconds()
	return r, nil
}

// benchServer is an embedded server in a temporary directory with one
// client connection.
type benchServer struct {
	srv *natsconf.Server
	// procs are the nats-server processes of a cluster (instead of srv).
	procs []*exec.Cmd
	// url is the servers' client URLs; replicas what streams get;
	// servers says what runs, for the report.
	url      string
	replicas int
	servers  string
	nc       *nats.Conn
	js       jetstream.JetStream
	dir      string
}

func startBenchServer(si time.Duration) (*benchServer, error) {
	dir, err := os.MkdirTemp("", "salvage-bench-")
	if err != nil {
		return nil, err
	}
	sc := natsconf.DefaultServerConfig()
	sc.Port, sc.StoreDir, sc.SyncInterval, sc.ServerName = -1, dir, si, "salvage-bench"
	srv, err := natsconf.StartServer(sc)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &benchServer{srv: srv, dir: dir, url: srv.ClientURL(), replicas: 1, servers: "1 embedded"}
	if s.nc, err = natsconf.Connect(natsconf.ConnectConfig{URL: s.url, Name: "salvage bench"}); err != nil {
		s.close()
		return nil, err
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *benchServer) close() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
	}
	for _, p := range s.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range s.procs {
		_ = p.Wait()
	}
	os.RemoveAll(s.dir)
}

// startClient starts a client with cfg on s, its logs to the bench's
// logger; stop stops it.
func (b *bench) startClient(ctx context.Context, s *benchServer, cfg *salvage.Config) (c *salvage.Client, stop func(), err error) {
	cfg.Logger = b.log
	cfg.Replicas = s.replicas
	if c, err = salvage.NewClient(s.js, cfg); err != nil {
		return nil, nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, nil, err
	}
	return c, func() { _ = c.Stop(context.WithoutCancel(ctx)) }, nil
}
