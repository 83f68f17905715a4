package operator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
)

func (e *Env) limitsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "List the rate limits and what the processes calling each hold of it",
		Long: `List every declared rate limit: its key (system.<system>: every tool whose System it
names; tool.<tool>: one tool), its requests and tokens per minute and requests in
flight, the processes holding a share of it and what their shares add up to, how many
had requests waiting, and a pause a provider asked for. Every worker follows the
declarations; 'salvage limits set' and 'salvage limits rm' change them for all at once.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = e.withReader("salvage limits", func(ctx context.Context, r *reader) error {
		ls, err := r.LimitList(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return WriteItems(e, ls)
		}
		tw := Table(e.Stdout)
		fmt.Fprintln(tw, "KEY\tREQUESTS/MIN\tTOKENS/MIN\tIN FLIGHT\tCHUNKS\tHOLDERS\tHELD (req/min, tok/min, in flight, chunks)\tWAITING\t429s (10 min)\tPAUSED UNTIL\tSET BY")
		bound := func(n int64) string {
			if n == 0 {
				return "-"
			}
			return Thousands(int(n))
		}
		for _, l := range ls {
			paused := "-"
			if !l.PausedUntil.IsZero() {
				paused = l.PausedUntil.Local().Format(time.TimeOnly)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%.0f, %.0f, %d, %d\t%d\t%d\t%s\t%s\n", l.Key, bound(int64(l.RequestsPerMinute)), bound(l.TokensPerMinute),
				bound(int64(l.InFlight)), bound(int64(l.Chunks)), l.Holders, l.HeldRequestsPerMinute, l.HeldTokensPerMinute, l.HeldInFlight, l.HeldChunks, l.Waiting, l.Recent429s, paused, l.SetBy)
		}
		return tw.Flush()
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"items": [...]}`)
	cmd.AddCommand(e.limitsSetCmd(), e.limitsRmCmd())
	return cmd
}

func (e *Env) limitsSetCmd() *cobra.Command {
	var l salvage.Limit
	var asJSON bool
	var reason string
	by := operatorName()
	cmd := &cobra.Command{
		Use:   "set KEY",
		Short: "Declare or change a rate limit: requests and tokens per minute, requests in flight, a tenant's chunks in flight",
		Long: `Declare a rate limit on KEY, or change it: system.<system> (every tool whose System
is <system>; chatmodel names a model endpoint's system model-<host>, dots as _),
tool.<tool>, or tenant.<tenant> (the jobs submitted with that tenant: their calls, and
with --chunks their chunks running at once). Every worker process follows the change within a moment and paces its
requests to its share; a flag left out is no bound, and at least one is needed.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		l.Key = args[0]
		var out salvage.Limit
		if err := e.request("limits.set", map[string]any{"key": l.Key, "requests_per_minute": l.RequestsPerMinute,
			"tokens_per_minute": l.TokensPerMinute, "in_flight": l.InFlight, "chunks": l.Chunks, "by": by, "reason": reason}, &out); err != nil {
			return err
		}
		if asJSON {
			return e.WriteJSON(out)
		}
		fmt.Fprintf(e.Stdout, "limit %s set by %s\n", out.Key, out.SetBy)
		return nil
	}
	f := cmd.Flags()
	f.IntVar(&l.RequestsPerMinute, "rpm", 0, "requests a minute, the fleet together (0: no bound)")
	f.Int64Var(&l.TokensPerMinute, "tpm", 0, "tokens a minute, the fleet together (0: no bound)")
	f.IntVar(&l.InFlight, "in-flight", 0, "requests open at once, the fleet together (0: no bound)")
	f.IntVar(&l.Chunks, "chunks", 0, "a tenant's chunks running at once, the fleet together (tenant.<name> only; 0: no bound)")
	f.StringVar(&by, "by", by, "who sets it, recorded with the limit")
	f.StringVar(&reason, "reason", "", "why, recorded in the audit (salvage audit)")
	f.BoolVar(&asJSON, "json", false, "print the limit as JSON")
	return cmd
}

func (e *Env) limitsRmCmd() *cobra.Command {
	by := operatorName()
	var reason string
	cmd := &cobra.Command{
		Use:   "rm KEY",
		Short: "Remove a rate limit: requests to its key are no longer paced",
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		var out map[string]string
		if err := e.request("limits.remove", map[string]string{"key": args[0], "by": by, "reason": reason}, &out); err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "limit %s removed\n", args[0])
		return nil
	}
	cmd.Flags().StringVar(&by, "by", by, "who removes it")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the audit (salvage audit)")
	return cmd
}

// Thousands formats n with thousands separators.
func Thousands(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}
