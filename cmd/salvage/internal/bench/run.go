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
	for _, sec := range b.sections(r) {
		if !slices.Contains(b.o.only, sec.name) {
			continue
		}
		if err := sec.run(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", sec.what, err)
		}
	}
	r.WallSecs = time.Since(start).Seconds()
	return r, nil
}

// section is one part of the report: the name --only gives it, what its
// errors say it was, and its run, which fills r in.
type section struct {
	name, what string
	run        func(ctx context.Context) error
}

// sections are the report's parts, in the order they run.
func (b *bench) sections(r *benchReport) []section {
	// cluster runs a part that needs nats-server processes, or says in
	// skipped why it could not.
	cluster := func(skipped *string, run func(ctx context.Context, bin string) error) func(context.Context) error {
		return func(ctx context.Context) error {
			bin, err := natsServerBinary(b.o.natsServer)
			if err != nil {
				*skipped = err.Error()
				return nil
			}
			return run(ctx, bin)
		}
	}
	return []section{
		{"throughput", "throughput", func(ctx context.Context) error { return b.throughputs(ctx, r) }},
		{"critical", "critical path", func(ctx context.Context) error {
			c, err := b.critical(ctx)
			r.Critical = &c
			return err
		}},
		{"crash", "crash to resume", func(ctx context.Context) error {
			c, err := b.crash(ctx)
			r.Crash = &c
			return err
		}},
		{"growth", "cost growth", func(ctx context.Context) (err error) {
			r.Growth, r.Storage, err = b.growth(ctx)
			return err
		}},
		{"soak", "soak", func(ctx context.Context) error {
			k, err := b.soak(ctx, b.o.soak)
			r.Soak = &k
			return err
		}},
		{"ramp", "release ramp", func(ctx context.Context) error {
			k, err := b.ramp(ctx)
			r.Ramp = &k
			return err
		}},
		{"fleet", "fleet", cluster(&r.FleetSkipped, func(ctx context.Context, bin string) (err error) {
			r.Fleet, err = b.fleet(ctx, bin)
			return err
		})},
		{"partitions", "partitions", cluster(&r.PartitionsSkipped, func(ctx context.Context, bin string) (err error) {
			r.Partitions, err = b.partitions(ctx, bin, []int{1, benchClusterNodes})
			return err
		})},
		{"limits", "limits", cluster(&r.LimitsSkipped, func(ctx context.Context, bin string) (err error) {
			r.Limits, err = b.limits(ctx, bin)
			return err
		})},
		{"tenants", "tenants", cluster(&r.TenantsSkipped, func(ctx context.Context, bin string) (err error) {
			r.Tenants, err = b.tenants(ctx, bin)
			return err
		})},
	}
}

// throughputs runs the reference shape at sync_interval always and at the
// server default, then on three nats-server processes with R3 streams
// and buckets beside the single node's (or says why not).
func (b *bench) throughputs(ctx context.Context, r *benchReport) error {
	for _, si := range []time.Duration{natsconf.SyncAlways, 0} {
		t, err := b.throughput(ctx, si, "")
		if err != nil {
			return fmt.Errorf("sync_interval %s: %w", natsconf.SyncIntervalString(si), err)
		}
		r.Throughput = append(r.Throughput, t)
	}
	bin, err := natsServerBinary(b.o.natsServer)
	if err != nil {
		r.ClusterSkipped = err.Error()
		return nil
	}
	t, err := b.throughput(ctx, 0, bin)
	if err != nil {
		return fmt.Errorf("on a %d-node cluster: %w", benchClusterNodes, err)
	}
	r.Throughput = append(r.Throughput, t)
	return nil
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
