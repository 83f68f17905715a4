package natsconf_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
)

func TestServerRestartKeepsStreams(t *testing.T) {
	dir := t.TempDir()
	cfg := natsconf.DefaultServerConfig()
	cfg.Port = -1
	cfg.StoreDir = dir
	srv, err := natsconf.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nc := salvagetest.Connect(t, srv.ClientURL())
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()
	srv.Shutdown() // idempotent

	srv2, err := natsconf.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Shutdown)
	nc2 := salvagetest.Connect(t, srv2.ClientURL())
	js2, _ := jetstream.New(nc2)
	s, err := js2.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, 1)
	if err != nil || string(m.Data) != "kept" {
		t.Fatalf("after restart: %v %+v", err, m)
	}
}

func TestStartServerRejectsBadConfig(t *testing.T) {
	cfg := natsconf.DefaultServerConfig()
	cfg.StoreDir = ""
	if _, err := natsconf.StartServer(cfg); !errors.Is(err, natsconf.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
}

func TestStartServerPortTaken(t *testing.T) {
	b := salvagetest.StartServer(t)
	cfg := natsconf.DefaultServerConfig()
	cfg.StoreDir = t.TempDir()
	cfg.Port = b.NATS.NATS().Addr().(*net.TCPAddr).Port
	if _, err := natsconf.StartServer(cfg); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second server on a taken port: err = %v, want EADDRINUSE", err)
	}
}

// TestStartServerRoutePortTaken: a taken route port is the listen error at
// once, not a server that never becomes ready.
func TestStartServerRoutePortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := natsconf.DefaultServerConfig()
	cfg.StoreDir, cfg.Port, cfg.ServerName = t.TempDir(), -1, "n1"
	cfg.ClusterName, cfg.ClusterListen = "c", l.Addr().String()
	if _, err := natsconf.StartServer(cfg); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("err = %v, want EADDRINUSE", err)
	}
}

func TestParseSyncInterval(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr error
	}{
		{"always", natsconf.SyncAlways, nil},
		{"default", 0, nil},
		{"5s", 5 * time.Second, nil},
		{"soon", 0, natsconf.ErrInvalidConfig},
		{"-1s", 0, natsconf.ErrInvalidConfig},
	}
	for _, tt := range tests {
		got, err := natsconf.ParseSyncInterval(tt.in)
		if !errors.Is(err, tt.wantErr) || got != tt.want {
			t.Errorf("ParseSyncInterval(%q) = %v, %v; want %v, %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && natsconf.SyncIntervalString(got) != map[string]string{"always": "always", "default": "default", "5s": "5s"}[tt.in] {
			t.Errorf("SyncIntervalString(%v) round trip failed", got)
		}
	}
}

// TestStoreIsLocked: nats-server does not lock its store, so two servers
// on one directory would both write it. The second start is refused with
// the store and the holder's pid; after a shutdown the store is free.
func TestStoreIsLocked(t *testing.T) {
	cfg := natsconf.DefaultServerConfig()
	cfg.Port, cfg.StoreDir = -1, t.TempDir()
	srv, err := natsconf.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = natsconf.StartServer(cfg)
	if !errors.Is(err, natsconf.ErrStoreLocked) || !strings.Contains(err.Error(), cfg.StoreDir) || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Fatalf("second server on one store: %v; want ErrStoreLocked naming %s and pid %d", err, cfg.StoreDir, os.Getpid())
	}
	srv.Shutdown()
	srv2, err := natsconf.StartServer(cfg)
	if err != nil {
		t.Fatalf("restart after shutdown: %v", err)
	}
	srv2.Shutdown()
}
