package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
)

// request calls a salvage.api endpoint and decodes its JSON answer into
// out. A service error comes back as an error naming its code.
func (e *Env) request(endpoint string, body, out any) error {
	nc, _, err := e.Connect("salvage " + endpoint)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = e.refused.watch(ctx)
	err = RequestOn(ctx, nc, endpoint, body, out)
	if errors.Is(err, errNoService) {
		return fmt.Errorf("no salvage api is listening on %s.%s: run salvage up (role api) against this server", salvage.ServicePrefix, endpoint)
	}
	return e.explain(err)
}

// errNoService is a request no salvage.api service answered.
var errNoService = errors.New("no salvage api service answered")

// serviceError is an error the service answered, with its numeric code
// and, from a service that sends it, the stable name of what went wrong
// (salvage.ErrorCode).
type serviceError struct {
	code, text, name string
}

func (e *serviceError) Error() string { return fmt.Sprintf("%s (%s)", e.text, e.code) }

// RequestOn calls a salvage.api endpoint on nc and decodes its JSON
// answer into out: errNoService when no service answers, a
// *serviceError for the service's error.
func RequestOn(ctx context.Context, nc *nats.Conn, endpoint string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := nc.RequestWithContext(ctx, salvage.ServicePrefix+"."+endpoint, data)
	// A service that is starting (salvage up just printed its URL) has
	// no responder for a moment: ask again, briefly.
	for wait := 50 * time.Millisecond; errors.Is(err, nats.ErrNoResponders) && wait <= 800*time.Millisecond; wait *= 2 {
		time.Sleep(wait)
		resp, err = nc.RequestWithContext(ctx, salvage.ServicePrefix+"."+endpoint, data)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return errNoService
	}
	if err != nil {
		return err
	}
	if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &serviceError{code: code, text: resp.Header.Get(micro.ErrorHeader), name: resp.Header.Get(salvage.ErrorCodeHeader)}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(resp.Data, out)
}

func (e *Env) dlqCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "List, show, replay, resolve and acknowledge failure envelopes"}
	by := operatorName()
	cmd.AddCommand(e.dlqListCmd(), e.dlqShowCmd(),
		e.dlqActionCmd("replay", "dlq.replay", "Replay an envelope's chunk; it resumes from its journal", by, ""),
		e.dlqActionCmd("resolve", "dlq.resolve", "Mark an envelope resolved by hand", by, "why it is resolved"),
		e.dlqActionCmd("ack", "dlq.ack", "Acknowledge an envelope (stops its escalation alert)", by, ""), e.dlqBulkCmd(by))
	return cmd
}

// dlqListCmd is `salvage dlq ls`: pages of envelope records, filtered.
func (e *Env) dlqListCmd() *cobra.Command {
	var (
		asJSON bool
		every  bool
		filter struct {
			Category string `json:"category,omitempty"`
			Status   string `json:"status,omitempty"`
			Job      string `json:"job_id,omitempty"`
			MinAge   string `json:"min_age,omitempty"`
			Newest   bool   `json:"newest,omitempty"`
			Offset   int    `json:"offset,omitempty"`
			Limit    int    `json:"limit,omitempty"`
		}
	)
	ls := &cobra.Command{
		Use: "ls", Short: "List envelopes in the order they entered their status, a page at a time", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			recs := []salvage.EnvelopeRecord{}
			if filter.Limit <= 0 || filter.Limit > salvage.PageMax {
				filter.Limit = salvage.PageMax
			}
			// One listing per status asked for (the service takes one);
			// the server refuses a status that does not exist.
			statuses := strings.Split(filter.Status, ",")
			more := 0
			for _, status := range statuses {
				f := filter
				f.Status = strings.TrimSpace(status)
				for {
					var page salvage.EnvelopeList
					if err := e.request("dlq.list", f, &page); err != nil {
						return err
					}
					recs = append(recs, page.Envelopes...)
					if page.NextOffset == 0 {
						break
					}
					if !every {
						more += page.Total - page.NextOffset
						break
					}
					f.Offset = page.NextOffset
				}
			}
			if len(statuses) > 1 {
				slices.SortStableFunc(recs, func(a, b salvage.EnvelopeRecord) int {
					if filter.Newest {
						a, b = b, a
					}
					return cmp.Or(a.Since().Compare(b.Since()), cmp.Compare(a.ID, b.ID))
				})
			}
			if more > 0 {
				fmt.Fprintf(e.Stderr, "%d more: --offset %d for the next page, --all for every one\n", more, filter.Offset+filter.Limit)
			}
			if asJSON {
				out := struct {
					Items []salvage.EnvelopeRecord `json:"items"`
					// More is how many the listing holds past this page;
					// NextOffset where the next page begins.
					More       int `json:"more"`
					NextOffset int `json:"next_offset,omitempty"`
				}{Items: recs, More: more}
				if more > 0 {
					out.NextOffset = filter.Offset + filter.Limit
				}
				return e.WriteJSON(out)
			}
			tw := Table(e.Stdout)
			fmt.Fprintln(tw, "ENVELOPE\tJOB\tCHUNK\tCATEGORY\tSTRATEGY\tSTATUS\tAGE\tIN STATUS\tACKED")
			for _, r := range recs {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Job, r.Chunk, r.Category, r.Strategy, r.Status,
					time.Since(r.CreatedAt).Round(time.Second), time.Since(r.Since()).Round(time.Second), r.AckedBy)
			}
			return tw.Flush()
		},
	}
	ls.Flags().StringVar(&filter.Category, "category", "", "only this category")
	ls.Flags().StringVar(&filter.Status, "status", "", "only these statuses, comma-separated (open, recovering, resolved, superseded, escalated, dead-end, abandoned)")
	ls.Flags().StringVar(&filter.Job, "job", "", "only this job")
	ls.Flags().StringVar(&filter.MinAge, "min-age", "", "only envelopes in their status at least this long (e.g. 30m)")
	ls.Flags().BoolVar(&filter.Newest, "newest", false, "the envelope that entered its status last first")
	ls.Flags().IntVar(&filter.Offset, "offset", 0, "skip this many")
	ls.Flags().IntVar(&filter.Limit, "limit", salvage.PageMax, "at most this many (per status), up to 1,000")
	ls.Flags().BoolVar(&every, "all", false, "every matching envelope, a page at a time")
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return ls
}

