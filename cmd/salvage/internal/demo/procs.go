package demo

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
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
)

// Worker is a child `salvage up --role Worker` process.
type Worker struct {
	ID  string
	Cmd *exec.Cmd
}

// startWorkers starts o.workers child worker processes and waits until each
// has printed its NATS_URL line (roles ready).
func (e *Env) startWorkers(ctx context.Context, o Opts, url string) ([]*Worker, error) {
	var out []*Worker
	for i := range o.Workers {
		w, err := e.StartWorker(ctx, o, url, fmt.Sprintf("demo-w%d", i+1))
		if w != nil {
			out = append(out, w)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// StartWorker starts one `salvage up --role worker` child process and
// waits until it is ready.
func (e *Env) StartWorker(ctx context.Context, o Opts, url, id string) (*Worker, error) {
	args := append([]string{"up", "--role", string(salvage.RoleWorker), "--server", url, "--worker-id", id}, o.Run.Args()...)
	return e.StartProcess(ctx, id, args)
}

// StartProcess starts this executable with args (and the log flags) as
// worker id and waits until it prints its NATS_URL line.
func (e *Env) StartProcess(ctx context.Context, id string, args []string) (*Worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args = append(args, "--log-level", e.LogLevel, "--log-format", e.LogFormat)
	cmd := exec.CommandContext(ctx, exe, args...)
	DieWithParent(cmd)
	cmd.Stderr = e.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", id, err)
	}
	w := &Worker{ID: id, Cmd: cmd}
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

// StopWorkers drains the workers with SIGTERM, then kills what is left.
func StopWorkers(ws []*Worker) {
	for _, w := range ws {
		if w.Cmd.ProcessState == nil {
			_ = w.Cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, w := range ws {
		done := make(chan struct{})
		go func() { _ = w.Cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = w.Cmd.Process.Kill()
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
func killMidChunk(ctx context.Context, client *salvage.Client, jobs []string, ws []*Worker) (kill, error) {
	for {
		for _, job := range jobs {
			_, chunks, err := operator.AllChunks(ctx, client, job)
			if err != nil {
				continue
			}
			for _, c := range chunks {
				if c.Stage < 2 || c.Status != salvage.ChunkRunning {
					continue
				}
				for _, w := range ws {
					if w.ID == c.ClaimedBy {
						if err := w.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
							return kill{}, err
						}
						_ = w.Cmd.Wait()
						return kill{worker: w.ID, job: job, chunk: c.Chunk, stage: c.Stage}, nil
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
func (e *Env) startSim(ctx context.Context, args ...string) (string, *exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"sim", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = e.Stderr
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
