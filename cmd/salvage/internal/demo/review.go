package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
)

// demoReport is the demo's outcome; the JSON names are a contract.
type demoReport struct {
	Jobs               int `json:"jobs"`
	JobsDone           int `json:"jobs_done"`
	Chunks             int `json:"chunks"`
	ChunksDone         int `json:"chunks_done"`
	ChunksDeadLettered int `json:"chunks_dead_lettered"`
	ChunksCancelled    int `json:"chunks_cancelled"`
	ChunksMissing      int `json:"chunks_missing"`
	Results            int `json:"results"`
	CallsPerChunk      int `json:"calls_per_chunk"`
	Calls              int `json:"calls"`
	Tier1Retries       int `json:"tier1_retries"`
	Redeliveries       int `json:"redeliveries"`
	// Takeovers counts the chunks a survivor took over from a dead
	// worker on the same delivery, before JetStream would redeliver them.
	Takeovers        int     `json:"takeovers"`
	Envelopes        int     `json:"envelopes"`
	WallSeconds      float64 `json:"wall_seconds"`
	Workers          int     `json:"workers"`
	KilledWorker     string  `json:"killed_worker,omitempty"`
	KilledJob        string  `json:"killed_job,omitempty"`
	KilledChunk      int     `json:"killed_chunk,omitempty"`
	KilledAtStage    int     `json:"killed_at_stage,omitempty"`
	SyncInterval     string  `json:"sync_interval"`
	JournalWrites    string  `json:"journal_writes"`
	ModelLatencyMS   float64 `json:"model_latency_ms"`
	ModelFailureRate float64 `json:"model_failure_rate"`
	// ModelURL is the OpenAI-compatible API the model calls went to
	// ("" for the in-process simulation); the token counts are what it
	// reported, as the journal recorded them.
	ModelURL         string `json:"model_url"`
	PromptTokens     int64  `json:"model_prompt_tokens"`
	CompletionTokens int64  `json:"model_completion_tokens"`
	Seed             int64  `json:"seed"`
	TimedOut         bool   `json:"timed_out"`
	// SimModel is set when the model is the simulation, over HTTP or not.
	SimModel bool `json:"sim_model"`
}

func (r *demoReport) ok() bool {
	return r.ChunksMissing == 0 && r.Results == r.ChunksDone && !r.TimedOut
}

