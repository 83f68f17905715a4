package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage/kv"
)

// TraceChunk is one chunk's part of a job's timeline.
type TraceChunk struct {
	Chunk      int             `json:"chunk"`
	Status     string          `json:"status"`
	Stage      int             `json:"stage"`
	Epoch      int             `json:"epoch"`
	Deliveries uint64          `json:"deliveries"`
	Tier1      int             `json:"tier1_retries"`
	Recoveries int             `json:"recoveries"`
	Envelope   string          `json:"envelope,omitempty"`
	Error      string          `json:"error,omitempty"`
	Calls      []kv.JournalRow `json:"calls"`
}

// Trace is a job's timeline (salvage trace JOB --json).
type Trace struct {
	Job     string       `json:"job_id"`
	TraceID string       `json:"trace_id"`
	Status  string       `json:"status"`
	Chunks  []TraceChunk `json:"chunks"`
}

func (e *env) traceCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "trace JOB",
		Short: "Show a job's timeline: each chunk's stages and calls, with latency, retries and where it broke",
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := jobArg(args)
		if err != nil {
			return err
		}
		return e.withStores("salvage trace", func(ctx context.Context, _ jetstream.JetStream, st *kv.Stores) error {
			tr, err := buildTrace(ctx, st, id)
			if err != nil {
				return err
			}
			if asJSON {
				return e.writeJSON(tr)
			}
			e.printTrace(tr)
			return nil
		})(cmd, args)
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func buildTrace(ctx context.Context, st *kv.Stores, id string) (Trace, error) {
	j, err := st.Jobs.Get(ctx, id)
	if errors.Is(err, kv.ErrNotFound) {
		return Trace{}, fmt.Errorf("no job %s", id)
	}
	if err != nil {
		return Trace{}, err
	}
	cps, err := st.Checkpoints.ForJob(ctx, id, j.Chunks)
	if err != nil {
		return Trace{}, err
	}
	rows, err := st.Journal.LoadJob(ctx, id, j.Chunks)
	if err != nil {
		return Trace{}, err
	}
	tr := Trace{Job: id, TraceID: j.TraceID, Status: j.Status}
	byChunk := map[int][]kv.JournalRow{}
	for _, r := range rows {
		byChunk[r.Chunk] = append(byChunk[r.Chunk], r.JournalRow)
	}
	for _, cp := range cps {
		calls := byChunk[cp.Chunk]
		sort.Slice(calls, func(a, b int) bool {
			if calls[a].Epoch != calls[b].Epoch {
				return calls[a].Epoch < calls[b].Epoch
			}
			return calls[a].StartedAt.Before(calls[b].StartedAt)
		})
		tr.Chunks = append(tr.Chunks, TraceChunk{Chunk: cp.Chunk, Status: cp.Status, Stage: cp.Stage, Epoch: cp.Epoch,
			Deliveries: cp.Deliveries, Tier1: cp.Tier1Retries, Recoveries: cp.Recoveries, Envelope: cp.Envelope,
			Error: cp.Reason, Calls: calls})
	}
	return tr, nil
}

func (e *env) printTrace(tr Trace) {
	fmt.Fprintf(e.stdout, "job %s  trace %s  %s\n", tr.Job, tr.TraceID, tr.Status)
	for _, c := range tr.Chunks {
		fmt.Fprintf(e.stdout, "chunk %d: %s  stage %d  epoch %d  deliveries %d  tier-1 retries %d  recoveries %d", c.Chunk, c.Status, c.Stage, c.Epoch, c.Deliveries, c.Tier1, c.Recoveries)
		if c.Envelope != "" {
			fmt.Fprintf(e.stdout, "  envelope %s", c.Envelope)
		}
		fmt.Fprintln(e.stdout)
		if c.Error != "" {
			fmt.Fprintf(e.stdout, "  broke: %s\n", c.Error)
		}
		stage := -1
		var first time.Time
		for _, r := range c.Calls {
			if first.IsZero() {
				first = r.StartedAt
			}
			if r.Stage != stage {
				stage = r.Stage
				fmt.Fprintf(e.stdout, "  stage %d (epoch %d)\n", r.Stage, r.Epoch)
			}
			mark := ""
			switch {
			case r.Status == kv.CallFailed || r.Status == kv.CallUnknown || r.Status == kv.CallInitiated || r.Status == kv.CallCancelled:
				mark = "  <- " + strings.ToLower(r.Status)
				if r.Error != "" {
					mark += ": " + truncate(r.Error, 70)
				}
			case r.Verified:
				mark = "  (verified)"
			}
			fmt.Fprintf(e.stdout, "    +%7.1fms %-18s %-16s %-11s %6.1fms  attempts %d%s\n",
				float64(r.StartedAt.Sub(first).Microseconds())/1000, r.Agent, r.Tool, r.Status, r.LatencyMS, r.Attempts, mark)
			for _, h := range r.History {
				fmt.Fprintf(e.stdout, "      earlier run: %s after %d attempts: %s\n", h.Status, h.Attempts, truncate(h.Error, 70))
			}
		}
	}
}
