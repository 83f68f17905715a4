package natsconf_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestClusterSurvivesItsStreamLeader: an R3 stream on the in-process
// cluster keeps taking writes while its leader is down, and the leader's
// node, restarted on its store, catches up with what it missed.
func TestClusterSurvivesItsStreamLeader(t *testing.T) {
	c, err := natsconf.StartCluster(natsconf.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	nc := salvagetest.Connect(t, c.URLs())
	js, _ := jetstream.New(nc)
	// Asked again if the cluster does not answer in time: on CI's loaded
	// machine one create waited out the whole minute for an answer that
	// never came. A create of the same config again is no change.
	var s jetstream.Stream
	salvagetest.Eventually(t, 2*time.Minute, func() bool {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		s, err = js.CreateStream(actx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3})
		if err != nil {
			t.Logf("create the R3 stream: %v", err)
		}
		return err == nil
	}, "an R3 stream")
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			salvagetest.Eventually(t, time.Minute, func() bool {
				// A publish the old leader took but never acked is
				// asked again, under the same id, after a short wait.
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := js.Publish(actx, fmt.Sprintf("s.%d", i), []byte("x"), jetstream.WithMsgID(fmt.Sprintf("m-%d", i)))
				return err == nil
			}, "publish %d", i)
		}
	}
	publish(0, 10)
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream info %+v, %v; want a leader and two replicas", info, err)
	}
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("leader %q is not one of %v", info.Cluster.Leader, c.Names())
	}
	c.Stop(leader)
	publish(10, 20)
	salvagetest.Eventually(t, time.Minute, func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.Cluster.Leader != "" && info.Cluster.Leader != c.Names()[leader]
	}, "a new leader")
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		info, err := s.Info(ctx)
		if err != nil || info.State.Msgs != 20 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if r.Name == c.Names()[leader] {
				return r.Current
			}
		}
		return info.Cluster.Leader == c.Names()[leader]
	}, "the restarted node current with 20 messages")
}
