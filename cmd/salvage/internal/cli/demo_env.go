package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/cmd/salvage/internal/app"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/streams"
)

// demoEnv is a demo's embedded server, in-process roles and worker
// processes.
type demoEnv struct {
	url          string
	srv          *natsconf.Server
	srvCfg       natsconf.ServerConfig
	nc           *nats.Conn
	js           jetstream.JetStream
	stores       *kv.Stores
	workers      []*worker
	syncInterval string
	log          zerolog.Logger
	closers      []func()
}

// close stops everything, last started first.
func (d *demoEnv) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// startDemoEnv starts an embedded server in a temporary directory, the
// dead-letter and recovery roles in process, and o.workers worker
// processes. The caller closes it.
func (e *env) startDemoEnv(ctx context.Context, o *demoOpts, log zerolog.Logger) (*demoEnv, error) {
	d := &demoEnv{log: log}
	syncInterval, err := natsconf.ParseSyncInterval(o.sync)
	if err != nil {
		return d, err
	}
	d.syncInterval = natsconf.SyncIntervalString(syncInterval)
	o.run.resolveJournal(true, syncInterval)
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
	d.url = srv.ClientURL()
	// A restart comes back on the same port, so clients reconnect.
	sc.Port = srv.NATS().Addr().(*net.TCPAddr).Port
	d.srvCfg = sc
	if d.nc, err = natsconf.Connect(natsconf.ConnectConfig{URL: d.url, Name: "salvage demo"}); err != nil {
		return d, err
	}
	d.closers = append(d.closers, d.nc.Close)
	if d.js, err = jetstream.New(d.nc); err != nil {
		return d, err
	}
	cfg := o.run.config([]string{app.RoleDeadLetter, app.RoleRecovery})
	cfg.SweepInterval = 2 * time.Second
	cfg.Logger = log
	if d.stores, err = app.Provision(ctx, d.js, cfg); err != nil {
		return d, err
	}
	log.Info().Str("url", d.url).Str("sync_interval", d.syncInterval).Str("journal_writes", o.run.journalWrites).Msg("embedded server ready")
	roleCtx, stopRoles := context.WithCancel(ctx)
	var roles sync.WaitGroup
	roles.Add(1)
	go func() { defer roles.Done(); _ = app.Run(roleCtx, d.js, d.stores, cfg, nil) }()
	d.closers = append(d.closers, func() { stopRoles(); roles.Wait() })
	d.workers, err = e.startWorkers(ctx, *o, d.url)
	d.closers = append(d.closers, func() { stopWorkers(d.workers) })
	return d, err
}

// restartServer shuts the embedded server down and starts it again on its
// store and port; every client reconnects by itself.
func (d *demoEnv) restartServer() error {
	d.srv.Shutdown()
	srv, err := natsconf.StartServer(d.srvCfg)
	if err != nil {
		return err
	}
	d.srv = srv
	return nil
}

// submit publishes job messages, waits until every job is accepted (all
// its chunks published), then — with kill — SIGKILLs a worker process
// holding a chunk mid-way, never one still splitting a job.
func (d *demoEnv) submit(ctx context.Context, o demoOpts, pipeline string, bodies map[string][]byte, chunks int) ([]string, *kill, error) {
	accepted := make(chan *nats.Msg, len(bodies))
	sub, err := d.nc.ChanSubscribe(streams.EventSubject("*", streams.EventAccepted), accepted)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	jobs := make([]string, 0, len(bodies))
	for id, body := range bodies {
		if _, err := d.js.PublishMsg(ctx, streams.JobMessage(pipeline, id, body, "")); err != nil {
			return nil, nil, err
		}
		jobs = append(jobs, id)
		d.log.Info().Str("job_id", id).Str("pipeline", pipeline).Int("chunks", chunks).Msg("job submitted")
	}
	for range jobs {
		select {
		case <-accepted:
		case <-ctx.Done():
			return jobs, nil, fmt.Errorf("jobs not accepted: %w", ctx.Err())
		}
	}
	if !o.kill {
		return jobs, nil, nil
	}
	k, err := killMidChunk(ctx, d.stores, jobs, chunks, d.workers)
	if err != nil {
		return jobs, nil, err
	}
	d.log.Warn().Str("worker", k.worker).Str("job_id", k.job).Int("chunk", k.chunk).Int("stage", k.stage).Msg("worker process killed with SIGKILL mid-chunk")
	return jobs, &k, nil
}