// dlqShowCmd is `salvage dlq show ENVELOPE`: its record, envelope,
// journal and checkpoint.
func (e *Env) dlqShowCmd() *cobra.Command {
	var asJSON, allRows bool
	show := &cobra.Command{
		Use: "show ENVELOPE", Short: "Show an envelope: record, journal, checkpoint, original chunk", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			var d salvage.EnvelopeDetail
			if err := e.request("dlq.show", map[string]string{"envelope_id": args[0]}, &d); err != nil {
				return err
			}
			if asJSON {
				return e.WriteJSON(d)
			}
			r, env := d.Record, d.Envelope
			fmt.Fprintf(e.Stdout, "envelope %s  %s/%s  status %s  attempts %d\n", r.ID, r.Category, r.Strategy, r.Status, r.Attempts)
			fmt.Fprintf(e.Stdout, "job %s chunk %d  pipeline %s  trace %s\n", env.Job, env.Chunk, env.Pipeline, env.TraceID)
			// Why first: the error, then what recovery noted (an
			// escalation's cause, a compensation that failed).
			fmt.Fprintf(e.Stdout, "error: %s\n", env.Error)
			for _, n := range r.Notes {
				fmt.Fprintln(e.Stdout, "note:", n)
			}
			fmt.Fprintf(e.Stdout, "failed at %s, after %d deliveries, %d tier-1 retries, %d recoveries\n",
				failedAt(env), env.Deliveries, env.Tier1Attempts, env.Recoveries)
			fmt.Fprintf(e.Stdout, "original: %s (SALVAGE_CHUNKS %d); envelope at SALVAGE_DLQ %d\n", env.Original.Subject, env.Original.Seq, r.DLQSeq)
			for _, l := range r.Left {
				fmt.Fprintln(e.Stdout, "left for a person:", leftEffect(l))
			}
			for _, a := range []struct {
				name string
				chk  salvage.ActionCheck
			}{{"replay", d.Actions.Replay}, {"resolve", d.Actions.Resolve}, {"ack", d.Actions.Ack}} {
				switch {
				case !a.chk.Allowed:
					fmt.Fprintf(e.Stdout, "%s: refused now: %s\n", a.name, a.chk.Reason)
				case a.chk.Warning != "":
					fmt.Fprintf(e.Stdout, "%s: mind: %s\n", a.name, a.chk.Warning)
					for _, fx := range a.chk.Effects {
						fmt.Fprintln(e.Stdout, "  called again:", fx)
					}
				}
			}
			tw := Table(e.Stdout)
			fmt.Fprintln(tw, "JOURNAL KEY\tTOOL\tSTATUS\tRESOURCE\tATTEMPTS\tERROR")
			folded := 0
			for _, j := range d.Journal {
				if !allRows && j.Status == salvage.CallSucceeded && len(j.History) == 0 {
					folded++
					continue
				}
				res := ""
				if j.Fingerprint != nil {
					res = j.Fingerprint.ResourceID
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", j.Key, j.Tool, j.Status, res, j.Attempts, truncate(j.Error, 60))
				for _, h := range j.History {
					fmt.Fprintf(tw, "  earlier\t\t%s\t\t%d\t%s\n", h.Status, h.Attempts, truncate(h.Error, 60))
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if folded > 0 {
				fmt.Fprintf(e.Stdout, "(%d calls that succeeded the first time are folded; --all lists them)\n", folded)
			}
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	show.Flags().BoolVar(&allRows, "all", false, "list every journal row, the successful ones too")
	return show
}

// dlqActionCmd is `salvage dlq <use> ENVELOPE`, asking endpoint on behalf
// of by; noteUsage, when set, offers --note.
func (e *Env) dlqActionCmd(use, endpoint, short, by, noteUsage string) *cobra.Command {
	var (
		asJSON       bool
		note, reason string
	)
	c := &cobra.Command{
		Use: use + " ENVELOPE", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			var rec salvage.EnvelopeRecord
			if err := e.request(endpoint, map[string]string{"envelope_id": args[0], "by": by, "note": note, "reason": reason}, &rec); err != nil {
				return err
			}
			if asJSON {
				return e.WriteJSON(rec)
			}
			acked := ""
			if rec.AckedBy != "" {
				acked = " (acknowledged by " + rec.AckedBy + ")"
			}
			fmt.Fprintf(e.Stdout, "envelope %s: %s%s\n", rec.ID, rec.Status, acked)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	if noteUsage != "" {
		c.Flags().StringVar(&note, "note", "", noteUsage+" (recorded in the audit as the reason)")
	} else {
		c.Flags().StringVar(&reason, "reason", "", "why, recorded in the audit (salvage audit)")
	}
	return c
}

// dlqBulkCmd is `salvage dlq bulk ACTION --category … [--dry-run]`.
func (e *Env) dlqBulkCmd(by string) *cobra.Command {
	var (
		req struct {
			Action   string `json:"action"`
			Category string `json:"category,omitempty"`
			Status   string `json:"status,omitempty"`
			Job      string `json:"job_id,omitempty"`
			MinAge   string `json:"min_age,omitempty"`
			DryRun   bool   `json:"dry_run,omitempty"`
			By       string `json:"by,omitempty"`
			Note     string `json:"note,omitempty"`
			Limit    int    `json:"limit,omitempty"`
		}
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "bulk replay|resolve|ack",
		Short: "Replay, resolve or acknowledge every envelope a filter matches (--dry-run counts first)",
		Long: `Act on every envelope the filter matches, oldest first, at most --limit (1000) per run:
each through the same compare-and-swap as the single action, so running it twice replays
nothing twice. A filter is required (--category, --status, --job or --min-age above 0); --dry-run
prints how many would be acted on and acts on none.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			req.Action, req.By = args[0], by
			var res salvage.BulkResult
			if err := e.request("dlq.bulk", req, &res); err != nil {
				return err
			}
			if asJSON {
				return e.WriteJSON(res)
			}
			verb := map[salvage.BulkAction]string{salvage.BulkReplay: "replayed", salvage.BulkResolve: string(salvage.EnvelopeResolved), salvage.BulkAck: "acknowledged"}[res.Action]
			if res.DryRun {
				verb = "would be " + verb
			}
			fmt.Fprintf(e.Stdout, "%d matched: %d %s, %d unchanged (already so), %d refused (resolved, superseded, or a replay Salvage will not run), %d failed",
				res.Matched, res.Acted, verb, res.Unchanged, res.Refused, len(res.Failed))
			if res.Remaining > 0 {
				fmt.Fprintf(e.Stdout, "; %d left for another run (--limit)", res.Remaining)
			}
			fmt.Fprintln(e.Stdout)
			for _, f := range res.Failed {
				fmt.Fprintf(e.Stdout, "  %s: %s\n", f.ID, f.Error)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Category, "category", "", "only this category")
	f.StringVar(&req.Status, "status", "", "only this status")
	f.StringVar(&req.Job, "job", "", "only this job")
	f.StringVar(&req.MinAge, "min-age", "", "only envelopes at least this old (e.g. 30m)")
	f.BoolVar(&req.DryRun, "dry-run", false, "count what would be acted on; change nothing")
	f.StringVar(&req.Note, "note", "", "with resolve: why")
	f.IntVar(&req.Limit, "limit", 0, "act on at most this many (default and most 1000)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// failedAt names where an envelope's chunk failed, leaving out what it
// does not know: "stage 2: agent payer, call K (tool charge)".
func failedAt(env salvage.Envelope) string {
	where := fmt.Sprintf("stage %d", env.FailedStage)
	var parts []string
	if env.FailedAgent != "" {
		parts = append(parts, "agent "+env.FailedAgent)
	}
	if env.FailedCall != "" {
		call := "call " + env.FailedCall
		if env.FailedTool != "" {
			call += " (tool " + env.FailedTool + ")"
		}
		parts = append(parts, call)
	} else if env.FailedTool != "" {
		parts = append(parts, "tool "+env.FailedTool)
	}
	if len(parts) > 0 {
		where += ": " + strings.Join(parts, ", ")
	}
	return where
}

// leftEffect says what one standing effect is and where to find it.
func leftEffect(l salvage.LeftEffect) string {
	var b strings.Builder
	b.WriteString(l.Tool)
	if l.System != "" {
		b.WriteString(" on " + l.System)
	}
	if l.ResourceID != "" {
		b.WriteString(", resource " + l.ResourceID)
	}
	if l.IdempotencyKey != "" {
		b.WriteString(", idempotency key " + l.IdempotencyKey)
	}
	b.WriteString(", journal " + l.JournalKey)
	switch {
	case l.Unknown:
		b.WriteString(" (outcome unknown: it may or may not have taken effect)")
	case l.Reversible:
		b.WriteString(" (its compensation failed or did not run)")
	default:
		b.WriteString(" (irreversible)")
	}
	return b.String()
}
