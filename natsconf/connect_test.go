package natsconf_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestNatsCLIContext: a context saved by the nats CLI (its JSON file under
// $XDG_CONFIG_HOME/nats/context) is enough to connect; --server still wins.
func TestNatsCLIContext(t *testing.T) {
	b := salvagetest.StartServer(t)
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	ctxDir := filepath.Join(dir, "nats", "context")
	if err := os.MkdirAll(ctxDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "salvage-test.json"), []byte(`{"url": "`+b.NATS.ClientURL()+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := natsconf.ConnectConfig{Context: "salvage-test"}
	if got := c.ResolveURL(); got != b.NATS.ClientURL() {
		t.Fatalf("ResolveURL = %s, want the context's %s", got, b.NATS.ClientURL())
	}
	nc, err := natsconf.Connect(c)
	if err != nil {
		t.Fatalf("connect through the context: %v", err)
	}
	nc.Close()
	t.Setenv("NATS_CONTEXT", "salvage-test")
	if got := (natsconf.ConnectConfig{}).ResolveURL(); got != b.NATS.ClientURL() {
		t.Fatalf("NATS_CONTEXT not honoured: %s", got)
	}
	if got := (natsconf.ConnectConfig{URL: "nats://127.0.0.1:2"}).ResolveURL(); got != "nats://127.0.0.1:2" {
		t.Fatalf("--server should win over the context: %s", got)
	}
	if _, err := natsconf.Connect(natsconf.ConnectConfig{Context: "no-such-context"}); err == nil {
		t.Fatal("an unknown context connected")
	}
}
