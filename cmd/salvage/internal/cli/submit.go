package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/consumers"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/streams"
)

// errRejected is returned when the splitter refused a submitted job.
var errRejected = errors.New("job rejected")

func (e *env) submitCmd() *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "submit PIPELINE FILE|-",
		Short: "Submit a job and print its id",
		Long: `Submit a job to salvage.jobs.PIPELINE. FILE (or - for stdin) is a job message
({"input": ..., "job_id"?, "budget"?, "metadata"?}) or, for contract-review, plain
contract text. With --wait, show progress and exit 0 done, 3 partial, 4 incomplete,
5 cancelled, 1 on error.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pipeline, file := args[0], args[1]
			if err := streams.ValidateToken("pipeline", pipeline); err != nil {
				return err
			}
			data, err := e.readInput(file)
			if err != nil {
				return err
			}
			id, body, err := jobMessage(pipeline, data)
			if err != nil {
				return err
			}
			nc, js, err := e.connect("salvage submit")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx := cmd.Context()
			rejections := make(chan *nats.Msg, 64)
			sub, err := nc.ChanSubscribe(streams.RejectedSubject("*"), rejections)
			if err != nil {
				return err
			}
			defer func() { _ = sub.Unsubscribe() }()

			ack, err := js.PublishMsg(ctx, streams.JobMessage(pipeline, id, body, ""))
			if err != nil {
				return fmt.Errorf("publish job: %w", err)
			}
			fmt.Fprintln(e.stdout, id)
			if !wait {
				return nil
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return e.waitJob(ctx, js, id, ack.Sequence, rejections)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the job to finish, showing progress")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "with --wait, give up after this long")
	return cmd
}

func (e *env) readInput(file string) ([]byte, error) {
	var r io.Reader = e.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	// Read one byte past the limit to tell "too big" from "exactly full".
	data, err := io.ReadAll(io.LimitReader(r, consumers.MaxPayloadDefault+1))
	if err != nil {
		return nil, err
	}
	if len(data) > consumers.MaxPayloadDefault {
		return nil, fmt.Errorf("input is over the %d KiB job limit", consumers.MaxPayloadDefault>>10)
	}
	return data, nil
}

// jobMessage builds the job message and its id from a file's bytes.
func jobMessage(pipeline string, data []byte) (string, []byte, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return "", nil, errors.New("input is empty")
	}
	var msg map[string]json.RawMessage
	if trimmed[0] != '{' {
		if pipeline != contractreview.Name {
			return "", nil, fmt.Errorf("input for %s must be a JSON job message", pipeline)
		}
		text, _ := json.Marshal(contractreview.Input{Text: string(data)})
		msg = map[string]json.RawMessage{"input": text}
	} else if err := json.Unmarshal(trimmed, &msg); err != nil {
		return "", nil, fmt.Errorf("job message is not valid JSON: %w", err)
	}
	id, body, err := streams.PrepareJob(msg)
	if err != nil {
		return "", nil, err
	}
	if len(body) > consumers.MaxPayloadDefault {
		return "", nil, fmt.Errorf("job message is %d bytes, over the %d KiB limit", len(body), consumers.MaxPayloadDefault>>10)
	}
	return id, body, nil
}

// waitJob shows progress until the job finishes and maps its status to
// the exit code.
func (e *env) waitJob(ctx context.Context, js jetstream.JetStream, id string, seq uint64, rejections <-chan *nats.Msg) error {
	stores, err := kv.Open(ctx, js)
	if err != nil {
		return err
	}
	bar := newProgress(e.stderr)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			bar.done()
			return &exitError{code: ExitError, err: fmt.Errorf("job %s: %w", id, ctx.Err())}
		case m := <-rejections:
			var r streams.Rejection
			if json.Unmarshal(m.Data, &r) == nil && r.StreamSeq == seq {
				bar.done()
				return fmt.Errorf("%w (%s): %s", errRejected, r.Reason, r.Error)
			}
		case <-tick.C:
		}
		j, err := stores.Jobs.Get(ctx, id)
		if errors.Is(err, kv.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		bar.show(j)
		if !j.Finished() {
			continue
		}
		bar.done()
		fmt.Fprintf(e.stderr, "job %s %s: %d/%d chunks done, %d dead-lettered, %d cancelled\n",
			id, j.Status, j.Summary.Done, j.Chunks, j.Summary.DeadLettered, j.Summary.Cancelled)
		for _, why := range j.Explanation {
			fmt.Fprintln(e.stderr, "  "+why)
		}
		switch j.Status {
		case kv.JobDone:
			return nil
		case kv.JobPartial:
			return &exitError{code: ExitPartial}
		case kv.JobCancelled:
			return &exitError{code: ExitCancelled}
		default:
			return &exitError{code: ExitIncomplete}
		}
	}
}

// progress draws a bar of chunks done and failed: redrawn in place on a
// terminal, a line per change otherwise.
type progress struct {
	w    io.Writer
	tty  bool
	last string
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) show(j kv.Job) {
	const width = 30
	n := max(j.Chunks, 1)
	done := j.Summary.Done * width / n
	failed := j.Summary.DeadLettered * width / n
	bar := strings.Repeat("#", done) + strings.Repeat("x", failed) + strings.Repeat(".", max(width-done-failed, 0))
	line := fmt.Sprintf("[%s] %d/%d done, %d failed", bar, j.Summary.Done, j.Chunks, j.Summary.DeadLettered)
	if line == p.last {
		return
	}
	p.last = line
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) done() {
	if p.tty && p.last != "" {
		fmt.Fprintln(p.w)
	}
}
