package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage/cmd/salvage/internal/app"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/streams"
)

type demoOpts struct {
	run     runFlags
	workers int
	chunks  int
	jobs    int
	kill    bool
	report  string
	timeout time.Duration
	sync    string
}

func (e *env) demoCmd() *cobra.Command {
	var o demoOpts
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the reference contract-review job on an embedded server, kill a worker mid-chunk, report",
		Long: `Start an embedded NATS server and worker processes, submit the reference job
shape (22 chunks x 116 model calls) with 5% of model calls failing transiently, SIGKILL
one worker process mid-chunk, wait for every chunk to finish, and report. With
--report json it prints one JSON object on stdout; it exits 0 when nothing was lost.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.report != "text" && o.report != "json" {
				return fmt.Errorf("--report %q: want text or json", o.report)
			}
			if o.workers < 1 || o.chunks < 1 || o.jobs < 1 {
				return errors.New("--workers, --chunks and --jobs must be at least 1")
			}
			if o.kill && o.workers < 2 {
				return errors.New("--kill needs at least 2 --workers: one is killed, another finishes its chunk")
			}
			log, err := e.logger()
			if err != nil {
				return err
			}
			r, err := e.runDemo(cmd.Context(), o, log)
			if err != nil {
				return err
			}
			if o.report == "json" {
				if err := json.NewEncoder(e.stdout).Encode(r); err != nil {
					return err
				}
			} else {
				r.print(e.stdout)
			}
			if !r.ok() {
				return &exitError{code: ExitError, err: errors.New("demo checks failed: chunks missing or results repeated")}
			}
			return nil
		},
	}
	f := cmd.Flags()
	o.run.register(f, simmodel.Config{Seed: 1, Latency: 15 * time.Millisecond, FailureRate: 0.05})
	f.IntVar(&o.workers, "workers", 3, "worker processes")
	f.IntVar(&o.chunks, "chunks", 22, "chunks (contract clauses) per job")
	f.IntVar(&o.jobs, "jobs", 1, "jobs to submit")
	f.BoolVar(&o.kill, "kill", true, "SIGKILL one worker process mid-chunk")
	f.StringVar(&o.report, "report", "text", "report format: text or json")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up waiting for the jobs after this long")
	f.StringVar(&o.sync, "sync-interval", "always", "embedded server's sync_interval: always, default, or a duration")
	return cmd
}

// demoReport is the demo's outcome; the JSON names are a contract.
type demoReport struct {
	Jobs               int     `json:"jobs"`
	JobsDone           int     `json:"jobs_done"`
	Chunks             int     `json:"chunks"`
	ChunksDone         int     `json:"chunks_done"`
	ChunksDeadLettered int     `json:"chunks_dead_lettered"`
	ChunksCancelled    int     `json:"chunks_cancelled"`
	ChunksMissing      int     `json:"chunks_missing"`
	Results            int     `json:"results"`
	CallsPerChunk      int     `json:"calls_per_chunk"`
	Calls              int     `json:"calls"`
	Tier1Retries       int     `json:"tier1_retries"`
	Redeliveries       int     `json:"redeliveries"`
	Envelopes          int     `json:"envelopes"`
	WallSeconds        float64 `json:"wall_seconds"`
	Workers            int     `json:"workers"`
	KilledWorker       string  `json:"killed_worker,omitempty"`
	KilledJob          string  `json:"killed_job,omitempty"`
	KilledChunk        int     `json:"killed_chunk,omitempty"`
	KilledAtStage      int     `json:"killed_at_stage,omitempty"`
	SyncInterval       string  `json:"sync_interval"`
	JournalWrites      string  `json:"journal_writes"`
	ModelLatencyMS     float64 `json:"model_latency_ms"`
	ModelFailureRate   float64 `json:"model_failure_rate"`
	Seed               int64   `json:"seed"`
	TimedOut           bool    `json:"timed_out"`
}

func (r demoReport) ok() bool {
	return r.ChunksMissing == 0 && r.Results == r.ChunksDone && !r.TimedOut
}

func (r demoReport) print(w io.Writer) {
	tw := table(w)
	fmt.Fprintf(tw, "Salvage demo: %d job(s) of %d chunks x %d model calls, %d worker processes, sync_interval %s\n",
		r.Jobs, r.Chunks/max(r.Jobs, 1), r.CallsPerChunk, r.Workers, r.SyncInterval)
	fmt.Fprintf(tw, "model: median latency %.0fms, %.1f%% of calls failing transiently, seed %d\n\n", r.ModelLatencyMS, 100*r.ModelFailureRate, r.Seed)
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	row("chunks done", fmt.Sprintf("%d / %d", r.ChunksDone, r.Chunks))
	row("chunks dead-lettered", r.ChunksDeadLettered)
	row("chunks missing", r.ChunksMissing)
	row("results published", r.Results)
	row("model calls (recorded)", r.Calls)
	row("tier-1 retries (in worker)", r.Tier1Retries)
	row("tier-2 redeliveries (JetStream)", r.Redeliveries)
	row("envelopes in DLQ", r.Envelopes)
	if r.KilledWorker != "" {
		row("killed", fmt.Sprintf("%s with SIGKILL in stage %d of chunk %d", r.KilledWorker, r.KilledAtStage, r.KilledChunk))
	}
	row("wall time", fmt.Sprintf("%.1fs", r.WallSeconds))
	verdict := "every chunk accounted for"
	if !r.ok() {
		verdict = "CHECKS FAILED"
	}
	row("verdict", verdict)
	_ = tw.Flush()
}

// worker is a child `salvage up --role worker` process.
type worker struct {
	id  string
	cmd *exec.Cmd
}

func (e *env) runDemo(ctx context.Context, o demoOpts, log zerolog.Logger) (demoReport, error) {
	rep := demoReport{Jobs: o.jobs, Workers: o.workers, CallsPerChunk: contractreview.CallsPerChunk, Seed: o.run.model.Seed,
		ModelLatencyMS: float64(o.run.model.Latency) / float64(time.Millisecond), ModelFailureRate: o.run.model.FailureRate}
	syncInterval, err := natsconf.ParseSyncInterval(o.sync)
	if err != nil {
		return rep, err
	}
	rep.SyncInterval = natsconf.SyncIntervalString(syncInterval)
	o.run.resolveJournal(true, syncInterval)
	rep.JournalWrites = o.run.journalWrites
	dir, err := os.MkdirTemp("", "salvage-demo-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	sc := natsconf.DefaultServerConfig()
	sc.Port, sc.StoreDir, sc.SyncInterval, sc.ServerName = -1, dir, syncInterval, "salvage-demo"
	srv, err := natsconf.StartServer(sc)
	if err != nil {
		return rep, err
	}
	defer srv.Shutdown()
	url := srv.ClientURL()
	nc, err := natsconf.Connect(natsconf.ConnectConfig{URL: url, Name: "salvage demo"})
	if err != nil {
		return rep, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return rep, err
	}
	cfg := o.run.config([]string{app.RoleDeadLetter})
	cfg.SweepInterval = 2 * time.Second
	cfg.Logger = log
	stores, err := app.Provision(ctx, js, cfg)
	if err != nil {
		return rep, err
	}
	log.Info().Str("url", url).Str("sync_interval", rep.SyncInterval).Msg("embedded server ready")

	roleCtx, stopRoles := context.WithCancel(ctx)
	var roles sync.WaitGroup
	roles.Add(1)
	go func() { defer roles.Done(); _ = app.Run(roleCtx, js, stores, cfg) }()
	defer func() { stopRoles(); roles.Wait() }()

	workers, err := e.startWorkers(ctx, o, url)
	defer stopWorkers(workers)
	if err != nil {
		return rep, err
	}

	// Kill a worker mid-chunk, not mid-split: wait for every job to be
	// accepted (all its chunks published) before choosing the victim.
	accepted := make(chan *nats.Msg, o.jobs)
	sub, err := nc.ChanSubscribe(streams.EventSubject("*", streams.EventAccepted), accepted)
	if err != nil {
		return rep, err
	}
	defer func() { _ = sub.Unsubscribe() }()

	start := time.Now()
	jobs := make([]string, 0, o.jobs)
	for i := range o.jobs {
		text := contractreview.Contract(o.chunks, o.run.model.Seed+int64(i))
		id, body, err := jobMessage(contractreview.Name, []byte(text))
		if err != nil {
			return rep, err
		}
		m := nats.NewMsg(streams.JobSubject(contractreview.Name))
		m.Data = body
		m.Header.Set(streams.HeaderMsgID, id)
		m.Header.Set(streams.HeaderTraceParent, streams.TraceParent(randomHex(16), randomHex(8)))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return rep, err
		}
		jobs = append(jobs, id)
		log.Info().Str("job_id", id).Int("chunks", o.chunks).Msg("job submitted")
	}

	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	for range jobs {
		select {
		case <-accepted:
		case <-waitCtx.Done():
			return rep, fmt.Errorf("jobs not accepted: %w", waitCtx.Err())
		}
	}
	if o.kill {
		k, err := killMidChunk(waitCtx, stores, jobs, o.chunks, workers)
		if err != nil {
			return rep, err
		}
		rep.KilledWorker, rep.KilledJob, rep.KilledChunk, rep.KilledAtStage = k.worker, k.job, k.chunk, k.stage
		log.Warn().Str("worker", k.worker).Str("job_id", k.job).Int("chunk", k.chunk).Int("stage", k.stage).Msg("worker process killed with SIGKILL mid-chunk")
	}
	rep.TimedOut = waitJobs(waitCtx, stores, jobs, log) != nil
	rep.WallSeconds = time.Since(start).Seconds()
	return rep, collect(ctx, js, stores, jobs, &rep)
}

// startWorkers starts o.workers child worker processes and waits until each
// has printed its NATS_URL line (roles ready).
func (e *env) startWorkers(ctx context.Context, o demoOpts, url string) ([]*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var out []*worker
	for i := range o.workers {
		id := fmt.Sprintf("demo-w%d", i+1)
		args := append([]string{"up", "--role", app.RoleWorker, "--server", url, "--worker-id", id,
			"--log-level", e.logLevel, "--log-format", e.logFormat}, o.run.args()...)
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Stderr = e.stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return out, err
		}
		if err := cmd.Start(); err != nil {
			return out, fmt.Errorf("start worker %s: %w", id, err)
		}
		out = append(out, &worker{id: id, cmd: cmd})
		ready := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "NATS_URL=") {
					ready <- true
				}
			}
			ready <- false
		}()
		select {
		case ok := <-ready:
			if !ok {
				return out, fmt.Errorf("worker %s exited before it was ready", id)
			}
		case <-time.After(30 * time.Second):
			return out, fmt.Errorf("worker %s not ready after 30s", id)
		}
	}
	return out, nil
}

// stopWorkers drains the workers with SIGTERM, then kills what is left.
func stopWorkers(ws []*worker) {
	for _, w := range ws {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, w := range ws {
		done := make(chan struct{})
		go func() { _ = w.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = w.cmd.Process.Kill()
			<-done
		}
	}
}

type kill struct {
	worker, job  string
	chunk, stage int
}

// killMidChunk waits until a worker process holds a chunk in its analysis
// stage and SIGKILLs that process.
func killMidChunk(ctx context.Context, st *kv.Stores, jobs []string, chunks int, ws []*worker) (kill, error) {
	for {
		for _, job := range jobs {
			for c := 1; c <= chunks; c++ {
				l, err := st.Claims.Get(ctx, job, c)
				if err != nil || !l.Live(time.Now()) {
					continue
				}
				cp, _, err := st.Checkpoints.Get(ctx, job, c)
				if err != nil || cp.Stage < 2 || cp.Status != kv.StatusRunning || cp.ClaimedBy != l.ClaimedBy {
					continue
				}
				for _, w := range ws {
					if w.id == l.ClaimedBy {
						if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
							return kill{}, err
						}
						_ = w.cmd.Wait()
						return kill{worker: w.id, job: job, chunk: c, stage: cp.Stage}, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return kill{}, fmt.Errorf("no worker was mid-chunk to kill: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitJobs waits until every job has finished, logging progress.
func waitJobs(ctx context.Context, st *kv.Stores, jobs []string, log zerolog.Logger) error {
	last := ""
	for {
		finished, done, total, failed := 0, 0, 0, 0
		for _, id := range jobs {
			j, err := st.Jobs.Get(ctx, id)
			if err != nil {
				continue
			}
			total += j.Chunks
			done += j.Summary.Done
			failed += j.Summary.DeadLettered
			if j.Finished() {
				finished++
			}
		}
		if line := fmt.Sprintf("%d/%d/%d", done, failed, finished); line != last {
			last = line
			log.Info().Int("chunks_done", done).Int("chunks_failed", failed).Int("chunks", total).Int("jobs_finished", finished).Msg("progress")
		}
		if finished == len(jobs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// collect fills the report from the checkpoints and streams.
func collect(ctx context.Context, js jetstream.JetStream, st *kv.Stores, jobs []string, r *demoReport) error {
	for _, id := range jobs {
		j, err := st.Jobs.Get(ctx, id)
		if err != nil {
			return err
		}
		if j.Status == kv.JobDone {
			r.JobsDone++
		}
		cps, err := st.Checkpoints.ForJob(ctx, id, j.Chunks)
		if err != nil {
			return err
		}
		r.Chunks += j.Chunks
		for _, cp := range cps {
			switch {
			case cp.Status == kv.StatusDone:
				r.ChunksDone++
			case cp.Status == kv.StatusDeadLettered:
				r.ChunksDeadLettered++
			case kv.IsCancelled(cp.Status):
				r.ChunksCancelled++
			}
			r.Calls += cp.Calls
			r.Tier1Retries += cp.Tier1Retries
			r.Redeliveries += int(max(cp.Deliveries, 1) - 1)
		}
		res, err := readResults(ctx, js, id)
		if err != nil {
			return err
		}
		r.Results += len(res)
	}
	r.ChunksMissing = r.Chunks - r.ChunksDone - r.ChunksDeadLettered - r.ChunksCancelled
	s, err := js.Stream(ctx, streams.DLQ)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	r.Envelopes = int(info.State.Msgs)
	return nil
}
