package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
)

func (e *Env) auditCmd() *cobra.Command {
	var (
		q      salvage.AuditQuery
		action string
		since  time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List the operator actions: who, when, what, why and the outcome",
		Long: `List the operator actions SALVAGE_AUDIT holds, oldest first: pause, resume,
replay, resolve, ack, bulk, approve, reject, cancel and limit changes, whichever way
they came (dashboard, salvage.api and so the CLI, a program's Client). Each says who
acted — a name the dashboard or the NATS server vouched for, or "(unverified)", the
name the caller gave — when, on what, the reason given and the outcome: ok, refused
(with why), failed, or pending (asked, no outcome recorded: the process stopped
before it could say, and the records it acted on are the truth).

--job, --envelope, --pipeline and --limit-key read one target's entries from their
own subjects; without them every entry is read (from --since). A page ends with the
command that continues it.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = e.withReader("salvage audit", func(ctx context.Context, c *reader) error {
		q.Action = salvage.AuditAction(action)
		if since > 0 {
			q.Since = time.Now().Add(-since)
		}
		p, err := c.AuditList(ctx, q)
		if err != nil {
			return err
		}
		if asJSON {
			return e.WriteJSON(p)
		}
		if len(p.Items) == 0 {
			fmt.Fprintln(e.Stdout, "no operator action recorded")
		} else {
			tw := Table(e.Stdout)
			fmt.Fprintln(tw, "AT\tWHO\tVIA\tACTION\tTARGET\tOUTCOME\tREASON")
			for _, a := range p.Items {
				outcome := string(a.Outcome)
				if a.Error != "" {
					outcome += ": " + truncate(a.Error, 60)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.At.Local().Format(time.DateTime), actorText(a.Actor), a.Actor.Via,
					a.Action, auditTarget(a), outcome, truncate(a.Reason, 60))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if p.Next != 0 {
			fmt.Fprintf(e.Stderr, "more: salvage audit --after %d (with the same filters)\n", p.Next)
		}
		return nil
	})
	f := cmd.Flags()
	f.StringVar(&q.Job, "job", "", "the actions on one job, its chunks and envelopes")
	f.StringVar(&q.Envelope, "envelope", "", "the actions on one envelope")
	f.StringVar(&q.Pipeline, "pipeline", "", "the pauses and resumes of one pipeline")
	f.StringVar(&q.LimitKey, "limit-key", "", "the changes of one rate limit (<kind>.<name>)")
	f.StringVar(&action, "action", "", fmt.Sprintf("one action: %v", salvage.AuditActions()))
	f.DurationVar(&since, "since", 0, "the actions of the last this long (e.g. 24h)")
	f.Uint64Var(&q.After, "after", 0, "continue a listing from where its last page ended")
	f.IntVar(&q.Limit, "limit", salvage.PageDefault, fmt.Sprintf("list at most this many (1 to %d)", salvage.PageMax))
	f.BoolVar(&asJSON, "json", false, `print JSON: {"items": [...], "next": N}`)
	return cmd
}

// actorText is who acted, as a person reads it.
func actorText(a salvage.Actor) string {
	s := a.Name
	if a.Account != "" {
		s += "@" + a.Account
	}
	if !a.Verified {
		s += " (unverified)"
	}
	return s
}

// auditTarget is what an entry acted on.
func auditTarget(a salvage.AuditEntry) string {
	switch {
	case a.Envelope != "":
		return fmt.Sprintf("envelope %s (job %s chunk %d)", a.Envelope, a.Job, a.Chunk)
	case a.Job != "" && a.Chunk > 0:
		return fmt.Sprintf("job %s chunk %d", a.Job, a.Chunk)
	case a.Job != "":
		return "job " + a.Job
	case a.Pipeline != "":
		return "pipeline " + a.Pipeline
	case a.Limit != "":
		return "limit " + a.Limit
	}
	return truncate(a.Detail, 80)
}
