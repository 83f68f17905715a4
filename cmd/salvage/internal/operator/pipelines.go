package operator

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
)

func (e *Env) pipelinesCmd() *cobra.Command {
	var asJSON, definitions bool
	cmd := &cobra.Command{
		Use:   "pipelines",
		Short: "List the pipelines: running or paused, the definition their workers run, their live workers and recovery processes, jobs waiting to be split, chunks parked",
		Long: `List the pipelines. FINGERPRINT names the definition every process running a
pipeline's workers or recovery runs (its stages, agents, tools, effects and version); a
process with another definition is refused at start, naming both fingerprints and what
differs. --definitions prints each definition. To roll out a new version: pause the
pipeline or stop its workers, then start the new version with --upgrade FINGERPRINT.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = func(*cobra.Command, []string) error {
		var ps []salvage.PipelineStatus
		if err := e.request("pipelines.list", struct{}{}, &ps); err != nil {
			return err
		}
		if asJSON {
			return WriteItems(e, ps)
		}
		if definitions {
			for _, p := range ps {
				fmt.Fprintf(e.Stdout, "%s %s (registered by %s at %s)\n", p.Pipeline, cmp.Or(p.Fingerprint, "-"), cmp.Or(p.DefinedBy, "-"), p.DefinedAt.Local().Format(time.DateTime))
				for _, l := range p.Definition {
					fmt.Fprintf(e.Stdout, "  %s\n", l)
				}
			}
			return nil
		}
		tw := Table(e.Stdout)
		fmt.Fprintln(tw, "PIPELINE\tSTATE\tFINGERPRINT\tWORKERS\tRECOVERY\tWAITING\tPARKED\tSINCE\tBY\tREASON")
		for _, p := range ps {
			state, since, by := salvage.PipelineRunning, p.ResumedAt, p.ResumedBy
			if p.Paused {
				state, since, by = salvage.PipelinePaused, p.PausedAt, p.PausedBy
			}
			when := "-"
			if !since.IsZero() {
				when = since.Local().Format(time.DateTime)
			}
			if by == "" {
				by = "-"
			}
			reason := "-"
			if p.Paused && p.Reason != "" {
				reason = p.Reason
			}
			workers := fmt.Sprint(p.Workers)
			if p.Workers == 0 {
				// Its jobs wait in SALVAGE_JOBS until one starts.
				workers = "no workers"
			}
			recovery := fmt.Sprint(p.Recovery)
			if p.Recovery == 0 {
				// Its envelopes stay open until one starts.
				recovery = "none"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", p.Pipeline, state, cmp.Or(p.Fingerprint, "-"), workers, recovery, p.Waiting, p.Parked, when, by, reason)
		}
		return tw.Flush()
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"items": [...]}`)
	cmd.Flags().BoolVar(&definitions, "definitions", false, "print each pipeline's definition, line by line")
	return cmd
}

func (e *Env) pauseCmd() *cobra.Command {
	var (
		reason string
		asJSON bool
	)
	by := operatorName()
	cmd := &cobra.Command{
		Use:   "pause PIPELINE",
		Short: "Pause a pipeline: its chunks park before their next stage until it resumes",
		Long: `Pause a pipeline. Its chunk pool (the JetStream consumer workers-<pipeline>) is
paused, so none of its queued chunks is delivered. A chunk inside a stage finishes that
stage, then parks (status paused) on salvage.hold.paused-<pipeline>.<job>.<chunk>,
whose JetStream consumer hold-paused-<pipeline> stays paused. No delivery is spent and
nothing reaches the DLQ; jobs are still accepted. Other pipelines run on. 'salvage resume
PIPELINE' resumes the pool and sends the parked chunks back to the work queue.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		return e.setPaused("pipelines.pause", args[0], by, reason, asJSON)
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "", "why, recorded with the pause")
	f.StringVar(&by, "by", by, "who pauses, recorded with the pause")
	f.BoolVar(&asJSON, "json", false, "print the pipeline's state as JSON")
	return cmd
}

func (e *Env) resumeCmd() *cobra.Command {
	var asJSON bool
	by := operatorName()
	cmd := &cobra.Command{
		Use:   "resume PIPELINE",
		Short: "Resume a paused pipeline: its parked chunks go back to the work queue",
		Long: `Resume a paused pipeline. Its parked chunks return to SALVAGE_CHUNKS, each as a new
message with a fresh delivery budget, and go on from the stage they stopped before:
what they did before the pause is not done again.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		return e.setPaused("pipelines.resume", args[0], by, "", asJSON)
	}
	f := cmd.Flags()
	f.StringVar(&by, "by", by, "who resumes, recorded with the resume")
	f.BoolVar(&asJSON, "json", false, "print the pipeline's state as JSON")
	return cmd
}

