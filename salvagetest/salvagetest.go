// Package salvagetest is Salvage's test kit: a real embedded JetStream
// server in a temporary directory, a started Client with given pipelines,
// one agent run against given tools, a wait for a job, a wait until a
// job's records settled (Settled), and a TestMain
// check that no goroutine outlives a package's tests (VerifyNoLeaks). It
// never mocks NATS. Salvage's own tests use it; so can a team testing its
// pipelines.
package salvagetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/natsconf"
)

// Server is an embedded JetStream server for one test, with a connection.
type Server struct {
	// NATS is the server; NATS.Shutdown and natsconf.StartServer on
	// StoreDir restart it.
	NATS *natsconf.Server
	// Conn and JS are a connection to it, closed in t.Cleanup.
	Conn *nats.Conn
	JS   jetstream.JetStream
	// StoreDir is its JetStream directory.
	StoreDir string

	cfg natsconf.ServerConfig
}

// Option tweaks the server StartServer starts.
type Option func(*natsconf.ServerConfig)

// WithSyncInterval sets the server's sync_interval (natsconf.SyncAlways,
// 0 for the server's default, or a duration). Tests default to the
// server's default: fsync on every write only slows them down.
func WithSyncInterval(d time.Duration) Option {
	return func(c *natsconf.ServerConfig) { c.SyncInterval = d }
}

// WithStoreDir starts the server on an existing store, to restart one.
func WithStoreDir(dir string) Option {
	return func(c *natsconf.ServerConfig) { c.StoreDir = dir }
}

// StartServer starts an embedded JetStream server on a free loopback port
// with its store in t.TempDir(), connects to it, and shuts both down in
// t.Cleanup. It fails the test if the server does not start.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := natsconf.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), ServerName: "salvage-test"}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := natsconf.StartServer(cfg)
	if err != nil {
		t.Fatalf("salvagetest: start server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	// A restart comes back on the same port, where clients reconnect.
	cfg.Listen = srv.NATS().Addr().String()
	nc := Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("salvagetest: jetstream: %v", err)
	}
	return &Server{NATS: srv, Conn: nc, JS: js, StoreDir: cfg.StoreDir, cfg: cfg}
}

// Restart shuts the server down and starts it again on the same port and
// store, as a crash and a restart would; connections, and the clients on
// them, reconnect by themselves. It is not safe to call concurrently.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.NATS.Shutdown()
	srv, err := natsconf.StartServer(s.cfg)
	if err != nil {
		t.Fatalf("salvagetest: restart server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	s.NATS = srv
}

// Connect opens one more connection to url, closed in t.Cleanup.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := natsconf.Connect(natsconf.ConnectConfig{URL: url, Name: t.Name()})
	if err != nil {
		t.Fatalf("salvagetest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Client returns a started client on s with cfg (nil: every default),
// stopped in t.Cleanup. Unset, tier 1 and tier 2 are made fast for tests:
// retries wait at most 5ms, a chunk is redelivered after 2s, the sweeper
// runs every 250ms and a job for a pipeline nobody ever ran is rejected
// after 500ms.
func (s *Server) Client(t testing.TB, cfg *salvage.Config) *salvage.Client {
	t.Helper()
	var c salvage.Config
	if cfg != nil {
		c = *cfg
	}
	if c.RetryBase == 0 && c.RetryMax == 0 {
		c.RetryBase, c.RetryMax = time.Millisecond, 5*time.Millisecond
	}
	if c.AckWait == 0 {
		c.AckWait = 2 * time.Second
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 250 * time.Millisecond
	}
	if c.UnknownPipelineWait == 0 {
		c.UnknownPipelineWait = 500 * time.Millisecond
	}
	client, err := salvage.NewClient(s.JS, &c)
	if err != nil {
		t.Fatalf("salvagetest: new client: %v", err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatalf("salvagetest: start client: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return client
}

// WaitJob waits up to timeout for job id to finish and returns it; it
// fails the test on a rejection or when the time is up.
func WaitJob(t testing.TB, c *salvage.Client, id string, timeout time.Duration) *salvage.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	j, err := c.JobWait(ctx, id)
	if err != nil {
		t.Fatalf("salvagetest: job %s: %v", id, err)
	}
	return j
}

// AgentRun is what RunAgent saw.
type AgentRun struct {
	// Job is the finished job.
	Job *salvage.Job
	// Output is the agent's output as JSON (nil when the chunk failed).
	Output json.RawMessage
	// Calls are the journaled calls the agent made, in order.
	Calls []salvage.Call
}

// RunAgent runs agent once, on a real server and worker, as the only
// agent of a one-stage pipeline with tools, on input (which must marshal
// to JSON), and returns its output and the calls it made. A failure of the
// agent is not a test failure: the job then ends incomplete, without
// output.
func RunAgent(t testing.TB, agent salvage.Agent, tools []salvage.Tool, input any) AgentRun {
	t.Helper()
	p := &salvage.Pipeline{
		Name:   "agent-test",
		Split:  func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{{Name: "agent", Agents: []salvage.Agent{agent}}},
		Tools:  tools,
	}
	c := StartServer(t).Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, p.Name, input, nil)
	if err != nil {
		t.Fatalf("salvagetest: submit: %v", err)
	}
	run := AgentRun{Job: WaitJob(t, c, id, time.Minute)}
	if res, err := c.JobResults(ctx, id); err == nil && res[1] != nil {
		var outs []salvage.StageOutput
		if json.Unmarshal(res[1], &outs) == nil && len(outs) == 1 {
			run.Output = outs[0].Output
		}
	}
	tr, err := c.JobTrace(ctx, id)
	if err != nil {
		t.Fatalf("salvagetest: trace: %v", err)
	}
	if len(tr.Chunks) == 1 {
		run.Calls = tr.Chunks[0].Calls
	}
	return run
}

// Eventually polls cond every 20ms until it returns true or timeout
// passes, then fails the test with msg. Tests use it instead of sleeps.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if !poll(ctx, cond) {
		t.Fatalf("salvagetest: timed out after %s: "+msg, append([]any{timeout}, args...)...)
	}
}

// pollEvery is how often Eventually and Settled look again.
const pollEvery = 20 * time.Millisecond

// poll asks cond every pollEvery until it holds (true) or ctx ends
// (false).
func poll(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
