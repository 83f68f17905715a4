package salvage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// watchResult runs w on its own goroutine and returns what it returned,
// failing the test when it has not returned within a minute.
func watchResult(t *testing.T, name string, w func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s has not returned", name)
		return nil
	}
}

// TestWatchesSayWhyTheyCannotGoOn: each watch returns at once, with an
// error wrapping ErrNotProvisioned, on a deployment never provisioned, and
// one wrapping nats.ErrConnectionClosed once the client's connection is
// closed; it returns nil when its context ends, and an interruption (the
// server restarting) is not an end: the watch delivers again after it.
func TestWatchesSayWhyTheyCannotGoOn(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	ctx := t.Context()

	bare, err := salvage.NewClient(srv.JS, &salvage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	watches := map[string]func(context.Context, *salvage.Client) error{
		"JobWatch": func(ctx context.Context, c *salvage.Client) error {
			return c.JobWatch(ctx, func(salvage.Change[salvage.Job]) {})
		},
		"EnvelopeWatch": func(ctx context.Context, c *salvage.Client) error {
			return c.EnvelopeWatch(ctx, func(salvage.Change[salvage.EnvelopeRecord]) {})
		},
		"CallWatch": func(ctx context.Context, c *salvage.Client) error {
			return c.CallWatch(ctx, func(salvage.Change[salvage.Call]) {})
		},
	}
	for name, w := range watches {
		if err := watchResult(t, name, func() error { return w(ctx, bare) }); !errors.Is(err, salvage.ErrNotProvisioned) {
			t.Errorf("%s of a deployment never provisioned = %v; want ErrNotProvisioned", name, err)
		}
	}

	// A provisioned deployment: each watch runs until its context ends.
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{echoPipeline("echo")}})
	for name, w := range watches {
		wctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, cancel)
		if err := watchResult(t, name, func() error { return w(wctx, c) }); err != nil {
			t.Errorf("%s ended by its context = %v; want nil", name, err)
		}
	}

	// Across a server restart the job watch goes on: it delivers a job
	// submitted after it.
	seen := make(chan string, 16)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		ended <- c.JobWatch(wctx, func(ch salvage.Change[salvage.Job]) {
			if !ch.CaughtUp && !ch.Deleted {
				select {
				case seen <- ch.Key:
				default:
				}
			}
		})
	}()
	srv.Restart(t)
	// The server's JetStream may still be coming back: asked again until
	// it answers, within a minute, whatever the machine's speed.
	var id string
	for until := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if id, err = c.JobSubmit(ctx, "echo", map[string]int{"n": 1}, nil); err == nil {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("submit after the server restarted: %v", err)
		}
	}
	deadline := time.After(time.Minute)
	for found := false; !found; {
		select {
		case k := <-seen:
			found = k == id
		case err := <-ended:
			t.Fatalf("JobWatch ended across a server restart: %v", err)
		case <-deadline:
			t.Fatalf("JobWatch never delivered job %s, submitted after the restart", id)
		}
	}

	// A closed connection never comes back: every watch says so.
	nc := salvagetest.Connect(t, srv.NATS.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := salvage.NewClient(js, &salvage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	for name, w := range watches {
		if err := watchResult(t, name, func() error { return w(ctx, closed) }); !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("%s on a closed connection = %v; want nats.ErrConnectionClosed", name, err)
		}
	}
}
