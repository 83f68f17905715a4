package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
)

func (e *Env) heldCmd() *cobra.Command {
	var (
		system string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   string(salvage.ChunkHeld), // the chunks SALVAGE_HOLD holds
		Short: "List the chunks waiting in SALVAGE_HOLD across jobs: at a breaker, parked by a pause, awaiting approval",
		Long: `List the chunks waiting in SALVAGE_HOLD, across every job, longest waiting first: held
at an external system whose breaker is open (or which paces them), parked while their
pipeline is paused, or awaiting a person's approval (salvage approvals shows those with
their stage and input). --system keeps one: an external system, approval, or
paused-<pipeline>. One read per chunk listed, whatever the number waiting. --json prints
{"items": [...]}.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = e.withReader("salvage held", func(ctx context.Context, c *reader) error {
		if limit < 1 || limit > salvage.HeldLimit {
			return fmt.Errorf("--limit %d: want 1 to %d", limit, salvage.HeldLimit)
		}
		hs, err := c.ChunkListHeld(ctx, system, limit)
		if err != nil {
			return err
		}
		if asJSON {
			return WriteItems(e, hs)
		}
		if len(hs) == 0 {
			fmt.Fprintln(e.Stdout, "no chunk is held")
			return nil
		}
		tw := Table(e.Stdout)
		fmt.Fprintln(tw, "JOB\tCHUNK\tPIPELINE\tSYSTEM\tWAITING\tWHY")
		for _, h := range hs {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", h.Job, h.Chunk, h.Pipeline, h.System, time.Since(h.Since).Round(time.Second), h.Why)
		}
		return tw.Flush()
	})
	f := cmd.Flags()
	f.StringVar(&system, "system", "", "only the chunks waiting on this system (approval, paused-<pipeline>, or an external system)")
	f.IntVar(&limit, "limit", 100, fmt.Sprintf("list at most this many (1 to %d)", salvage.HeldLimit))
	f.BoolVar(&asJSON, "json", false, `print JSON: {"items": [...]}`)
	return cmd
}
