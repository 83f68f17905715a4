package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/streams"
)

// partitionStreams are the streams of partition k: its chunk stream and
// the streams of its claims, checkpoints and journal buckets.
func partitionStreams(k int) []string {
	return []string{streams.ChunksStream(k), "KV_" + BucketIn(BucketClaims, k), "KV_" + BucketIn(BucketCheckpoints, k), "KV_" + BucketIn(BucketJournal, k)}
}

// stepdownWait bounds one leader step-down request.
const stepdownWait = 5 * time.Second

// SpreadLeaders puts the leaders of n partitions on different servers:
// partition k's four streams are led by the (k mod peers)-th of its
// chunk stream's peers, by name, so with as many servers as partitions
// each server leads one partition and every compare-and-swap of a chunk
// goes to one leader. JetStream takes no preferred leader when a stream
// is created (nats-server 2.15 refuses placement.preferred there), so a
// stream led elsewhere is asked to step down in favour of its server
// ($JS.API.STREAM.LEADER.STEPDOWN with placement.preferred, nats-server
// 2.11 and later). Streams of one replica, or whose peers do not include
// the server, are left alone. It returns how many step-downs it asked
// for. A refused or unanswered step-down ends it: a user refused one is
// refused every one, and each would wait stepdownWait for an answer.
func SpreadLeaders(ctx context.Context, js jetstream.JetStream, n int) (int, error) {
	moved := 0
	var first error
	for k := range n {
		info, err := streamInfo(ctx, js, streams.ChunksStream(k))
		if err != nil {
			return moved, err
		}
		peers := peerNames(info)
		if len(peers) < 2 {
			continue
		}
		target := peers[k%len(peers)]
		for _, name := range partitionStreams(k) {
			info, err := streamInfo(ctx, js, name)
			if err != nil {
				first = cmpErr(first, err)
				continue
			}
			if info.Cluster == nil || info.Cluster.Leader == target || !slices.Contains(peerNames(info), target) {
				continue
			}
			if err := stepDown(ctx, js, name, target); err != nil {
				return moved, err
			}
			moved++
		}
	}
	return moved, first
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func streamInfo(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("kv: stream %s: %w", name, err)
	}
	return s.CachedInfo(), nil
}

// peerNames are the names of a stream's servers, its leader among them,
// sorted.
func peerNames(info *jetstream.StreamInfo) []string {
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil
	}
	names := []string{info.Cluster.Leader}
	for _, r := range info.Cluster.Replicas {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

// stepDown asks stream's leader to hand its leadership to server.
func stepDown(ctx context.Context, js jetstream.JetStream, stream, server string) error {
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	ctx, cancel := context.WithTimeout(ctx, stepdownWait)
	defer cancel()
	resp, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, body)
	if err != nil {
		return fmt.Errorf("kv: step down the leader of %s for %s: %w", stream, server, err)
	}
	var out struct {
		Success bool `json:"success"`
		Error   *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &out); err != nil {
		return fmt.Errorf("kv: step down the leader of %s: %w", stream, err)
	}
	if out.Error != nil {
		return fmt.Errorf("kv: step down the leader of %s for %s: %s (%d)", stream, server, out.Error.Description, out.Error.Code)
	}
	return nil
}
