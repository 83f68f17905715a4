package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
)

// acceptWait bounds how long submit without --wait waits to learn whether
// the job was accepted.
const acceptWait = 5 * time.Second

func (e *Env) submitCmd() *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
		budget  salvage.Budget
		tenant  string
	)
	cmd := &cobra.Command{
		Use:   "submit PIPELINE FILE|-",
		Short: "Submit a job and print its id",
		Long: `Submit a job to salvage.jobs.PIPELINE. FILE (or - for stdin) is a job message
({"input": ..., "job_id"?, "budget"?, "metadata"?, "tenant"?}) or, for contract-review, plain
contract text. It prints the job's id once a splitter accepted it, and fails at once
when the job is rejected (an unknown pipeline, bad input). --budget-tokens and --budget-usd set (or override) the job's budget:
once the model usage of its finished chunks passes it, its remaining chunks stop and
one BUDGET_EXCEEDED envelope escalates. --tenant names whose job it is (the limit
tenant.<tenant> caps its chunks in flight and calls). With --wait, show progress and exit 0 done,
3 partial, 4 incomplete, 5 cancelled, 1 on error.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pipeline, file := args[0], args[1]
			if err := salvage.ValidateToken("pipeline", pipeline); err != nil {
				return err
			}
			data, err := e.readInput(file)
			if err != nil {
				return err
			}
			input, opts, err := jobRequest(pipeline, data)
			if err != nil {
				return err
			}
			if opts, err = submitOverrides(cmd, opts, budget, tenant); err != nil {
				return err
			}
			nc, js, err := e.Connect("salvage submit")
			if err != nil {
				return err
			}
			defer nc.Close()
			c, err := salvage.NewClient(js, nil)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			id, err := c.JobSubmit(ctx, pipeline, input, opts)
			if err != nil {
				return err
			}
			if !wait {
				return e.submitted(ctx, c, pipeline, id)
			}
			fmt.Fprintln(e.Stdout, id)
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return e.waitJob(ctx, c, id)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the job to finish, showing progress")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "with --wait, give up after this long")
	cmd.Flags().Int64Var(&budget.Tokens, "budget-tokens", 0, "the most model tokens the job may use (0: no cap)")
	cmd.Flags().Float64Var(&budget.Cost, "budget-usd", 0, "the most the job's model calls may cost, priced by salvage up --price (0: no cap)")
	cmd.Flags().StringVar(&tenant, "tenant", "", "whose job it is (overrides the file's tenant)")
	return cmd
}

// submitOverrides applies --budget-tokens, --budget-usd (those given)
// and --tenant to the file's options, and refuses a budget that is NaN,
// infinite, negative or past the bound before anything is sent.
func submitOverrides(cmd *cobra.Command, opts *salvage.SubmitOpts, budget salvage.Budget, tenant string) (*salvage.SubmitOpts, error) {
	tokensSet, costSet := cmd.Flags().Changed("budget-tokens"), cmd.Flags().Changed("budget-usd")
	if (tokensSet || costSet || tenant != "") && opts == nil {
		opts = &salvage.SubmitOpts{}
	}
	if tokensSet || costSet {
		b := salvage.Budget{}
		if opts.Budget != nil {
			b = *opts.Budget
		}
		if tokensSet {
			b.Tokens = budget.Tokens
		}
		if costSet {
			b.Cost = budget.Cost
		}
		opts.Budget = &b
	}
	if tenant != "" {
		opts.Tenant = tenant
	}
	if opts != nil {
		if err := salvage.ValidateBudget(opts.Budget); err != nil {
			return nil, fmt.Errorf("--budget-tokens/--budget-usd or the file's budget: %w", err)
		}
	}
	return opts, nil
}

// submitted prints job id once a splitter accepted it, and fails at once
// when it was refused (an unknown pipeline, bad input), rather than leave
// that to a later status; no splitter within acceptWait is said, not
// failed.
func (e *Env) submitted(ctx context.Context, c *salvage.Client, pipeline, id string) error {
	actx, cancel := context.WithTimeout(ctx, acceptWait)
	defer cancel()
	err := c.JobWaitAccepted(actx, id)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintln(e.Stdout, id)
		fmt.Fprintf(e.Stderr, "salvage submit: no splitter took job %s within %s: %s\n", id, acceptWait, whyWaiting(ctx, c, pipeline))
		return nil
	case err != nil:
		return fmt.Errorf("job %s: %w", id, err)
	}
	fmt.Fprintln(e.Stdout, id)
	return nil
}

func (e *Env) readInput(file string) ([]byte, error) {
	var r io.Reader = e.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	// Read one byte past the limit to tell "too big" from "exactly full".
	data, err := io.ReadAll(io.LimitReader(r, salvage.MaxPayloadDefault+1))
	if err != nil {
		return nil, err
	}
	if len(data) > salvage.MaxPayloadDefault {
		return nil, fmt.Errorf("input is over the %d KiB job limit", salvage.MaxPayloadDefault>>10)
	}
	return data, nil
}

// jobRequest reads a file's bytes as a job message (or, for
// contract-review, plain contract text) into the input and the options of
// a submission.
func jobRequest(pipeline string, data []byte) (json.RawMessage, *salvage.SubmitOpts, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, nil, errors.New("input is empty")
	}
	if trimmed[0] != '{' {
		if pipeline != contractreview.Name {
			return nil, nil, fmt.Errorf("input for %s must be a JSON job message", pipeline)
		}
		text, _ := json.Marshal(contractreview.Input{Text: string(data)})
		return text, nil, nil
	}
	var msg struct {
		JobID    *string         `json:"job_id"`
		Input    json.RawMessage `json:"input"`
		Budget   *salvage.Budget `json:"budget"`
		Metadata map[string]any  `json:"metadata"`
		Tenant   string          `json:"tenant"`
	}
	if err := json.Unmarshal(trimmed, &msg); err != nil {
		return nil, nil, fmt.Errorf("job message is not valid JSON: %w", err)
	}
	if len(msg.Input) == 0 {
		return nil, nil, fmt.Errorf(`%w: job message has no "input"`, salvage.ErrInvalidJob)
	}
	opts := &salvage.SubmitOpts{Budget: msg.Budget, Metadata: msg.Metadata, Tenant: msg.Tenant}
	if msg.JobID != nil {
		if err := salvage.ValidateJobID(*msg.JobID); err != nil {
			return nil, nil, err
		}
		opts.JobID = *msg.JobID
	}
	return msg.Input, opts, nil
}

// waitJob shows progress until the job finishes and maps its status to
// the exit code.
func (e *Env) waitJob(ctx context.Context, c *salvage.Client, id string) error {
	type result struct {
		job *salvage.Job
		err error
	}
	ended := make(chan result, 1)
	go func() {
		j, err := c.JobWait(ctx, id)
		ended <- result{j, err}
	}()
	bar := newProgress(e.Stderr)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-ended:
			bar.done()
			if r.err != nil {
				return &Exit{Code: ExitError, Err: fmt.Errorf("job %s: %w", id, r.err)}
			}
			j := r.job
			bar.show(*j)
			bar.done()
			fmt.Fprintf(e.Stderr, "job %s %s: %d/%d chunks done, %d dead-lettered, %d cancelled\n",
				id, j.Status, j.Summary.Done, j.Chunks, j.Summary.DeadLettered, j.Summary.Cancelled)
			for _, why := range j.Explanation {
				fmt.Fprintln(e.Stderr, "  "+why)
			}
			return exitFor(j.Status)
		case <-tick.C:
			if j, err := c.JobGet(ctx, id); err == nil {
				bar.show(*j)
			}
		}
	}
}

// progress draws a bar of chunks done and failed: redrawn in place on a
// terminal, a line per change otherwise.
type progress struct {
	w    io.Writer
	tty  bool
	last string
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) show(j salvage.Job) {
	const width = 30
	n := max(j.Chunks, 1)
	done := j.Summary.Done * width / n
	failed := j.Summary.DeadLettered * width / n
	bar := strings.Repeat("#", done) + strings.Repeat("x", failed) + strings.Repeat(".", max(width-done-failed, 0))
	line := fmt.Sprintf("[%s] %d/%d done, %d failed", bar, j.Summary.Done, j.Chunks, j.Summary.DeadLettered)
	if line == p.last {
		return
	}
	p.last = line
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) done() {
	if p.tty && p.last != "" {
		fmt.Fprintln(p.w)
	}
}

// whyWaiting says why a job for pipeline is not taken: no process has
// ever run the pipeline (it will be rejected), or none runs it now (it
// waits) — as far as this user may read the pipelines.
func whyWaiting(ctx context.Context, c *salvage.Client, pipeline string) string {
	ps, err := c.PipelineList(ctx)
	if err != nil {
		return "is salvage up (role worker) running for pipeline " + pipeline + " against this server?"
	}
	for _, p := range ps {
		if p.Pipeline == pipeline {
			return "no worker of pipeline " + pipeline + " is taking jobs now; the job waits in SALVAGE_JOBS until one does"
		}
	}
	return "no process has ever run pipeline " + pipeline + "; unless one starts, the job is rejected unknown-pipeline after the deployment's --unknown-pipeline-wait (30s by default)"
}

// exitFor is how a command that waited for a job exits on its status: 0
// done, 3 partial, 5 cancelled, 4 otherwise.
func exitFor(status salvage.JobStatus) error {
	switch status {
	case salvage.JobDone:
		return nil
	case salvage.JobPartial:
		return &Exit{Code: ExitPartial}
	case salvage.JobCancelled:
		return &Exit{Code: ExitCancelled}
	default:
		return &Exit{Code: ExitIncomplete}
	}
}
