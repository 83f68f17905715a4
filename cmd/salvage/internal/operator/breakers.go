package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func (e *Env) breakersCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "breakers",
		Short: "List the external systems' circuit breakers and the chunks each holds",
		Long: `List every external system whose circuit breaker ever opened: its state (closed,
open, half-open), when it opened and when it lets a probe through, the probe chunk,
how often it opened, why, and how many chunks wait for it on SALVAGE_HOLD. A system
not listed has a closed breaker.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = e.withReader("salvage breakers", func(ctx context.Context, c *reader) error {
		bs, err := c.BreakerList(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return WriteItems(e, bs)
		}
		tw := Table(e.Stdout)
		fmt.Fprintln(tw, "SYSTEM\tSTATE\tHELD\tOPENS\tOPENED\tPROBE AFTER\tPROBE\tREASON")
		when := func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return t.Local().Format("15:04:05")
		}
		for _, b := range bs {
			probe := b.Probe
			if probe == "" {
				probe = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", b.System, b.State, b.Held, b.Opens, when(b.OpenedAt), when(b.RetryAt), probe, b.Reason)
		}
		return tw.Flush()
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"items": [...]}`)
	return cmd
}
