package operator

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
)

// tenantCmd speaks for one tenant through its own endpoints,
// salvage.api.tenant.<name>.jobs.*: what a tenant's user (accounts.conf's
// tenant-a, tenant-b) may do, and all it may.
func (e *Env) tenantCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Submit, list, watch, cancel and read the results of one tenant's jobs, through its own endpoints",
		Long: `Speak for tenant --name through salvage.api.tenant.<name>.jobs.*, the endpoints a
tenant's user may call and no other (natsconf/accounts.conf's tenant-a and tenant-b): jobs
submitted here are recorded as the tenant's, and only the tenant's own jobs can be listed,
read, cancelled or have their results read — another tenant's job is one that does not
exist. Connect as the tenant's user, with its inbox prefix.`,
	}
	cmd.PersistentFlags().StringVar(&name, "name", "", "the tenant (required)")
	endpoint := func(op string) (string, error) {
		if name == "" {
			return "", fmt.Errorf("--name: which tenant")
		}
		if err := salvage.ValidateToken("tenant", name); err != nil {
			return "", err
		}
		return "tenant." + name + ".jobs." + op, nil
	}
	ask := func(op string, body, out any) error {
		ep, err := endpoint(op)
		if err != nil {
			return err
		}
		return noJobOf(body, e.request(ep, body, out))
	}

	cmd.AddCommand(e.tenantSubmitCmd(ask), e.tenantJobsCmd(ask), e.tenantStatusCmd(ask), e.tenantCancelCmd(ask), e.tenantResultsCmd(ask))
	return cmd
}

// tenantAsk asks the tenant's endpoint op (submit, list, status, cancel,
// results) with body, decoding the reply into out.
type tenantAsk func(op string, body, out any) error

// tenantSubmitCmd is `salvage tenant submit PIPELINE FILE|-`.
func (e *Env) tenantSubmitCmd(ask tenantAsk) *cobra.Command {
	var wait bool
	var timeout time.Duration
	submit := &cobra.Command{
		Use:   "submit PIPELINE FILE|-",
		Short: "Submit a job as the tenant's and print its id",
		Args:  cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := salvage.ValidateToken("pipeline", args[0]); err != nil {
				return err
			}
			data, err := e.readInput(args[1])
			if err != nil {
				return err
			}
			input, opts, err := jobRequest(args[0], data)
			if err != nil {
				return err
			}
			body := map[string]any{"pipeline": args[0], "input": input}
			if opts != nil {
				if opts.JobID != "" {
					body["job_id"] = opts.JobID
				}
				if opts.Budget != nil {
					body["budget"] = opts.Budget
				}
				if opts.Metadata != nil {
					body["metadata"] = opts.Metadata
				}
			}
			var r salvage.SubmitReply
			if err := ask("submit", body, &r); err != nil {
				return err
			}
			fmt.Fprintln(e.Stdout, r.JobID)
			if !wait {
				return nil
			}
			deadline := time.Now().Add(timeout)
			for {
				var st salvage.ChunkPage
				if err := ask("status", map[string]any{"job_id": r.JobID, "limit": 1}, &st); err != nil {
					return err
				}
				if st.Job.Status != salvage.JobRunning {
					fmt.Fprintf(e.Stdout, "%s %s: %d done, %d dead-lettered, %d cancelled of %d\n", st.Job.ID, st.Job.Status,
						st.Job.Summary.Done, st.Job.Summary.DeadLettered, st.Job.Summary.Cancelled, st.Job.Chunks)
					return exitFor(st.Job.Status)
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("job %s still running after %s", r.JobID, timeout)
				}
				time.Sleep(500 * time.Millisecond)
			}
		},
	}
	submit.Flags().BoolVar(&wait, "wait", false, "wait for the job to finish (exit 0 done, 3 partial, 4 incomplete, 5 cancelled)")
	submit.Flags().DurationVar(&timeout, "timeout", time.Hour, "with --wait, give up after this long")
	return submit
}

// tenantJobsCmd is `salvage tenant jobs`.
func (e *Env) tenantJobsCmd(ask tenantAsk) *cobra.Command {
	var asJSON bool
	var page salvage.Page
	jobs := &cobra.Command{
		Use:   "jobs",
		Short: "List the tenant's jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			var out []salvage.Job
			if err := ask("list", page, &out); err != nil {
				return err
			}
			if asJSON {
				return e.WriteJSON(out)
			}
			tw := Table(e.Stdout)
			fmt.Fprintln(tw, "JOB\tPIPELINE\tSTATUS\tDONE\tCHUNKS\tCREATED")
			for _, j := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", j.ID, j.Pipeline, j.Status, j.Summary.Done, j.Chunks, j.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	jobs.Flags().IntVar(&page.Offset, "offset", 0, "skip this many jobs")
	jobs.Flags().IntVar(&page.Limit, "limit", salvage.PageDefault, "list at most this many")
	jobs.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return jobs
}

// tenantStatusCmd is `salvage tenant status JOB`.
func (e *Env) tenantStatusCmd(ask tenantAsk) *cobra.Command {
	status := &cobra.Command{
		Use:   "status JOB",
		Short: "Show one of the tenant's jobs, as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			id, err := jobArg(args)
			if err != nil {
				return err
			}
			var st salvage.ChunkPage
			if err := ask("status", map[string]any{"job_id": id}, &st); err != nil {
				return err
			}
			return e.WriteJSON(st)
		},
	}
	return status
}

// tenantCancelCmd is `salvage tenant cancel JOB`.
func (e *Env) tenantCancelCmd(ask tenantAsk) *cobra.Command {
	cancel := &cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel one of the tenant's jobs",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			id, err := jobArg(args)
			if err != nil {
				return err
			}
			var j salvage.Job
			if err := ask("cancel", map[string]any{"job_id": id}, &j); err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "job %s %s\n", j.ID, j.Status)
			return nil
		},
	}
	return cancel
}

// tenantResultsCmd is `salvage tenant results JOB`.
func (e *Env) tenantResultsCmd(ask tenantAsk) *cobra.Command {
	var rpage salvage.Page
	results := &cobra.Command{
		Use:   "results JOB",
		Short: "Print a page of one of the tenant's jobs' findings, one JSON line per chunk",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			id, err := jobArg(args)
			if err != nil {
				return err
			}
			var r salvage.Results
			if err := ask("results", map[string]any{"job_id": id, "offset": rpage.Offset, "limit": rpage.Limit}, &r); err != nil {
				return err
			}
			for _, c := range r.Results {
				fmt.Fprintf(e.Stdout, "{\"chunk\":%d,\"result\":%s}\n", c.Chunk, c.Result)
			}
			if r.NextOffset > 0 {
				fmt.Fprintf(e.Stderr, "more: --offset %d\n", r.NextOffset)
			}
			return nil
		},
	}
	results.Flags().IntVar(&rpage.Offset, "offset", 0, "skip this many chunks")
	results.Flags().IntVar(&rpage.Limit, "limit", salvage.ResultsPageMax, "chunks a page (at most 100)")
	return results
}

// noJobOf turns a 404 for the job a body names into the CLI's message.
func noJobOf(body any, err error) error {
	var se *serviceError
	if errors.As(err, &se) && se.code == salvage.CodeUnknown {
		if m, ok := body.(map[string]any); ok {
			if id, ok := m["job_id"].(string); ok {
				return fmt.Errorf("no job %s", id)
			}
		}
	}
	return err
}