// setPaused pauses or resumes a pipeline through the salvage.api service
// (endpoint), so an operator's user needs the API and nothing else.
func (e *Env) setPaused(endpoint, pipeline, by, reason string, asJSON bool) error {
	if err := salvage.ValidateToken("pipeline", pipeline); err != nil {
		return err
	}
	var p salvage.PipelineStatus
	if err := e.request(endpoint, map[string]string{"pipeline": pipeline, "by": by, "reason": reason}, &p); err != nil {
		return err
	}
	if asJSON {
		return e.WriteJSON(p)
	}
	writePipeline(e.Stdout, p)
	return nil
}

// writePipeline says where a pipeline stands in one line.
func writePipeline(w io.Writer, p salvage.PipelineStatus) {
	if !p.Paused {
		by := ""
		if p.ResumedBy != "" {
			by = " (resumed by " + p.ResumedBy + ")"
		}
		back := ""
		if p.Parked > 0 {
			back = fmt.Sprintf("; %d chunks still parked, on their way back", p.Parked)
		}
		fmt.Fprintf(w, "pipeline %s runs%s%s\n", p.Pipeline, by, back)
		return
	}
	reason := ""
	if p.Reason != "" {
		reason = ": " + p.Reason
	}
	fmt.Fprintf(w, "pipeline %s paused by %s at %s%s; %d chunks parked; 'salvage resume %s' releases them\n",
		p.Pipeline, p.PausedBy, p.PausedAt.Local().Format(time.TimeOnly), reason, p.Parked, p.Pipeline)
}

func (e *Env) workersCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the live Salvage processes: roles, pipelines, concurrency, chunks in flight",
		Long: `List the live Salvage processes, from their heartbeats (every 10s; a process silent
for 30s drops out): their id, host and pid, roles, the pipelines whose chunks they run and
those whose envelopes they recover, how many of each they run at once and how many they run now, since when, last seen.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = func(*cobra.Command, []string) error {
		var ws []salvage.Worker
		if err := e.request("workers.list", struct{}{}, &ws); err != nil {
			return err
		}
		if asJSON {
			return WriteItems(e, ws)
		}
		if len(ws) == 0 {
			// Nobody beats: none runs, or none can write (a process whose
			// writes fail drops out; its /healthz says why).
			fmt.Fprintln(e.Stdout, "no live process: none has written its heartbeat in the last 30s (a process that cannot write to JetStream drops out too: its /healthz says why)")
			return nil
		}
		tw := Table(e.Stdout)
		fmt.Fprintln(tw, "ID\tHOST\tPID\tROLES\tPIPELINES\tRECOVERS\tCONCURRENCY\tPARTITIONS\tIN FLIGHT\tUP\tLAST SEEN")
		for _, w := range ws {
			roles := make([]string, len(w.Roles))
			for i, r := range w.Roles {
				roles[i] = string(r)
			}
			pipes := strings.Join(w.Pipelines, ",")
			if pipes == "" {
				pipes = "-"
			}
			parts := "-"
			if w.Partitions > 0 {
				parts = fmt.Sprintf("0-%d", w.Partitions-1)
				if w.Partitions == 1 {
					parts = "0"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s ago\n", w.ID, w.Host, w.PID, strings.Join(roles, ","), pipes, cmp.Or(strings.Join(w.Recovers, ","), "-"),
				w.Concurrency, parts, w.InFlight, time.Since(w.StartedAt).Round(time.Second), time.Since(w.UpdatedAt).Round(time.Second))
		}
		return tw.Flush()
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"items": [...]}`)
	return cmd
}
