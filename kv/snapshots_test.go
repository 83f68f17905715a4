package kv_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestSnapshotsOutliveAnElection: a snapshot saved to the object store
// while its stream has no leader (the node that led it just stopped)
// waits for the election and is stored, and reads back. An object put
// failed at once with "no response from stream", which the agent took
// for its own failure: in a 3-node cluster whose nodes were restarted one
// by one, chunks spent their deliveries on it and were dead-lettered.
func TestSnapshotsOutliveAnElection(t *testing.T) {
	t.Parallel()
	c, err := natsconf.StartCluster(natsconf.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	js, err := jetstream.New(salvagetest.Connect(t, c.URLs()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := kv.Provision(ctx, js, kv.Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	large := make([]byte, 64<<10)
	_, _ = rand.Read(large) // incompressible: it goes to the object store
	stream := "OBJ_" + kv.BucketSnapshots
	var leader string
	salvagetest.Eventually(t, time.Minute, func() bool {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		if err == nil && info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		return leader != ""
	}, "the leader of %s", stream)
	i := c.Index(leader)
	c.Stop(i)
	t.Logf("%s: leader %s stopped", stream, leader)

	// Back to back from the moment it stopped: the first ones meet no
	// leader (no responders, or no answer), the last ones the new one.
	for seq := 1; seq <= 10; seq++ {
		name := kv.SnapshotName("J", 1, 0, "a", seq)
		ref, err := st.Snapshots.Save(ctx, name, seq, large)
		if err != nil || ref.Object != name {
			t.Fatalf("save %d with the leader of %s gone: %+v, %v", seq, stream, ref.Object, err)
		}
		// Read through a direct get, which any replica answers: one that
		// has not caught up yet says not found for a moment (CI, under two
		// busy loops, right after the election).
		var got []byte
		salvagetest.Eventually(t, time.Minute, func() bool {
			got, err = st.Snapshots.Load(ctx, ref)
			return err == nil
		}, "snapshot %d to read back", seq)
		if string(got) != string(large) {
			t.Fatalf("load %d: %d bytes, want the %d saved", seq, len(got), len(large))
		}
	}
}
