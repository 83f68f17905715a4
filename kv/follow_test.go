package kv_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestFollowRecoversAfterARestart: a watch started before the server
// restarts delivers a value written after it, and says it started over
// (the ordered consumer under it used to wait ~19 s for missed heartbeats
// before it was made again, and never said so): the restart it reports,
// not how soon the value came, decides.
func TestFollowRecoversAfterARestart(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "follow_test", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutString(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen, restarts := map[string]bool{}, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = kv.Follow(ctx, srv.JS, "follow_test", jetstream.AllKeys, func(e jetstream.KeyValueEntry) {
			if e == nil {
				return
			}
			mu.Lock()
			seen[e.Key()] = true
			mu.Unlock()
		}, func(error) error { mu.Lock(); restarts++; mu.Unlock(); return nil })
	}()
	defer func() { cancel(); <-done }()
	has := func(key string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return seen[key] }
	}
	salvagetest.Eventually(t, time.Minute, has("before"), "the watch to deliver the existing value")

	srv.Restart(t)
	// Write once the client is back and JetStream answers.
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, err := b.PutString(ctx, "after", "2")
		return err == nil
	}, "a write after the restart")
	written := time.Now()
	salvagetest.Eventually(t, time.Minute, has("after"), "the watch to deliver a value written after the restart")
	mu.Lock()
	defer mu.Unlock()
	if restarts == 0 {
		t.Errorf("the watch never said it started over")
	}
	t.Logf("delivered %s after the write, %d restart(s) of the watch", time.Since(written).Round(time.Millisecond), restarts)
}
