package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
)

// withClient connects and makes a client (not started: it only reads and
// operates) for a command.
func (e *Env) withClient(name string, fn func(ctx context.Context, c *salvage.Client) error) func(*cobra.Command, []string) error {
	return e.withConn(name, func(ctx context.Context, _ *nats.Conn, c *salvage.Client) error { return fn(ctx, c) })
}

// withConn connects and makes a client for a command that also needs the
// connection, with a minute for the command and the server's refusals
// explained.
func (e *Env) withConn(name string, fn func(ctx context.Context, nc *nats.Conn, c *salvage.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		nc, js, err := e.Connect(name)
		if err != nil {
			return err
		}
		defer nc.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
		defer cancel()
		ctx = e.refused.watch(ctx)
		c, err := salvage.NewClient(js, nil)
		if err != nil {
			return err
		}
		return e.explain(fn(ctx, nc, c))
	}
}

// WriteJSON writes v to stdout as indented JSON.
func (e *Env) WriteJSON(v any) error {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteItems prints a listing under --json: {"items": [...]}, never
// null.
func WriteItems[T any](e *Env, items []T) error {
	if items == nil {
		items = []T{}
	}
	return e.WriteJSON(struct {
		Items []T `json:"items"`
	}{items})
}

// Table returns the column writer every table of the CLI prints through.
func Table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func jobArg(args []string) (string, error) {
	if err := salvage.ValidateJobID(args[0]); err != nil {
		return "", err
	}
	return args[0], nil
}

// noJob turns an unknown job into the CLI's message.
func noJob(id string, err error) error {
	if errors.Is(err, salvage.ErrUnknownJob) {
		return fmt.Errorf("no job %s", id)
	}
	return err
}

func (e *Env) statusCmd() *cobra.Command {
	var asJSON, failed bool
	cmd := &cobra.Command{
		Use:   "status JOB",
		Short: "Show a job and each chunk's stage, status, deliveries and envelope",
		Long: `Show a job: its counts (every chunk in exactly one of them), why it ended as it did
(failures first), and each chunk's stage, status, deliveries and envelope. --failed lists
only the chunks that failed or wait — dead-lettered, cancelled with effects to settle,
held at a breaker, awaiting approval, paused, or carrying an envelope or an error — the
dead-lettered first.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := jobArg(args)
		if err != nil {
			return err
		}
		return e.withReader("salvage status", func(ctx context.Context, c *reader) error {
			var j *salvage.Job
			var chunks []salvage.Chunk
			var err error
			if failed {
				j, chunks, err = allFailing(ctx, c, id)
			} else {
				j, chunks, err = AllChunks(ctx, c, id)
			}
			if err != nil {
				return noJob(id, err)
			}
			if asJSON {
				if chunks == nil {
					chunks = []salvage.Chunk{}
				}
				return e.WriteJSON(map[string]any{"job": j, "chunks": chunks})
			}
			part := ""
			if j.Partition > 0 {
				part = fmt.Sprintf("  partition %d", j.Partition)
			}
			fmt.Fprintf(e.Stdout, "job %s  pipeline %s  status %s  trace %s%s\n", j.ID, j.Pipeline, j.Status, j.TraceID, part)
			fmt.Fprintf(e.Stdout, "chunks %d: %s\n", j.Chunks, chunkCounts(j, chunks, failed))
			if j.Status == salvage.JobRunning {
				if ps, err := c.PipelineList(ctx); err == nil {
					for _, p := range ps {
						if p.Pipeline == j.Pipeline && p.Paused {
							writePipeline(e.Stdout, p)
						}
					}
				}
			}
			for _, why := range j.Explanation {
				fmt.Fprintln(e.Stdout, "  "+why)
			}
			if failed && len(chunks) == 0 {
				fmt.Fprintln(e.Stdout, "no chunk failed or waits")
				return nil
			}
			tw := Table(e.Stdout)
			fmt.Fprintln(tw, "CHUNK\tSTAGE\tSTATUS\tDELIVERIES\tTIER1\tCALLS\tWORKER\tENVELOPE\tLAST ERROR")
			for _, ch := range chunks {
				fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", ch.Chunk, ch.Stage, ch.Status, ch.Deliveries,
					ch.Tier1Retries, ch.Calls, ch.ClaimedBy, ch.Envelope, truncate(ch.LastError, 60))
			}
			return tw.Flush()
		})(cmd, args)
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&failed, "failed", false, "only chunks that failed or wait, dead-lettered first")
	return cmd
}

// chunkCounts says how many chunks stand where, every chunk counted once:
// the job's outcome counts, and the rest from the chunk list (which under
// --failed holds only the failing ones, so it counts only those).
func chunkCounts(j *salvage.Job, chunks []salvage.Chunk, failedOnly bool) string {
	counts := map[salvage.ChunkStatus]int{}
	for _, ch := range chunks {
		counts[ch.Status]++
	}
	parts := []string{
		fmt.Sprintf("%d done", j.Summary.Done),
		fmt.Sprintf("%d dead-lettered", j.Summary.DeadLettered),
		fmt.Sprintf("%d cancelled", j.Summary.Cancelled),
	}
	for _, s := range []salvage.ChunkStatus{salvage.ChunkRunning, salvage.ChunkPending, salvage.ChunkHeld, salvage.ChunkAwaitingApproval, salvage.ChunkPaused} {
		if failedOnly && (s == salvage.ChunkRunning || s == salvage.ChunkPending) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	return strings.Join(parts, ", ")
}

// operatorName is who an operator action is recorded as: $USER, else
// "cli".
func operatorName() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "cli"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func (e *Env) jobsCmd() *cobra.Command {
	var (
		asJSON        bool
		q             salvage.JobQuery
		statuses      []string
		meta          string
		since, before time.Duration
		finished      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List and search jobs, newest first: by metadata, tenant, pipeline, status and age",
		Long: `List jobs, newest first. --meta KEY=VALUE finds the jobs whose metadata has that pair
(one of the first 16 top-level pairs, by key, whose value is a string, a number or a
boolean), --tenant a tenant's: each is read from its own index, never every record.
--pipeline, --status, --since and --before narrow what that index lists; a page reads
at most 5,000 entries of it, and says how to go on. --json prints
{"items": [...], "total": N, "next_offset": N}.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if q.Limit < 1 || q.Limit > salvage.PageMax {
			return fmt.Errorf("--limit %d: want 1 to %d", q.Limit, salvage.PageMax)
		}
		for _, s := range statuses {
			if !slices.Contains(salvage.JobStatuses(), salvage.JobStatus(s)) {
				return fmt.Errorf("--status %q: want one or more of %v", s, salvage.JobStatuses())
			}
			q.Statuses = append(q.Statuses, salvage.JobStatus(s))
		}
		if meta != "" {
			k, v, err := salvage.ParseMeta(meta)
			if err != nil {
				return fmt.Errorf("--meta: %w", err)
			}
			q.MetaKey, q.MetaValue = k, v
		}
		if since > 0 {
			q.CreatedAfter = time.Now().Add(-since)
		}
		if before > 0 {
			q.CreatedBefore = time.Now().Add(-before)
		}
		if finished > 0 {
			q.FinishedAfter = time.Now().Add(-finished)
		}
		if err := q.Validate(); err != nil {
			return err
		}
		return e.withReader("salvage jobs", func(ctx context.Context, c *reader) error {
			p, err := c.JobSearch(ctx, q)
			if err != nil {
				return err
			}
			if asJSON {
				return e.WriteJSON(p)
			}
			tw := Table(e.Stdout)
			fmt.Fprintln(tw, "JOB\tPIPELINE\tSTATUS\tCHUNKS\tDONE\tFAILED\tCREATED")
			for _, j := range p.Items {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", j.ID, j.Pipeline, j.Status, j.Chunks, j.Summary.Done,
					j.Summary.DeadLettered, j.CreatedAt.Local().Format(time.DateTime))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if p.NextOffset > 0 {
				fmt.Fprintf(e.Stderr, "more: the same command with --offset %d\n", p.NextOffset)
			}
			return nil
		})(cmd, args)
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, `print JSON: {"items": [...], "total": N, "next_offset": N}`)
	f.IntVar(&q.Limit, "limit", salvage.PageDefault, fmt.Sprintf("at most this many jobs (1 to %d)", salvage.PageMax))
	f.IntVar(&q.Offset, "offset", 0, "continue a listing: the offset the last page gave")
	f.StringSliceVar(&statuses, "status", nil, "only jobs in these statuses (running, done, partial, incomplete, cancelled; comma-separated)")
	f.StringVar(&meta, "meta", "", "only jobs whose metadata has KEY=VALUE (read from that pair's index)")
	f.StringVar(&q.Tenant, "tenant", "", "only the jobs of this tenant (read from its index)")
	f.StringVar(&q.Pipeline, "pipeline", "", "only jobs of this pipeline")
	f.DurationVar(&since, "since", 0, "only jobs created in the last this long (e.g. 24h)")
	f.DurationVar(&before, "before", 0, "only jobs created longer ago than this")
	f.DurationVar(&finished, "finished-since", 0, "only jobs that finished in the last this long")
	return cmd
}

func (e *Env) cancelCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel a job: queued chunks leave the queue at once, running ones stop at their next stage",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := jobArg(args)
			if err != nil {
				return err
			}
			// Through the salvage.api service: an operator's user needs
			// the API, not the buckets.
			var j salvage.Job
			if err := e.request("jobs.cancel", map[string]string{"job_id": id, "by": operatorName(), "reason": reason}, &j); err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "job %s cancelled: %s, %d done, %d cancelled, %d dead-lettered of %d chunks (running ones stop at their next stage)\n",
				id, j.Status, j.Summary.Done, j.Summary.Cancelled, j.Summary.DeadLettered, j.Chunks)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the audit (salvage audit)")
	return cmd
}

