package salvage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// fleetPipeline is a pipeline of two chunks per job whose one agent
// records which fleet ran each chunk.
func fleetPipeline(name, fleet string, ran *sync.Map) *salvage.Pipeline {
	return &salvage.Pipeline{
		Name: name,
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			return []json.RawMessage{in, in}, nil
		},
		Stages: []salvage.Stage{{Name: "work", Agents: []salvage.Agent{{Name: "worker", Run: func(_ context.Context, t *salvage.Turn) (any, error) {
			ran.Store(fmt.Sprintf("%s/%d", t.Job, t.Chunk), fleet)
			return fleet, nil
		}}}}},
	}
}

// TestTwoFleetsAndAnAPIOnlyClient is the task-queue case: two worker fleets
// of different pipelines and a client that only serves the API share one
// server. Every job of both pipelines finishes, each chunk run by its own
// pipeline's fleet; nothing is rejected and nothing dead-lettered.
func TestTwoFleetsAndAnAPIOnlyClient(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	var ran sync.Map
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{fleetPipeline("alpha", "fleet-a", &ran)}, WorkerID: "fleet-a"})
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{fleetPipeline("beta", "fleet-b", &ran)}, WorkerID: "fleet-b"})
	api := srv.Client(t, &salvage.Config{Roles: []salvage.Role{salvage.RoleAPI}})
	rejections, err := srv.Conn.SubscribeSync("salvage.events.rejected.>")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	jobs := map[string]string{} // job -> the fleet that must run it
	for i := range 6 {
		for pipeline, fleet := range map[string]string{"alpha": "fleet-a", "beta": "fleet-b"} {
			id, err := api.JobSubmit(ctx, pipeline, map[string]int{"n": i}, nil)
			if err != nil {
				t.Fatal(err)
			}
			jobs[id] = fleet
		}
	}
	for id, fleet := range jobs {
		if j := salvagetest.WaitJob(t, api, id, time.Minute); j.Status != salvage.JobDone {
			t.Fatalf("job %s of %s: %+v", id, fleet, j)
		}
		for chunk := 1; chunk <= 2; chunk++ {
			if got, _ := ran.Load(fmt.Sprintf("%s/%d", id, chunk)); got != fleet {
				t.Errorf("chunk %d of %s ran on %v, want %s", chunk, id, got, fleet)
			}
		}
	}
	if list, err := api.EnvelopeList(ctx, salvage.EnvelopeFilter{}, nil); err != nil || list.Total != 0 {
		t.Fatalf("envelopes = %+v, %v", list, err)
	}
	if m, err := rejections.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("a rejection: %s", m.Data)
	}
}

// TestJobWaitsForItsPipelinesWorker: a job submitted while the only
// process that runs its pipeline is stopped waits — past the time a never
// registered pipeline's job is rejected in — and finishes once a worker
// starts; a job for a name no process ever ran is rejected with an event.
func TestJobWaitsForItsPipelinesWorker(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	var ran sync.Map
	p := fleetPipeline("gamma", "fleet-g", &ran)
	first := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p}, WorkerID: "first"})
	ctx := context.Background()
	stopCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := first.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	api := srv.Client(t, &salvage.Config{Roles: []salvage.Role{salvage.RoleAPI, salvage.RoleDeadLetter}})
	id, err := api.JobSubmit(ctx, "gamma", map[string]int{"n": 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	never, err := api.JobSubmit(ctx, "never-ran", map[string]int{"n": 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if _, err := api.JobWait(wctx, never); !errors.Is(err, salvage.ErrUnknownPipeline) {
		t.Fatalf("Wait for a never-run pipeline's job: %v", err)
	}
	// The sweep that rejected the later job passed the earlier one, older
	// than the unknown-pipeline wait: a registered pipeline's job waits.
	if _, err := api.JobGet(ctx, id); err == nil {
		t.Fatal("a job of a pipeline with no worker running was split")
	}
	s, err := srv.JS.Stream(ctx, "SALVAGE_JOBS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("SALVAGE_JOBS = %+v, %v; want the waiting job", info.State, err)
	}
	// Visibly: its status says it waits, its pipeline has no workers.
	if _, err := api.ChunkList(ctx, id, nil); !errors.Is(err, salvage.ErrUnknownJob) || !strings.Contains(err.Error(), "not split yet") || !strings.Contains(err.Error(), "gamma; 0 running") {
		t.Fatalf("status of a waiting job: %v", err)
	}
	ps, err := api.PipelineList(ctx)
	if err != nil || len(ps) != 1 || ps[0].Pipeline != "gamma" || ps[0].Workers != 0 || ps[0].Waiting != 1 {
		t.Fatalf("pipelines = %+v, %v; want gamma with no workers and one waiting job", ps, err)
	}
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p}, WorkerID: "second"})
	var ws []salvage.Worker
	salvagetest.Eventually(t, time.Minute, func() bool {
		ws, err = api.WorkerList(ctx)
		var runs []string
		for _, w := range ws {
			if slices.Contains(w.Pipelines, "gamma") {
				runs = append(runs, w.ID)
			}
		}
		return err == nil && len(ws) == 2 && len(runs) == 1 && runs[0] == "second"
	}, "the live processes to be the API process and second, which runs gamma: %+v", &ws)
	if j := salvagetest.WaitJob(t, api, id, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
}

// TestPipelinePoolSettings: a pipeline's own Concurrency, AckWait and
// MaxDeliver shape its pool — its consumer's AckWait and MaxDeliver, and
// how many of its chunks a worker runs at once — while another pipeline
// of the same worker keeps the client's.
func TestPipelinePoolSettings(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	var mu sync.Mutex
	running, most := 0, 0
	slow := &salvage.Pipeline{Name: "slow", Concurrency: 1, AckWait: 5 * time.Second, MaxDeliver: 7,
		Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in, in, in, in}, nil },
		Stages: []salvage.Stage{{Name: "s", Agents: []salvage.Agent{{Name: "a", Run: func(ctx context.Context, _ *salvage.Turn) (any, error) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(30 * time.Millisecond) // the fault: a slow tool, so chunks that could overlap would
			mu.Lock()
			running--
			mu.Unlock()
			return "ok", nil
		}}}}}}
	var ran sync.Map
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{slow, fleetPipeline("quick", "w", &ran)}, Concurrency: 4})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "slow", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job = %+v", j)
	}
	mu.Lock()
	if most != 1 {
		t.Errorf("%d chunks of slow ran at once, want 1", most)
	}
	mu.Unlock()
	for pipeline, want := range map[string][2]any{"slow": {5 * time.Second, 7}, "quick": {2 * time.Second, salvage.MaxDeliverDefault}} {
		cons, err := srv.JS.Consumer(ctx, "SALVAGE_CHUNKS", "workers-"+pipeline)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := cons.CachedInfo().Config; cfg.AckWait != want[0] || cfg.MaxDeliver != want[1] {
			t.Errorf("pool of %s: AckWait %s, MaxDeliver %d; want %v", pipeline, cfg.AckWait, cfg.MaxDeliver, want)
		}
	}
	bad := &salvage.Pipeline{Name: "bad", AckWait: -time.Second, Split: slow.Split, Stages: slow.Stages}
	if _, err := salvage.NewClient(srv.JS, &salvage.Config{Pipelines: []*salvage.Pipeline{bad}}); !errors.Is(err, salvage.ErrInvalidConfig) {
		t.Errorf("a negative AckWait: %v", err)
	}
}
