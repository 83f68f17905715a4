package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// growthPipelineName is the pipeline of the growth runs: contract review
// whose job input is {"chunks": N}, so a job of 10,000 chunks stays a
// small message.
const growthPipelineName = "contract-review-bench"

// growthRow is one job size's cost.
type growthRow struct {
	SyncInterval string  `json:"sync_interval"`
	Chunks       int     `json:"chunks"`
	Concurrency  int     `json:"concurrency"`
	MsPerChunk   float64 `json:"ms_per_chunk"`
	PeakRSS      int64   `json:"worker_peak_rss_bytes"`
	Status       string  `json:"status"`
}

// storageRow is what one stream holds during the largest growth job and
// once it is over.
type storageRow struct {
	Name       string `json:"stream"`
	PeakMsgs   uint64 `json:"peak_msgs"`
	PeakBytes  uint64 `json:"peak_bytes"`
	AfterMsgs  uint64 `json:"after_msgs"`
	AfterBytes uint64 `json:"after_bytes"`
	// RetainedMsgs and RetainedBytes are what it holds once retention
	// ran on the largest job (its calls window shortened to growthKeepCalls).
	RetainedMsgs  uint64 `json:"retained_msgs"`
	RetainedBytes uint64 `json:"retained_bytes"`
	Kept          string `json:"kept"`
}

// growthKeepCalls is the growth runs' calls window: retention runs on a
// job a second after it finished, so the storage table shows what a
// deployment keeps once it has.
const growthKeepCalls = time.Second

// targetRetainedJournal is the share of the largest job's journal that
// may remain once retention ran.
const targetRetainedJournal = 0.15

// retentionVerdict compares the journal once retention ran with the
// journal the job left.
func retentionVerdict(rows []storageRow) string {
	for _, s := range rows {
		if s.Name != "KV_salvage_journal" || s.AfterBytes == 0 {
			continue
		}
		share := float64(s.RetainedBytes) / float64(s.AfterBytes)
		v := "met"
		if share > targetRetainedJournal {
			v = "NOT MET"
		}
		return fmt.Sprintf("journal once retention ran: %s of %s (%.1f%%); target ≤ %.0f%%: %s",
			mib(int64(s.RetainedBytes)), mib(int64(s.AfterBytes)), 100*share, 100*targetRetainedJournal, v)
	}
	return ""
}

// growthVerdict checks time per chunk and peak memory are flat across the
// job sizes: the largest within targetGrowthSpread of the smallest.
func growthVerdict(rows []growthRow) string {
	// Memory is flat: within the spread from the least to the most.
	lo, hi := rows[0].PeakRSS, rows[0].PeakRSS
	for _, r := range rows {
		lo, hi = min(lo, r.PeakRSS), max(hi, r.PeakRSS)
	}
	ok := float64(hi) <= float64(lo)*(1+targetGrowthSpread)
	// Time per chunk does not grow: no job costs more a chunk than the
	// cheapest smaller one by more than the spread. A small job costing
	// more a chunk is its fixed start and settle spread over fewer chunks.
	cheapest := rows[0].MsPerChunk
	for _, r := range rows[1:] {
		ok = ok && r.MsPerChunk <= cheapest*(1+targetGrowthSpread)
		cheapest = min(cheapest, r.MsPerChunk)
	}
	return fmt.Sprintf("RSS flat within %.0f%%, ms per chunk growing ≤ %.0f%%: %s", targetGrowthSpread*100, targetGrowthSpread*100, verdict(ok))
}

