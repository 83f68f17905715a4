package operator

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// approvalsMax is the most chunks one `salvage approvals` lists (the
// service's bound on approvals.list).
const approvalsMax = 200

func (e *Env) approvalsCmd() *cobra.Command {
	var (
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List the chunks waiting for a person's approval, across jobs, longest waiting first",
		Long: `List the chunks waiting before a stage that requires approval, across every job,
longest waiting first: the job, the chunk, its pipeline and the stage that runs once
approved, how long it has waited, and the start of its input. Approve or reject one
with 'salvage approve JOB CHUNK [--reject]'. It reads the approval hold
(salvage.hold.approval.>) and one checkpoint per chunk listed, whatever the number
of jobs.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = e.withReader("salvage approvals", func(ctx context.Context, c *reader) error {
		if limit < 1 || limit > approvalsMax {
			return fmt.Errorf("--limit %d: want 1 to %d", limit, approvalsMax)
		}
		as, err := c.ChunkListAwaiting(ctx, limit)
		if err != nil {
			return err
		}
		if asJSON {
			return WriteItems(e, as)
		}
		if len(as) == 0 {
			fmt.Fprintln(e.Stdout, "no chunk awaits approval")
			return nil
		}
		tw := Table(e.Stdout)
		fmt.Fprintln(tw, "JOB\tCHUNK\tPIPELINE\tSTAGE\tWAITING\tINPUT")
		for _, a := range as {
			stage := "-"
			if a.Stage > 0 {
				stage = strconv.Itoa(a.Stage)
				if a.StageName != "" {
					stage += " " + a.StageName
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", a.Job, a.Chunk, a.Pipeline, stage,
				time.Since(a.Since).Round(time.Second), truncate(strings.Join(strings.Fields(a.Input), " "), 40))
		}
		return tw.Flush()
	})
	f := cmd.Flags()
	f.IntVar(&limit, "limit", 100, fmt.Sprintf("list at most this many (1 to %d)", approvalsMax))
	f.BoolVar(&asJSON, "json", false, `print JSON: {"items": [...]}`)
	return cmd
}
