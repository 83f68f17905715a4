package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/salvagehq/salvage"
)

// progressEvery is how often the live display is redrawn.
const progressEvery = 250 * time.Millisecond

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startProgress draws the demo's jobs on one line of w, redrawn until the
// returned stop is called: chunks done and dead-lettered, cancelled,
// redeliveries and tier-1 retries, and the time. The kill, if there was
// one, gets a line of its own. A nil w draws nothing.
func startProgress(ctx context.Context, w io.Writer, c *salvage.Client, jobs []string, k *kill) (stop func()) {
	if w == nil {
		return func() {}
	}
	if k != nil {
		fmt.Fprintf(w, "  killed %s with SIGKILL in stage %d of chunk %d: its chunks resume elsewhere after AckWait\n", k.worker, k.stage, k.chunk)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	draw := func() {
		var chunks int
		var s salvage.Summary
		for _, id := range jobs {
			j, err := c.JobGet(context.WithoutCancel(ctx), id)
			if err != nil {
				continue
			}
			chunks += j.Chunks
			s.Done += j.Summary.Done
			s.DeadLettered += j.Summary.DeadLettered
			s.Cancelled += j.Summary.Cancelled
			s.Redeliveries += j.Summary.Redeliveries
			s.Tier1Retries += j.Summary.Tier1Retries
		}
		fmt.Fprintf(w, "\r\x1b[K  %d/%d chunks done  %d dead-lettered  %d cancelled  %d redeliveries  %d tier-1 retries  %.1fs",
			s.Done, chunks, s.DeadLettered, s.Cancelled, s.Redeliveries, s.Tier1Retries, time.Since(start).Seconds())
	}
	go func() {
		defer close(done)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			draw()
			select {
			case <-ctx.Done():
				draw()
				fmt.Fprint(w, "\n\n")
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}
