package operator

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
)

func (e *Env) approveCmd() *cobra.Command {
	var (
		reject bool
		note   string
		asJSON bool
	)
	by := operatorName()
	cmd := &cobra.Command{
		Use:   "approve JOB CHUNK",
		Short: "Approve (or --reject) a chunk waiting before a stage that requires approval",
		Long: `A chunk reaching a stage that requires approval waits, status awaiting-approval,
its message parked on salvage.hold.approval.<job>.<chunk> (announced on
salvage.events.<job>.approval). Approving sends it back to the work queue: the stage
runs, on whichever worker takes it, also after every process was restarted.
--reject ends the chunk instead: what it did is compensated, newest first, and its
envelope ends abandoned (escalated when an irreversible effect stands).`,
		Args: cobra.ExactArgs(2),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		job, err := jobArg(args)
		if err != nil {
			return err
		}
		chunk, err := strconv.Atoi(args[1])
		if err != nil || chunk < 1 {
			return fmt.Errorf("CHUNK %q: want a chunk number, from 1", args[1])
		}
		// Through the salvage.api service: an operator's user needs the
		// API, not the buckets.
		var ch salvage.Chunk
		approve := !reject
		if err := e.request("approve", map[string]any{"job_id": job, "chunk": chunk, "approve": approve, "by": by, "note": note}, &ch); err != nil {
			return err
		}
		if asJSON {
			return e.WriteJSON(ch)
		}
		verb := "approved: it runs stage " + strconv.Itoa(ch.Stage) + " next"
		if reject {
			verb = "rejected: " + string(ch.Status) + ", envelope " + ch.Envelope + " (its effects are compensated)"
		}
		fmt.Fprintf(e.Stdout, "chunk %d of job %s %s\n", chunk, job, verb)
		return nil
	}
	f := cmd.Flags()
	f.BoolVar(&reject, "reject", false, "reject: compensate what the chunk did and abandon it")
	f.StringVar(&note, "note", "", "why, recorded with the decision")
	f.StringVar(&by, "by", by, "who decides, recorded with the decision")
	f.BoolVar(&asJSON, "json", false, "print the chunk's checkpoint as JSON")
	return cmd
}