// growthPipeline is contract review split from {"chunks": N}: chunk i is
// clause i mod 100 of the demo contract.
func growthPipeline(model salvage.Tool) (*salvage.Pipeline, error) {
	p := contractreview.New(model)
	in, err := json.Marshal(contractreview.Input{Text: contractreview.Contract(100, 1)})
	if err != nil {
		return nil, err
	}
	clauses, err := p.Split(in)
	if err != nil {
		return nil, err
	}
	p.Name = growthPipelineName
	p.Split = func(raw json.RawMessage) ([]json.RawMessage, error) {
		var v struct {
			Chunks int `json:"chunks"`
		}
		if err := json.Unmarshal(raw, &v); err != nil || v.Chunks < 1 {
			return nil, fmt.Errorf(`%w: want {"chunks": N} with N at least 1`, salvage.ErrBadInput)
		}
		out := make([]json.RawMessage, v.Chunks)
		for i := range out {
			out[i] = clauses[i%len(clauses)]
		}
		return out, nil
	}
	return p, nil
}

// BenchWorkerCmd is the worker process of the growth runs: the worker
// role with the growth pipeline on the zero-latency model. Hidden: only
// `salvage bench` starts it.
func (e *Env) BenchWorkerCmd() *cobra.Command {
	var id string
	var concurrency int
	cmd := &cobra.Command{
		Use: "bench-worker", Hidden: true, Args: cobra.NoArgs,
		Short: "The worker process of `salvage bench` growth runs",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := e.Logger()
			if err != nil {
				return err
			}
			nc, js, err := e.Connect("salvage bench-worker " + id)
			if err != nil {
				return err
			}
			defer nc.Close()
			model, err := simmodel.New(simmodel.Config{Seed: 1})
			if err != nil {
				return err
			}
			p, err := growthPipeline(model.Tool(contractreview.ModelTool))
			if err != nil {
				return err
			}
			c, err := salvage.NewClient(js, &salvage.Config{
				Pipelines: []*salvage.Pipeline{p}, Roles: []salvage.Role{salvage.RoleWorker},
				WorkerID: id, Concurrency: concurrency, Retries: -1, MaxChunks: 10_000, Logger: log,
			})
			if err != nil {
				return err
			}
			if err := c.Start(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "NATS_URL=%s\n", nc.ConnectedUrl())
			<-cmd.Context().Done()
			return c.Stop(context.WithoutCancel(cmd.Context()))
		},
	}
	cmd.Flags().StringVar(&id, "worker-id", "", "worker id")
	cmd.Flags().IntVar(&concurrency, "concurrency", 16, "chunks in flight")
	return cmd
}

// growth runs one job of each size on a fresh worker process and samples
// the streams during the largest.
func (b *bench) growth(ctx context.Context) ([]growthRow, []storageRow, error) {
	s, err := startBenchServer(0)
	if err != nil {
		return nil, nil, err
	}
	defer s.close()
	c, stop, err := b.startClient(ctx, s, &salvage.Config{Roles: []salvage.Role{salvage.RoleDeadLetter},
		Retention: salvage.Retention{Calls: growthKeepCalls}})
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	largest := 0
	for _, n := range b.o.growth {
		largest = max(largest, n)
	}
	var rows []growthRow
	var storage []storageRow
	for i, n := range b.o.growth {
		row := growthRow{SyncInterval: "default", Chunks: n, Concurrency: b.o.growthConc}
		id := fmt.Sprintf("bench-g%d", i+1)
		w, err := b.e.StartProcess(ctx, id, []string{"bench-worker", "--server", s.url, "--worker-id", id,
			"--concurrency", strconv.Itoa(b.o.growthConc)})
		if err != nil {
			if w != nil {
				demo.StopWorkers([]*demo.Worker{w})
			}
			return nil, nil, err
		}
		b.log.Info().Int("chunks", n).Msg("growth: running one job")
		sampler := newStreamSampler(s.js)
		stopSampling := func() {}
		if n == largest {
			stopSampling = sampler.run(ctx, time.Second)
		}
		start := time.Now()
		job, err := c.JobSubmit(ctx, growthPipelineName, map[string]int{"chunks": n}, nil)
		var j *salvage.Job
		if err == nil {
			j, err = c.JobWait(ctx, job)
		}
		wall := time.Since(start)
		stopSampling()
		_, row.PeakRSS = demo.ProcMemory(w.Cmd.Process.Pid)
		demo.StopWorkers([]*demo.Worker{w})
		if err != nil {
			return nil, nil, err
		}
		row.Status = string(j.Status)
		row.MsPerChunk = float64(wall.Microseconds()) / 1000 / float64(n)
		rows = append(rows, row)
		if n == largest {
			storage, err = sampler.after(ctx)
			if err != nil {
				return nil, nil, err
			}
			if err := waitRetained(ctx, c, job); err != nil {
				return nil, nil, err
			}
			if err := sampler.retained(ctx, storage); err != nil {
				return nil, nil, err
			}
		}
	}
	return rows, storage, nil
}