func (e *Env) resultsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{Use: "results JOB", Short: "Print a job's findings, one entry per finished chunk", Args: cobra.ExactArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := jobArg(args)
		if err != nil {
			return err
		}
		return e.withClient("salvage results", func(ctx context.Context, c *salvage.Client) error {
			j, err := c.JobGet(ctx, id)
			if err != nil {
				return noJob(id, err)
			}
			results, err := c.JobResults(ctx, id)
			if err != nil {
				return err
			}
			if asJSON {
				type finding struct {
					Chunk  int             `json:"chunk"`
					Result json.RawMessage `json:"result"`
				}
				out := make([]finding, 0, len(results))
				for chunk := 1; chunk <= j.Chunks; chunk++ {
					if r, ok := results[chunk]; ok {
						out = append(out, finding{Chunk: chunk, Result: r})
					}
				}
				return e.WriteJSON(out)
			}
			fmt.Fprintf(e.Stdout, "job %s (%s, %s): %d of %d chunks have findings\n", id, j.Pipeline, j.Status, len(results), j.Chunks)
			tw := Table(e.Stdout)
			if j.Pipeline != contractreview.Name {
				// Another pipeline's results are its own JSON.
				fmt.Fprintln(tw, "CHUNK\tRESULT")
				for chunk := 1; chunk <= j.Chunks; chunk++ {
					r, ok := results[chunk]
					if !ok {
						fmt.Fprintf(tw, "%d\t(none)\n", chunk)
						continue
					}
					fmt.Fprintf(tw, "%d\t%s\n", chunk, truncate(string(r), 120))
				}
				return tw.Flush()
			}
			fmt.Fprintln(tw, "CHUNK\tRISK\tTYPE\tHIGHEST CATEGORIES\tHEADING")
			for chunk := 1; chunk <= j.Chunks; chunk++ {
				r, ok := results[chunk]
				if !ok {
					fmt.Fprintf(tw, "%d\t-\t-\t(no findings)\t\n", chunk)
					continue
				}
				var f contractreview.Finding
				if err := json.Unmarshal(r, &f); err != nil || f.Risk == "" {
					fmt.Fprintf(tw, "%d\t\t\t%s\t\n", chunk, truncate(string(r), 80))
					continue
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", chunk, f.Risk, f.ClauseType, topCategories(f.CategoryRisk, 3), f.Heading)
			}
			return tw.Flush()
		})(cmd, args)
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the findings as a JSON array")
	return cmd
}
