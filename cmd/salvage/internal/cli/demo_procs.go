package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage"
)

// worker is a child `salvage up --role worker` process.
type worker struct {
	id  string
	cmd *exec.Cmd
}

// startWorkers starts o.workers child worker processes and waits until each
// has printed its NATS_URL line (roles ready).
func (e *env) startWorkers(ctx context.Context, o demoOpts, url string) ([]*worker, error) {
	var out []*worker
	for i := range o.workers {
		w, err := e.startWorker(ctx, o, url, fmt.Sprintf("demo-w%d", i+1))
		if w != nil {
			out = append(out, w)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// startWorker starts one `salvage up --role worker` child process and
// waits until it is ready.
func (e *env) startWorker(ctx context.Context, o demoOpts, url, id string) (*worker, error) {
	args := append([]string{"up", "--role", string(salvage.RoleWorker), "--server", url, "--worker-id", id}, o.run.args()...)
	return e.startProcess(ctx, id, args)
}

// startProcess starts this executable with args (and the log flags) as
// worker id and waits until it prints its NATS_URL line.
func (e *env) startProcess(ctx context.Context, id string, args []string) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args = append(args, "--log-level", e.logLevel, "--log-format", e.logFormat)
	cmd := exec.CommandContext(ctx, exe, args...)
	dieWithParent(cmd)
	cmd.Stderr = e.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", id, err)
	}
	w := &worker{id: id, cmd: cmd}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "NATS_URL=") {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			return w, fmt.Errorf("worker %s exited before it was ready", id)
		}
	case <-time.After(time.Minute):
		return w, fmt.Errorf("worker %s not ready after a minute", id)
	}
	return w, nil
}

// stopWorkers drains the workers with SIGTERM, then kills what is left.
func stopWorkers(ws []*worker) {
	for _, w := range ws {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, w := range ws {
		done := make(chan struct{})
		go func() { _ = w.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = w.cmd.Process.Kill()
			<-done
		}
	}
}

type kill struct {
	worker, job  string
	chunk, stage int
}

// killMidChunk waits until a worker process holds a chunk in its analysis
// stage and SIGKILLs that process.
func killMidChunk(ctx context.Context, client *salvage.Client, jobs []string, ws []*worker) (kill, error) {
	for {
		for _, job := range jobs {
			_, chunks, err := allChunks(ctx, client, job)
			if err != nil {
				continue
			}
			for _, c := range chunks {
				if c.Stage < 2 || c.Status != salvage.ChunkRunning {
					continue
				}
				for _, w := range ws {
					if w.id == c.ClaimedBy {
						if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
							return kill{}, err
						}
						_ = w.cmd.Wait()
						return kill{worker: w.id, job: job, chunk: c.Chunk, stage: c.Stage}, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return kill{}, fmt.Errorf("no worker was mid-chunk to kill: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitJobs waits until every job has finished, logging progress.
func waitJobs(ctx context.Context, client *salvage.Client, jobs []string, log zerolog.Logger) error {
	last := ""
	for {
		finished, done, total, failed := 0, 0, 0, 0
		for _, id := range jobs {
			j, err := client.JobGet(ctx, id)
			if err != nil {
				continue
			}
			total += j.Chunks
			done += j.Summary.Done
			failed += j.Summary.DeadLettered
			if j.Status.Finished() {
				finished++
			}
		}
		if line := fmt.Sprintf("%d/%d/%d", done, failed, finished); line != last {
			last = line
			log.Info().Int("chunks_done", done).Int("chunks_failed", failed).Int("chunks", total).Int("jobs_finished", finished).Msg("progress")
		}
		if finished == len(jobs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startSim starts a `salvage sim` child process and returns its URL.
func (e *env) startSim(ctx context.Context, args ...string) (string, *exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"sim", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = e.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start sim: %w", err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "SIM_URL="); ok {
				urls <- u
			}
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			_ = cmd.Wait()
			return "", nil, fmt.Errorf("sim exited before it was ready")
		}
		return u, cmd, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return "", nil, fmt.Errorf("sim not ready after 30s")
	}
}