// streamSampler keeps the largest size of every stream it sees.
type streamSampler struct {
	js   jetstream.JetStream
	mu   sync.Mutex
	peak map[string]storageRow
}

func newStreamSampler(js jetstream.JetStream) *streamSampler {
	return &streamSampler{js: js, peak: map[string]storageRow{}}
}

// run samples every interval until the returned stop is called.
func (s *streamSampler) run(ctx context.Context, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			s.sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	}()
	return func() { cancel(); <-done; s.sample(context.WithoutCancel(ctx)) }
}

func (s *streamSampler) sample(ctx context.Context) {
	for info := range s.js.ListStreams(ctx).Info() {
		s.mu.Lock()
		p := s.peak[info.Config.Name]
		p.Name = info.Config.Name
		p.PeakMsgs, p.PeakBytes = max(p.PeakMsgs, info.State.Msgs), max(p.PeakBytes, info.State.Bytes)
		p.Kept = kept(info.Config)
		s.peak[info.Config.Name] = p
		s.mu.Unlock()
	}
}

// after reads every stream once more, once the job is over, for the
// "after" columns.
func (s *streamSampler) after(ctx context.Context) ([]storageRow, error) {
	var out []storageRow
	lister := s.js.ListStreams(ctx)
	for info := range lister.Info() {
		s.mu.Lock()
		p := s.peak[info.Config.Name]
		s.mu.Unlock()
		if p.Name == "" {
			continue
		}
		p.AfterMsgs, p.AfterBytes = info.State.Msgs, info.State.Bytes
		out = append(out, p)
	}
	if err := lister.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// waitRetained waits until retention ran on job: its record says when it
// expires.
func waitRetained(ctx context.Context, c *salvage.Client, job string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		j, err := c.JobGet(ctx, job)
		if err == nil && j.KeptUntil != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("retention did not run on job %s: %w", job, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// retained fills the rows' retention columns.
func (s *streamSampler) retained(ctx context.Context, rows []storageRow) error {
	byName := map[string]*storageRow{}
	for i := range rows {
		byName[rows[i].Name] = &rows[i]
	}
	lister := s.js.ListStreams(ctx)
	for info := range lister.Info() {
		if r := byName[info.Config.Name]; r != nil {
			r.RetainedMsgs, r.RetainedBytes = info.State.Msgs, info.State.Bytes
			r.Kept = kept(info.Config)
		}
	}
	return lister.Err()
}

// kept says how long a stream keeps what it stores.
func kept(cfg jetstream.StreamConfig) string {
	switch {
	case cfg.Retention == jetstream.WorkQueuePolicy:
		return "until acked"
	case cfg.MaxAge > 0:
		if d := cfg.MaxAge / (24 * time.Hour); d > 1 && cfg.MaxAge%(24*time.Hour) == 0 {
			return fmt.Sprintf("%d days", d)
		}
		return cfg.MaxAge.String()
	case operator.ByRetention(cfg):
		return "while live, then by retention"
	case cfg.MaxMsgsPerSubject == 1:
		return "latest per key, no expiry"
	}
	return "no expiry"
}
