package consumers_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/deadletter"
	"github.com/salvagehq/salvage/consumers/splitter"
	"github.com/salvagehq/salvage/consumers/worker"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// TestRolesSurviveServerRestart: NATS going away is an infrastructure
// error (invariant 8): roles wait it out, keep running, and finish jobs
// submitted after the server is back.
func TestRolesSurviveServerRestart(t *testing.T) {
	t.Parallel()
	cfg := natsconf.DefaultServerConfig()
	cfg.Port, cfg.StoreDir, cfg.SyncInterval = -1, t.TempDir(), 0
	srv, err := natsconf.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Port = srv.NATS().Addr().(*net.TCPAddr).Port
	nc, err := natsconf.Connect(natsconf.ConnectConfig{URL: srv.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	opts := streams.Options{AckWait: 2 * time.Second, MaxDeliver: 3}
	if err := streams.Provision(ctx, js, opts); err != nil {
		t.Fatal(err)
	}
	stores, err := kv.Provision(ctx, js, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{stores: stores, reg: mustRegistry(t), opts: opts, ctx: ctx, wg: &sync.WaitGroup{}}
	if err := provisionPipelines(ctx, js, b.reg.Names(), opts); err != nil {
		t.Fatal(err)
	}
	sp, _ := splitter.New(js, stores, splitter.Config{Registry: b.reg})
	dl, _ := deadletter.New(js, stores, deadletter.Config{SweepInterval: 200 * time.Millisecond})
	w, _ := worker.New(js, stores, worker.Config{ID: "w", Registry: b.reg, AckWait: opts.AckWait, Retry: testRetry, Breakers: testBreakers})
	errs := make(chan error, 3)
	for _, run := range []func(context.Context) error{sp.Run, dl.Run, w.Run} {
		b.wg.Add(1)
		go func() { defer b.wg.Done(); errs <- run(ctx) }()
	}
	defer func() { cancel(); b.wg.Wait(); srv.Shutdown() }()

	srv.Shutdown()
	salvagetest.Eventually(t, time.Minute, func() bool { return nc.Status() != nats.CONNECTED }, "the client to see the outage")
	select {
	case err := <-errs:
		t.Fatalf("a role ended during the outage: %v", err)
	default:
	}
	if srv, err = natsconf.StartServer(cfg); err != nil {
		t.Fatal(err)
	}
	// A publish right after the restart may fail while the client
	// reconnects: it is tried again until one is accepted.
	var id string
	salvagetest.Eventually(t, time.Minute, func() bool {
		id = submitTo(t, ctx, js, modeOK, modeFailOnce)
		return id != ""
	}, "a job to be accepted after the restart")
	var j kv.Job
	salvagetest.Eventually(t, 2*time.Minute, func() bool {
		var err error
		j, err = stores.Jobs.Get(ctx, id)
		return err == nil && j.Status == salvagetype.JobDone
	}, "the job to be done after the restart (last: %+v)", &j)
	select {
	case err := <-errs:
		t.Fatalf("a role ended: %v", err)
	default:
	}
}
