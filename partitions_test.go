package salvage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/streams"
)

// runCounter counts the finished runs of each chunk.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *runCounter) add(job string, chunk int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[fmt.Sprintf("%s/%d", job, chunk)]++
}

func (c *runCounter) of(job string, chunk int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[fmt.Sprintf("%s/%d", job, chunk)]
}

// gatedPipeline is a pipeline of two chunks per job whose agent waits
// for gate to close (nil: runs at once) and counts each finished run.
func gatedPipeline(name string, gate <-chan struct{}, started chan<- string, runs *runCounter) *salvage.Pipeline {
	return &salvage.Pipeline{
		Name: name,
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			return []json.RawMessage{in, in}, nil
		},
		Stages: []salvage.Stage{{Name: "work", Agents: []salvage.Agent{{Name: "worker", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			if started != nil {
				select {
				case started <- fmt.Sprintf("%s/%d", t.Job, t.Chunk):
				default:
				}
			}
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			runs.add(t.Job, t.Chunk)
			return "ok", nil
		}}}}},
	}
}

// chunkIn reports whether partition k's checkpoint bucket has a record
// of chunk of job.
func chunkIn(t *testing.T, js jetstream.JetStream, k int, job string, chunk int) bool {
	t.Helper()
	b, err := js.KeyValue(context.Background(), kv.BucketIn(kv.BucketCheckpoints, k))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Get(context.Background(), kv.ChunkKey(job, chunk))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestPartitionsSpreadJobsAndKeepEachJobInOne: with three partitions,
// jobs are spread over them by their ids, and every chunk of a job runs
// once and is recorded in its job's partition's storage only.
func TestPartitionsSpreadJobsAndKeepEachJobInOne(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	runs := &runCounter{runs: map[string]int{}}
	c := srv.Client(t, &salvage.Config{Partitions: 3, Pipelines: []*salvage.Pipeline{gatedPipeline("spread", nil, nil, runs)}})
	ctx := context.Background()
	var ids []string
	for i := range 12 {
		id, err := c.JobSubmit(ctx, "spread", map[string]int{"n": i}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	used := map[int]bool{}
	for _, id := range ids {
		j := salvagetest.WaitJob(t, c, id, time.Minute)
		if j.Status != salvage.JobDone {
			t.Fatalf("job %s: %+v", id, j)
		}
		if want := streams.PartitionOf(id, 3); j.Partition != want {
			t.Fatalf("job %s is in partition %d, its id says %d", id, j.Partition, want)
		}
		used[j.Partition] = true
		for chunk := 1; chunk <= 2; chunk++ {
			if n := runs.of(id, chunk); n != 1 {
				t.Errorf("chunk %d of %s ran %d times", chunk, id, n)
			}
			for k := range 3 {
				if in := chunkIn(t, srv.JS, k, id, chunk); in != (k == j.Partition) {
					t.Errorf("chunk %d of %s (partition %d) recorded in partition %d: %v", chunk, id, j.Partition, k, in)
				}
			}
		}
	}
	if len(used) < 2 {
		t.Fatalf("12 jobs all in partitions %v", used)
	}
	if n, err := streams.Partitions(ctx, srv.JS); err != nil || n != 3 {
		t.Fatalf("partitions = %d, %v", n, err)
	}
}

// TestUpgradeFromOneToThreePartitions: a deployment of one partition with
// chunks running and queued is provisioned again with three while its
// worker runs. Nothing moves: the jobs split before stay in partition 0
// and finish there, each chunk once; jobs split after spread over the
// three, and a process started with no partitions configured uses all
// three. A configuration asking for fewer never removes one, and the
// process started before the upgrade finds the new partitions while it
// runs: alone, it splits into and runs all three.
func TestUpgradeFromOneToThreePartitions(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	runs := &runCounter{runs: map[string]int{}}
	gate := make(chan struct{})
	started := make(chan string, 64)
	old := srv.Client(t, &salvage.Config{Concurrency: 2, WorkerID: "old",
		Pipelines: []*salvage.Pipeline{gatedPipeline("upgrade", gate, started, runs)}})
	ctx := context.Background()
	var before []string
	for i := range 3 {
		id, err := old.JobSubmit(ctx, "upgrade", map[string]int{"n": i}, nil)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, id)
	}
	// Two chunks run (the old worker's two slots), four wait queued.
	for range 2 {
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("no chunk started")
		}
	}
	s, err := srv.JS.Stream(ctx, streams.Chunks)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == 6
	}, "SALVAGE_CHUNKS before the upgrade: want 6 messages (2 running, 4 queued)")
	upgraded := srv.Client(t, &salvage.Config{Partitions: 3, WorkerID: "new",
		Pipelines: []*salvage.Pipeline{gatedPipeline("upgrade", gate, started, runs)}})
	if n, err := streams.Partitions(ctx, srv.JS); err != nil || n != 3 {
		t.Fatalf("partitions after the upgrade = %d, %v", n, err)
	}
	close(gate)
	var after []string
	// Named, so that which partitions they fall in is fixed (FNV-1a of
	// the id): nine random ids all land in one of three partitions about
	// once in 3,000 runs, and the test would fail by chance.
	for i := range 12 {
		id, err := upgraded.JobSubmit(ctx, "upgrade", map[string]int{"m": i}, &salvage.SubmitOpts{JobID: fmt.Sprintf("after-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		after = append(after, id)
	}
	used := map[int]bool{}
	for i, id := range append(before, after...) {
		j := salvagetest.WaitJob(t, upgraded, id, time.Minute)
		if j.Status != salvage.JobDone {
			t.Fatalf("job %s: %+v", id, j)
		}
		if i < len(before) && j.Partition != 0 {
			t.Fatalf("job %s split before the upgrade moved to partition %d", id, j.Partition)
		}
		if i >= len(before) {
			used[j.Partition] = true
		}
		for chunk := 1; chunk <= 2; chunk++ {
			if n := runs.of(id, chunk); n != 1 {
				t.Errorf("chunk %d of %s finished %d times", chunk, id, n)
			}
		}
	}
	if len(used) < 2 {
		t.Fatalf("12 jobs split after the upgrade all in partitions %v", used)
	}
	// A process configured with one partition (the default) keeps and
	// runs all three, and the one started before the upgrade finds them
	// while it runs.
	later := srv.Client(t, &salvage.Config{WorkerID: "later", Pipelines: []*salvage.Pipeline{gatedPipeline("upgrade", nil, nil, runs)}})
	if n, err := streams.Partitions(ctx, srv.JS); err != nil || n != 3 {
		t.Fatalf("partitions after a process with the default = %d, %v", n, err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		ws, err := later.WorkerList(ctx)
		if err != nil || len(ws) != 3 {
			return false
		}
		for _, w := range ws {
			if w.Partitions != 3 {
				return false
			}
		}
		return true
	}, "every process, the one started before the upgrade too, taking chunks from three partitions")
	// Only the process started with one partition is left: it splits
	// into all three and runs them.
	for _, c := range []*salvage.Client{upgraded, later} {
		stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := c.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	used = map[int]bool{}
	var last []string
	for i := range 9 {
		id, err := old.JobSubmit(ctx, "upgrade", map[string]int{"k": i}, &salvage.SubmitOpts{JobID: fmt.Sprintf("last-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		last = append(last, id)
	}
	for _, id := range last {
		j := salvagetest.WaitJob(t, old, id, time.Minute)
		if j.Status != salvage.JobDone || j.Partition != streams.PartitionOf(id, 3) {
			t.Fatalf("job %s split by the process started before the upgrade: %+v", id, j)
		}
		used[j.Partition] = true
	}
	if len(used) < 2 {
		t.Fatalf("9 jobs split by the old process all in partitions %v", used)
	}
}

// echoPipeline is a pipeline of one chunk per job whose agent makes one
// journaled tool call.
func echoPipeline(name string) *salvage.Pipeline {
	return &salvage.Pipeline{
		Name:  name,
		Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{{Name: "work", Agents: []salvage.Agent{{Name: "caller", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			return t.Tool(ctx, "echo", t.Input)
		}}}}},
		Tools: []salvage.Tool{{Name: "echo", Call: func(_ context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
			return salvage.ToolResult{Output: c.Input}, nil
		}}},
	}
}

// TestCallWatchFollowsEveryPartition: a watch of the calls started on a
// deployment of one partition sees the calls of jobs in the partitions
// added while it runs.
func TestCallWatchFollowsEveryPartition(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	one := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{echoPipeline("echo")}})
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	seen := map[string]bool{}
	watched, caughtUp := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var watchErr error
	go func() {
		defer close(watched)
		watchErr = one.CallWatch(ctx, func(ch salvage.Change[salvage.Call]) {
			if ch.CaughtUp {
				once.Do(func() { close(caughtUp) })
			}
			if ch.Deleted || ch.CaughtUp {
				return
			}
			mu.Lock()
			seen[ch.Value.Job] = true
			mu.Unlock()
		})
	}()
	defer func() {
		cancel()
		<-watched
		if watchErr != nil {
			t.Errorf("CallWatch ended by its context = %v; want nil", watchErr)
		}
	}()
	// The watch has its partitions (one) before the others are made.
	select {
	case <-caughtUp:
	case <-time.After(time.Minute):
		t.Fatal("the watch never caught up")
	}
	three := srv.Client(t, &salvage.Config{Partitions: 3, Pipelines: []*salvage.Pipeline{echoPipeline("echo")}})
	parts := map[int]bool{}
	var ids []string
	for i := range 9 {
		id, err := three.JobSubmit(ctx, "echo", map[string]int{"n": i}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		j := salvagetest.WaitJob(t, three, id, time.Minute)
		if j.Status != salvage.JobDone {
			t.Fatalf("job %s: %+v", id, j)
		}
		parts[j.Partition] = true
	}
	if len(parts) < 2 {
		t.Fatalf("9 jobs all in partitions %v", parts)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if !seen[id] {
				return false
			}
		}
		return true
	}, "the watch started with one partition to see the calls of jobs in %v", parts)
}