func (r *demoReport) print(w io.Writer) {
	tw := operator.Table(w)
	fmt.Fprintf(tw, "Salvage demo: %d job(s) of %d chunks x %d model calls, %d worker processes, sync_interval %s\n",
		r.Jobs, r.Chunks/max(r.Jobs, 1), r.CallsPerChunk, r.Workers, r.SyncInterval)
	if r.ModelURL != "" && !r.SimModel {
		fmt.Fprintf(tw, "model: %s\n\n", r.ModelURL)
	} else {
		fmt.Fprintf(tw, "model: %s (simulated: median latency %.0fms, %.1f%% of calls failing transiently, seed %d)\n\n",
			cmp.Or(r.ModelURL, "in process"), r.ModelLatencyMS, 100*r.ModelFailureRate, r.Seed)
	}
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	row("chunks done", fmt.Sprintf("%d / %d", r.ChunksDone, r.Chunks))
	row("chunks dead-lettered", r.ChunksDeadLettered)
	row("chunks missing", r.ChunksMissing)
	row("results published", r.Results)
	row("model calls (journaled)", r.Calls)
	row("model tokens (prompt / completion)", fmt.Sprintf("%d / %d", r.PromptTokens, r.CompletionTokens))
	row("tier-1 retries (in worker)", r.Tier1Retries)
	row("tier-2 redeliveries (JetStream; takeovers too)", r.Redeliveries)
	row("takeovers (a survivor took a dead worker's chunk)", r.Takeovers)
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

func (e *Env) runReviewDemo(ctx context.Context, o Opts, log zerolog.Logger) (*demoReport, error) {
	rep := &demoReport{Jobs: o.jobs, Workers: o.Workers, CallsPerChunk: contractreview.CallsPerChunk, Seed: o.Run.Model.Seed,
		ModelLatencyMS: float64(o.Run.Model.Latency) / float64(time.Millisecond), ModelFailureRate: o.Run.Model.FailureRate}
	rep.SimModel = o.Run.ModelFlags.URL == ""
	if o.Run.ModelFlags.URL == "" && o.Run.SimURL == "" {
		// The model calls go through the OpenAI-compatible client, to
		// the sim's /v1/chat/completions.
		m := o.Run.Model
		simURL, simCmd, err := e.startSim(ctx, "--seed", fmt.Sprint(m.Seed), "--model-seed", fmt.Sprint(m.Seed),
			"--model-latency", m.Latency.String(), "--model-failure-rate", fmt.Sprint(m.FailureRate),
			"--model-permanent-rate", fmt.Sprint(m.PermanentRate))
		if err != nil {
			return rep, err
		}
		defer func() { _ = simCmd.Process.Signal(syscall.SIGTERM); _ = simCmd.Wait() }()
		o.Run.SimURL = simURL
	}
	rep.ModelURL = o.Run.ModelFlags.URL
	if rep.ModelURL == "" && o.Run.SimURL != "" {
		rep.ModelURL = strings.TrimSuffix(o.Run.SimURL, "/") + "/v1"
	}
	d, err := e.StartDeployment(ctx, &o, log)
	rep.SyncInterval, rep.JournalWrites = d.syncInterval, o.Run.JournalWrites
	if err != nil {
		return rep, err
	}
	defer d.Close()
	inputs := make([]any, o.jobs)
	for i := range inputs {
		inputs[i] = contractreview.Input{Text: contractreview.Contract(o.chunks, o.Run.Model.Seed+int64(i))}
	}
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	jobs, k, err := d.submit(waitCtx, o, contractreview.Name, inputs)
	if err != nil {
		return rep, err
	}
	if k != nil {
		rep.KilledWorker, rep.KilledJob, rep.KilledChunk, rep.KilledAtStage = k.worker, k.job, k.chunk, k.stage
	}
	stop := startProgress(waitCtx, o.progress, d.Client, jobs, k)
	rep.TimedOut = waitJobs(waitCtx, d.Client, jobs, log) != nil
	stop()
	rep.WallSeconds = time.Since(start).Seconds()
	err = collect(ctx, d.Client, jobs, rep)
	if err == nil && o.onDone != nil {
		o.onDone(d, rep)
	}
	return rep, err
}

// collect fills the report from the checkpoints and streams.
func collect(ctx context.Context, client *salvage.Client, jobs []string, r *demoReport) error {
	for _, id := range jobs {
		j, chunks, err := operator.AllChunks(ctx, client, id)
		if err != nil {
			return err
		}
		if j.Status == salvage.JobDone {
			r.JobsDone++
		}
		r.Chunks += j.Chunks
		r.PromptTokens += j.Summary.PromptTokens
		r.CompletionTokens += j.Summary.CompletionTokens
		for _, c := range chunks {
			_, cancelled := c.Status.Cancelled()
			switch {
			case c.Status == salvage.ChunkDone:
				r.ChunksDone++
			case c.Status == salvage.ChunkDeadLettered:
				r.ChunksDeadLettered++
			case cancelled:
				r.ChunksCancelled++
			}
			r.Calls += c.Calls
			r.Tier1Retries += c.Tier1Retries
			r.Redeliveries += c.Redeliveries
			r.Takeovers += c.Takeovers
		}
		res, err := client.JobResults(ctx, id)
		if err != nil {
			return err
		}
		r.Results += len(res)
		envs, err := operator.AllEnvelopes(ctx, client, salvage.EnvelopeFilter{Job: id})
		if err != nil {
			return err
		}
		r.Envelopes += len(envs)
	}
	r.ChunksMissing = r.Chunks - r.ChunksDone - r.ChunksDeadLettered - r.ChunksCancelled
	return nil
}
