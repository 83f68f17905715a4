package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// proc is a process of the example's binary, killed at the end.
type proc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
}

// start runs the binary with args; its stdout lines arrive on lines.
func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, lines: make(chan string, 64), stderr: &bytes.Buffer{}}
	cmd.Stderr = &lockedWriter{w: p.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", args[0], p.stderr)
		}
	})
	return p
}

// await waits for the line that starts with prefix.
func (p *proc) await(t *testing.T, prefix string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case l := <-p.lines:
			if len(l) >= len(prefix) && l[:len(prefix)] == prefix {
				return
			}
		case <-deadline:
			t.Fatalf("no %q within a minute; stderr:\n%s", prefix, p.stderr)
		}
	}
}

// kill SIGKILLs the process and reaps it.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestRefundsSurviveKills runs the refunds pipeline in worker processes
// against the shop, over stdio and over streamable HTTP, with two jobs of
// five orders. The shop takes o-2's refund and never answers: the test
// SIGKILLs the shop mid-call, and the worker reconnects and verifies the
// refund instead of paying it again. The shop takes o-7's refund and
// never answers: the test SIGKILLs the worker mid-job, and another
// verifies it. o-5 and o-10 cannot be notified (a permanent failure):
// their refunds are cancelled. The shop's ledger, which pays out on every
// call it gets, shows one refund per order.
func TestRefundsSurviveKills(t *testing.T) {
	bin := build(t)
	for _, over := range []string{"stdio", "http"} {
		t.Run(over, func(t *testing.T) { refundsSurviveKills(t, bin, over) })
	}
}

