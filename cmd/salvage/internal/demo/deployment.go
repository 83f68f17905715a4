package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/natsconf"
)

// Deployment is a demo's embedded server, in-process roles and worker
// processes.
type Deployment struct {
	URL          string
	srv          *natsconf.Server
	srvCfg       natsconf.ServerConfig
	nc           *nats.Conn
	JS           jetstream.JetStream
	Client       *salvage.Client
	Workers      []*Worker
	syncInterval string
	// dash and dashDone are the dashboard --keep serves from the start.
	dash     *dashboard.Server
	dashDone chan struct{}
	log      zerolog.Logger
	closers  []func()
}

// Close stops everything, last started first.
func (d *Deployment) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// StartDeployment starts an embedded server in a temporary directory, the
// dead-letter and recovery roles in process, and o.workers worker
// processes. The caller closes it. On an error it has closed what it
// started, and the deployment it returns only says the sync interval it
// was to run with (for the report).
func (e *Env) StartDeployment(ctx context.Context, o *Opts, log zerolog.Logger) (_ *Deployment, err error) {
	d := &Deployment{log: log}
	defer func() {
		if err != nil {
			d.Close()
			d.closers = nil
		}
	}()
	syncInterval, err := natsconf.ParseSyncInterval(o.Sync)
	if err != nil {
		return d, err
	}
	d.syncInterval = natsconf.SyncIntervalString(syncInterval)
	o.Run.ResolveJournal(true, syncInterval)
	dir, err := os.MkdirTemp("", "salvage-demo-")
	if err != nil {
		return d, err
	}
	d.closers = append(d.closers, func() { os.RemoveAll(dir) })
	sc := natsconf.DefaultServerConfig()
	sc.Port, sc.StoreDir, sc.SyncInterval, sc.ServerName = -1, dir, syncInterval, "salvage-demo"
	srv, err := natsconf.StartServer(sc)
	if err != nil {
		return d, err
	}
	d.srv = srv
	d.closers = append(d.closers, func() { d.srv.Shutdown() })
	d.URL = srv.ClientURL()
	// A restart comes back on the same port, so clients reconnect.
	sc.Port = srv.NATS().Addr().(*net.TCPAddr).Port
	d.srvCfg = sc
	if d.nc, err = natsconf.Connect(natsconf.ConnectConfig{URL: d.URL, Name: "salvage demo"}); err != nil {
		return d, err
	}
	d.closers = append(d.closers, d.nc.Close)
	if d.JS, err = jetstream.New(d.nc); err != nil {
		return d, err
	}
	roles := []salvage.Role{salvage.RoleDeadLetter, salvage.RoleRecovery}
	if o.keep || o.api {
		// What an operator types while watching (dlq, pause, approve)
		// goes through salvage.api; chaos asks it for every job.
		roles = append(roles, salvage.RoleAPI)
	}
	mcp, closeMCP := operator.MCPFor(roles)
	d.closers = append(d.closers, closeMCP)
	cfg, err := o.Run.Config(roles, mcp, log)
	if err != nil {
		return d, err
	}
	cfg.SweepInterval = 2 * time.Second
	tp, stopTracing, err := operator.StartTracing(ctx, log)
	if err != nil {
		return d, err
	}
	d.closers = append(d.closers, stopTracing)
	cfg.TracerProvider = tp
	if d.Client, err = salvage.NewClient(d.JS, cfg); err != nil {
		return d, err
	}
	if err := d.Client.Start(ctx); err != nil {
		return d, err
	}
	d.closers = append(d.closers, func() { _ = d.Client.Stop(context.WithoutCancel(ctx)) })
	log.Info().Str("url", d.URL).Str("sync_interval", d.syncInterval).Str("journal_writes", o.Run.JournalWrites).Msg("embedded server ready")
	if o.keep {
		d.serveDashboard(ctx, o.notice)
	}
	d.Workers, err = e.startWorkers(ctx, *o, d.URL)
	d.closers = append(d.closers, func() { StopWorkers(d.Workers) })
	return d, err
}

// restartServer shuts the embedded server down and starts it again on its
// store and port; every client reconnects by itself.
func (d *Deployment) restartServer() error {
	d.srv.Shutdown()
	srv, err := natsconf.StartServer(d.srvCfg)
	if err != nil {
		return err
	}
	d.srv = srv
	return nil
}

// submit submits one job per input, waits until every job is recorded
// (all its chunks published), then — with kill — SIGKILLs a worker
// process holding a chunk mid-way, never one still splitting a job.
func (d *Deployment) submit(ctx context.Context, o Opts, pipeline string, inputs []any) ([]string, *kill, error) {
	jobs := make([]string, 0, len(inputs))
	for _, in := range inputs {
		id, err := d.Client.JobSubmit(ctx, pipeline, in, nil)
		if err != nil {
			return nil, nil, err
		}
		jobs = append(jobs, id)
		d.log.Info().Str("job_id", id).Str("pipeline", pipeline).Msg("job submitted")
	}
	for _, id := range jobs {
		for {
			if _, err := d.Client.JobGet(ctx, id); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return jobs, nil, fmt.Errorf("job %s not accepted: %w", id, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if !o.kill {
		return jobs, nil, nil
	}
	k, err := killMidChunk(ctx, d.Client, jobs, d.Workers)
	if err != nil {
		return jobs, nil, err
	}
	d.log.Warn().Str("worker", k.worker).Str("job_id", k.job).Int("chunk", k.chunk).Int("stage", k.stage).Msg("worker process killed with SIGKILL mid-chunk")
	return jobs, &k, nil
}

// serveDashboard starts a dashboard over the demo's server (--keep) and
// says on w where both are, before the run starts: the demo can be
// watched as it happens. It stops when the demo closes.
func (d *Deployment) serveDashboard(ctx context.Context, w io.Writer) {
	srv, err := dashboard.Listen(d.JS, d.Client, dashboard.Config{Addr: "127.0.0.1:0", Logger: &d.log})
	if err != nil {
		fmt.Fprintf(w, "salvage demo --keep: no dashboard: %v\n", err)
		return
	}
	dctx, stop := context.WithCancel(ctx)
	d.dash, d.dashDone = srv, make(chan struct{})
	go func() { defer close(d.dashDone); _ = srv.Run(dctx) }()
	d.closers = append(d.closers, func() { stop(); <-d.dashDone })
	fmt.Fprintf(w, "The demo's server and dashboard, live now and up after the report until Ctrl-C:\n  NATS_URL=%s\n  DASHBOARD=%s\n", d.URL, srv.URL())
	fmt.Fprintf(w, "  try: salvage jobs --server %s   salvage dlq ls --server %s\n", d.URL, d.URL)
}

// keepRunning waits for ctx (Ctrl-C) after the report, with the server and
// the dashboard --keep started still up: a newcomer can look at what the
// demo just did before it is gone.
func (e *Env) keepRunning(ctx context.Context, d *Deployment) {
	fmt.Fprintf(e.Stderr, "\nThe demo is over; its server stays up until Ctrl-C:\n  NATS_URL=%s\n", d.URL)
	if d.dash != nil {
		fmt.Fprintf(e.Stderr, "  DASHBOARD=%s\n", d.dash.URL())
	}
	<-ctx.Done()
}
