package kv_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/streams"
)

// TestConcurrentProvisioningOnACluster: three processes starting at once
// against a fresh 3-node cluster each provision every R3 stream and
// bucket, promptly. Asking to update first, as CreateOrUpdateStream
// does, left the JetStream API unanswered until each request timed out.
func TestConcurrentProvisioningOnACluster(t *testing.T) {
	t.Parallel()
	c, err := natsconf.StartCluster(natsconf.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	const procs = 3
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		js, err := jetstream.New(salvagetest.Connect(t, c.URLs()))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Less than an unanswered request per store would take (10 s
			// each before it is asked again, some twenty stores), and room
			// for a loaded machine: 2-3 s alone, over 45 s once in CI.
			// A request a forming cluster never answered used to hold its
			// process for this whole deadline (once in make test, 92 s on
			// SALVAGE_CHUNKS); it is asked again after 10 s now.
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if errs[i] = streams.Provision(ctx, js, streams.Options{Replicas: 3}); errs[i] == nil {
				_, errs[i] = kv.Provision(ctx, js, kv.Options{Replicas: 3})
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d: %v", i, err)
		}
	}
}
