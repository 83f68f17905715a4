// Package natstest starts real embedded JetStream servers for tests: port -1,
// store in t.TempDir(), shut down in t.Cleanup. Salvage's tests never mock NATS.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/natsconf"
)

// Bundle is what an integration test needs: a server, a connection and a
// JetStream handle on it.
type Bundle struct {
	Server *natsconf.Server
	Conn   *nats.Conn
	JS     jetstream.JetStream
	// StoreDir is the server's JetStream directory, for restart tests.
	StoreDir string
}

// Option tweaks the server a test starts.
type Option func(*natsconf.ServerConfig)

// WithSyncInterval sets the server's sync_interval (natsconf.SyncAlways,
// 0 for the server default, or a duration). Tests default to the server
// default: fsync on every write would only slow them down.
func WithSyncInterval(d time.Duration) Option {
	return func(c *natsconf.ServerConfig) { c.SyncInterval = d }
}

// WithStoreDir reuses a store directory, to restart a server on its data.
func WithStoreDir(dir string) Option {
	return func(c *natsconf.ServerConfig) { c.StoreDir = dir }
}

// Start starts an embedded JetStream server on a free loopback port with
// its store in t.TempDir(), connects to it, and registers cleanup.
func Start(t testing.TB, opts ...Option) *Bundle {
	t.Helper()
	cfg := natsconf.DefaultServerConfig()
	cfg.Port = -1
	cfg.StoreDir = t.TempDir()
	cfg.SyncInterval = 0
	cfg.ServerName = "salvage-test"
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := natsconf.StartServer(cfg)
	if err != nil {
		t.Fatalf("natstest: start server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc := Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return &Bundle{Server: srv, Conn: nc, JS: js, StoreDir: cfg.StoreDir}
}

// Connect opens one more connection to url, closed in t.Cleanup.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := natsconf.Connect(natsconf.ConnectConfig{URL: url, Name: t.Name()})
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Eventually polls cond every 20ms until it returns true or timeout passes,
// then fails the test with msg. Tests use it instead of fixed sleeps.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: timed out after %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
