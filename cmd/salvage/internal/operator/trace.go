package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/timeline"
)

func (e *Env) traceCmd() *cobra.Command {
	var (
		asJSON, failed bool
		chunk          int
	)
	cmd := &cobra.Command{
		Use:   "trace JOB",
		Short: "Show a job's timeline: each chunk's stages and calls, with latency, retries and where it broke",
		Long: `Show a job's timeline: each chunk's stages and calls, with latency, retries and where it
broke. --chunk N shows one chunk; --failed shows only the calls that did not succeed or failed
before (a replay's history), in the chunks that have any or did not end done.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := jobArg(args)
		if err != nil {
			return err
		}
		if chunk < 0 || cmd.Flags().Changed("chunk") && chunk < 1 {
			return fmt.Errorf("--chunk %d: chunks are numbered from 1", chunk)
		}
		return e.withReader("salvage trace", func(ctx context.Context, c *reader) error {
			tr, err := traceOf(ctx, c, id, chunk)
			if err != nil {
				return err
			}
			narrowTrace(tr, failed)
			if asJSON {
				return e.WriteJSON(tr)
			}
			e.printTrace(tr)
			return nil
		})(cmd, args)
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&chunk, "chunk", 0, "only this chunk")
	cmd.Flags().BoolVar(&failed, "failed", false, "only calls that did not succeed or failed before, in chunks that have any or did not end done")
	return cmd
}

// tracePageChunks is how many chunks one page of a trace asks for; a
// page too large for one reply is asked again in halves.
const tracePageChunks = 50

// traceOf reads job id's timeline a page at a time, or only chunk's
// (reading only that chunk's journal) when chunk > 0.
func traceOf(ctx context.Context, r *reader, id string, chunk int) (*salvage.Trace, error) {
	if chunk > 0 {
		return r.ChunkTrace(ctx, id, chunk)
	}
	page := &salvage.Page{Limit: tracePageChunks}
	var all *salvage.Trace
	for {
		tr, err := r.JobTracePage(ctx, id, page)
		var se *serviceError
		if errors.As(err, &se) && se.code == salvage.CodeTooLarge && page.Limit > 1 {
			page.Limit /= 2
			continue
		}
		if err != nil {
			return nil, noJob(id, err)
		}
		if all == nil {
			all = tr
		} else {
			all.Chunks = append(all.Chunks, tr.Chunks...)
		}
		if tr.NextOffset == 0 {
			all.NextOffset = 0
			return all, nil
		}
		page.Offset = tr.NextOffset
	}
}

// narrowTrace, with failed, keeps only the calls that did not succeed or
// failed before, in the chunks that have any or did not end done.
func narrowTrace(tr *salvage.Trace, failed bool) {
	if !failed {
		return
	}
	kept := tr.Chunks[:0]
	for _, c := range tr.Chunks {
		calls := c.Calls[:0]
		for _, r := range c.Calls {
			if r.Status != salvage.CallSucceeded || len(r.History) > 0 {
				calls = append(calls, r)
			}
		}
		c.Calls = calls
		if len(calls) == 0 && c.Status == salvage.ChunkDone {
			continue
		}
		kept = append(kept, c)
	}
	tr.Chunks = kept
}

func (e *Env) printTrace(tr *salvage.Trace) {
	fmt.Fprintf(e.Stdout, "job %s  trace %s  %s", tr.Job, tr.TraceID, tr.Status)
	var prompt, completion int64
	for _, c := range tr.Chunks {
		for _, r := range c.Calls {
			if r.Usage != nil {
				prompt, completion = prompt+r.Usage.PromptTokens, completion+r.Usage.CompletionTokens
			}
		}
	}
	if prompt+completion > 0 {
		fmt.Fprintf(e.Stdout, "  model tokens %d prompt + %d completion", prompt, completion)
	}
	fmt.Fprintln(e.Stdout)
	for _, c := range tr.Chunks {
		// Deliveries means one thing everywhere (status, --json, the
		// dashboard): JetStream's count for the message the chunk last ran
		// from. Runs are the times a worker took the chunk — deliveries,
		// takeovers of a dead worker's and releases from a hold alike —
		// from its timeline (a lower bound once events were dropped).
		fmt.Fprintf(e.Stdout, "chunk %d: %s  stage %d  epoch %d  deliveries %d", c.Chunk, c.Status, c.Stage, c.Epoch, c.Deliveries)
		if c.Redeliveries > 0 {
			fmt.Fprintf(e.Stdout, "  redeliveries %d", c.Redeliveries)
		}
		if runs := countEvents(c.Events, salvage.EventDelivered); runs > 1 {
			at := ""
			if c.EventsDropped > 0 {
				at = "at least "
			}
			fmt.Fprintf(e.Stdout, "  runs %s%d", at, runs)
		}
		fmt.Fprintf(e.Stdout, "  tier-1 retries %d  recoveries %d", c.Tier1, c.Recoveries)
		if c.Envelope != "" {
			fmt.Fprintf(e.Stdout, "  envelope %s", c.Envelope)
		}
		fmt.Fprintln(e.Stdout)
		if c.Error != "" {
			fmt.Fprintf(e.Stdout, "  broke: %s\n", c.Error)
		}
		e.printTimeline(c)
	}
}

// countEvents counts the events of kind.
func countEvents(events []salvage.ChunkEvent, kind salvage.EventKind) int {
	n := 0
	for _, ev := range events {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// printTimeline prints a chunk's calls, earlier runs and events in time
// order, from its first, each event saying what it means for the gap
// before it: a redelivery after a worker stopped answering, a release
// from a hold.
func (e *Env) printTimeline(c salvage.TraceChunk) {
	if c.EventsDropped > 0 {
		fmt.Fprintf(e.Stdout, "  (%d events after the first are not kept)\n", c.EventsDropped)
	}
	stage, epoch := -1, -1
	for _, x := range timeline.Of(c) {
		at := fmt.Sprintf("+%8.3fs", x.Offset)
		switch x.Kind {
		case timeline.KindCall:
			r := x.Call
			if r.Stage != stage || r.Epoch != epoch {
				stage, epoch = r.Stage, r.Epoch
				fmt.Fprintf(e.Stdout, "  stage %d (epoch %d)\n", r.Stage, r.Epoch)
			}
			mark := ""
			if x.Failed {
				mark = "  <- " + strings.ToLower(string(r.Status))
				if r.Error != "" {
					mark += ": " + truncate(r.Error, 70)
				}
			} else if x.Text != "" {
				mark = "  (" + x.Text + ")"
			}
			if r.LimitWaitMS > 0 {
				mark += fmt.Sprintf("  (waited %.0fms for a rate limit)", r.LimitWaitMS)
			}
			if u := r.Usage; u != nil && x.Failed {
				mark += fmt.Sprintf("  %s %d+%d tokens", u.Model, u.PromptTokens, u.CompletionTokens)
			}
			fmt.Fprintf(e.Stdout, "    %s %-18s %-16s %-11s %6.1fms  attempts %d%s\n",
				at, r.Agent, r.Tool, r.Status, r.LatencyMS, r.Attempts, mark)
		case timeline.KindEarlierRun:
			fmt.Fprintf(e.Stdout, "    %s %s\n", at, truncate(x.Text, 120))
		default:
			fmt.Fprintf(e.Stdout, "    %s %s\n", at, x.Text)
		}
	}
}