func refundsSurviveKills(t *testing.T, bin, over string) {
	ns := salvagetest.StartServer(t)
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	const hang = "o-2,o-7"
	// Killing the shop over HTTP is an outage the worker may see (calls
	// refused until it is back): its breaker opens, and a short cool-down
	// keeps the test from waiting the default 30 s for the probe.
	worker := []string{"worker", "--nats", ns.NATS.ClientURL(), "--ack-wait", "6s", "--breaker-cool-down", "2s"}
	shopArgs := []string{"shop", "--ledger", ledger, "--hang-refund", hang}
	var shop *proc
	if over == "http" {
		addr := freeAddr(t)
		shopArgs = append(shopArgs, "--http", addr)
		shop = start(t, bin, shopArgs...)
		shop.await(t, "shop: MCP on")
		worker = append(worker, "--mcp-url", "http://"+addr+"/mcp")
	} else {
		worker = append(worker, "--ledger", ledger, "--hang-refund", hang)
	}
	a := start(t, bin, worker...)
	a.await(t, "worker: ready")
	c := ns.Client(t, &salvage.Config{Roles: []salvage.Role{salvage.RoleNone}})
	ctx := context.Background()

	// Job 1: o-2's refund is paid and its answer lost; the shop is
	// killed mid-call.
	job1, err := c.JobSubmit(ctx, "refunds", orders(1, 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	hung := awaitRefund(t, ledger, "o-2")
	if over == "http" {
		shop.kill()
		shop = start(t, bin, shopArgs...)
		shop.await(t, "shop: MCP on")
	} else {
		// The worker's child, found by the pid the ledger recorded.
		_ = syscall.Kill(hung.PID, syscall.SIGKILL)
	}
	j1 := salvagetest.WaitJob(t, c, job1, 2*time.Minute)

	// Job 2: o-7's refund is paid and its answer lost; the worker is
	// killed mid-job and another takes over.
	job2, err := c.JobSubmit(ctx, "refunds", orders(6, 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	hung = awaitRefund(t, ledger, "o-7")
	a.kill()
	if over == "stdio" {
		_ = syscall.Kill(hung.PID, syscall.SIGKILL) // the dead worker's shop
	}
	b := start(t, bin, worker...)
	b.await(t, "worker: ready")
	j2 := salvagetest.WaitJob(t, c, job2, 2*time.Minute)

	for _, j := range []*salvage.Job{j1, j2} {
		if j.Status != salvage.JobIncomplete || j.Summary.Done != 4 || j.Summary.DeadLettered != 1 {
			t.Errorf("job %s: %s, %d done, %d dead-lettered; want incomplete, 4 done and the order with no e-mail dead-lettered",
				j.ID, j.Status, j.Summary.Done, j.Summary.DeadLettered)
		}
		if j.Summary.PromptTokens < 5*40 {
			t.Errorf("job %s: %d prompt tokens; want the 40 each lookup reported, 5 lookups at least", j.ID, j.Summary.PromptTokens)
		}
	}
	// The refunds whose answers were lost were verified, not repeated.
	for _, v := range []struct {
		job   string
		chunk int
	}{{job1, 2}, {job2, 2}} {
		tc, err := c.ChunkTrace(ctx, v.job, v.chunk)
		if err != nil {
			t.Fatal(err)
		}
		verified := false
		var calls []string
		for _, call := range tc.Calls {
			verified = verified || (call.Tool == "issue-refund" && call.Verified)
			calls = append(calls, fmt.Sprintf("%s %s verified=%v", call.Tool, call.Status, call.Verified))
		}
		if !verified {
			t.Errorf("job %s chunk %d: no verified issue-refund among %q", v.job, v.chunk, calls)
		}
		workers := map[string]bool{}
		for _, e := range tc.Events {
			if e.Kind == "delivered" {
				workers[e.Worker] = true
			}
		}
		if want := map[string]int{job1: 1, job2: 2}[v.job]; len(workers) != want {
			t.Errorf("job %s chunk %d: delivered to %d workers %v; want %d", v.job, v.chunk, len(workers), workers, want)
		}
	}
	// One refund per order, and the two that could not be notified are
	// cancelled, once each.
	salvagetest.Eventually(t, 2*time.Minute, func() bool {
		es, _ := readLedger(ledger)
		return count(es, "cancel", "") >= 2
	}, "the refunds of o-5 and o-10 were not cancelled")
	es, err := readLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	refundKey := map[string]string{}
	for k := 1; k <= 10; k++ {
		order := fmt.Sprintf("o-%d", k)
		if n := count(es, "refund", order); n != 1 {
			t.Errorf("%s refunded %d times; want once", order, n)
		}
		for _, e := range es {
			if e.Op == "refund" && e.Order == order {
				refundKey[e.Key] = order
			}
		}
	}
	var cancelled []string
	for _, e := range es {
		if e.Op == "cancel" {
			cancelled = append(cancelled, refundKey[e.RefundKey])
		}
	}
	if len(cancelled) != 2 || !(cancelled[0] == "o-5" && cancelled[1] == "o-10" || cancelled[0] == "o-10" && cancelled[1] == "o-5") {
		t.Errorf("cancelled the refunds of %v; want o-5's and o-10's, once each", cancelled)
	}
}

// TestDemoRuns runs the demo as `go run ./examples/mcp` would: six
// orders, the fifth refunded and then cancelled.
func TestDemoRuns(t *testing.T) {
	out, err := exec.Command(build(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"job incomplete: 5 done, 1 dead-lettered, 240 prompt tokens reported by the shop",
		"shop: 6 refunds, 1 cancelled (order o-5 could not be told)",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo printed:\n%s\nwant a line %q", out, want)
		}
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// build builds the example once for the package's tests.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcp-example-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "mcp")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	return binPath
}

// awaitRefund waits for order's refund in the ledger.
func awaitRefund(t *testing.T, ledger, order string) entry {
	t.Helper()
	var got entry
	salvagetest.Eventually(t, time.Minute, func() bool {
		es, _ := readLedger(ledger)
		for _, e := range es {
			if e.Op == "refund" && e.Order == order {
				got = e
				return true
			}
		}
		return false
	}, "no refund of %s in the ledger", order)
	return got
}

// freeAddr is a loopback address free a moment ago, for a server that
// must come back on the same one.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
