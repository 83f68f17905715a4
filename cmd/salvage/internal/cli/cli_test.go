package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/cli"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "salvage-cli-test-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "salvage")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/salvagehq/salvage/cmd/salvage").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build salvage: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	// No goroutine of the commands run in process may outlive them.
	if err := goleak.Find(salvagetest.LibraryGoroutines()...); code == 0 && err != nil {
		fmt.Fprintf(os.Stderr, "goroutines left after the tests: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// Every process the tests start from the binary is tied to the test
// process (demo.DieWithParent): a test run killed at its timeout, or by
// hand, leaves no salvage process or server running.

// run runs the CLI in process and returns its exit code and output.
func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// up starts `salvage up --demo-pipelines` as a process and returns its
// NATS_URL.
func up(t *testing.T, args ...string) (string, *exec.Cmd) {
	t.Helper()
	base := []string{"up", "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "warn", "--demo-pipelines"}
	if !slices.Contains(args, "--server") {
		// Its own embedded server (--listen with --server is refused).
		base = append(base, "--listen", "127.0.0.1:-1", "--store", t.TempDir())
	}
	cmd := exec.Command(binary, append(base, args...)...)
	demo.DieWithParent(cmd)
	return startPrinting(t, cmd, "NATS_URL="), cmd
}

// startPrinting starts cmd, killed in t.Cleanup, and returns what follows
// prefix on the first stdout line that starts with it.
func startPrinting(t *testing.T, cmd *exec.Cmd, prefix string) string {
	t.Helper()
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				lines <- v
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case v := <-lines:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s printed no %s", cmd.Args, prefix)
	}
	return ""
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSubmitWaitStatusResultsCancel(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--model-latency", "1ms", "--model-failure-rate", "0.05", "--retry-base", "10ms", "--retry-max", "40ms")
	contract := writeFile(t, "contract.txt", contractreview.Contract(6, 3))

	code, out, errOut := run(t, "", "submit", "contract-review", contract, "--wait", "--server", url)
	if code != operator.ExitOK {
		t.Fatalf("submit --wait exit %d: %s", code, errOut)
	}
	job := strings.TrimSpace(out)
	if !strings.Contains(errOut, "6/6 done") {
		t.Errorf("progress output lacks the final count: %q", errOut)
	}

	// What the job left in the store, and when it goes.
	code, out, errOut = run(t, "", "storage", "--json", "--server", url)
	var stores []struct {
		Name          string    `json:"name"`
		Kind          string    `json:"kind"`
		Partition     *int      `json:"partition"`
		Messages      uint64    `json:"messages"`
		Bytes         uint64    `json:"bytes"`
		MaxAgeSeconds float64   `json:"max_age_seconds"`
		History       int64     `json:"history"`
		Retention     bool      `json:"retention"`
		Oldest        time.Time `json:"oldest"`
		Expires       time.Time `json:"expires"`
	}
	if code != operator.ExitOK || json.Unmarshal([]byte(out), &stores) != nil {
		t.Fatalf("storage --json: %d %s %s", code, out, errOut)
	}
	found := map[string]bool{}
	for _, s := range stores {
		found[s.Kind+" "+s.Name] = true
		if s.Name == kv.BucketJournal && (s.Kind != "bucket" || s.Messages == 0 || s.Bytes == 0 || s.MaxAgeSeconds != 0 ||
			!s.Retention || !s.Expires.IsZero()) {
			t.Errorf("the journal's storage: %+v; want the job's rows, kept while live, then by retention, no age limit", s)
		}
		if (s.Partition != nil) != (s.Name == kv.BucketJournal || s.Name == kv.BucketClaims || s.Name == kv.BucketCheckpoints || s.Name == streams.Chunks) ||
			s.Partition != nil && *s.Partition != 0 {
			t.Errorf("%s %s: partition %v; want 0 for the chunk stream and the chunks' buckets, none for the rest", s.Kind, s.Name, s.Partition)
		}
		if s.Name == streams.DLQ && (s.MaxAgeSeconds != 14*24*3600 || s.Retention || s.Messages > 0 && !s.Expires.Equal(s.Oldest.Add(14*24*time.Hour))) {
			t.Errorf("the DLQ's storage: %+v; want kept 14 days from the oldest", s)
		}
	}
	for _, want := range []string{"stream " + streams.Chunks, "stream " + streams.DLQ, "bucket " + kv.BucketJournal, "bucket " + kv.BucketCheckpoints} {
		if !found[want] {
			t.Errorf("storage lists no %s: %s", want, out)
		}
	}
	if code, out, _ := run(t, "", "storage", "--server", url); code != operator.ExitOK || !strings.Contains(out, "salvage_journal") || !strings.Contains(out, "while live, then by retention") ||
		!strings.Contains(out, "14 days") || !strings.Contains(out, "total") {
		t.Errorf("salvage storage:\n%s", out)
	}
	if code, _, _ := run(t, "", "storage", "extra", "--server", url); code == operator.ExitOK {
		t.Errorf("salvage storage with an argument exits 0")
	}

	code, out, _ = run(t, "", "status", job, "--server", url)
	if code != 0 || !strings.Contains(out, "status done") || strings.Count(out, "\tdone\t")+strings.Count(out, " done ") < 6 {
		t.Errorf("status exit %d:\n%s", code, out)
	}
	code, out, _ = run(t, "", "status", job, "--json", "--server", url)
	var st struct {
		Job struct {
			Status string `json:"status"`
		} `json:"job"`
		Chunks []struct {
			Status string `json:"status"`
			Calls  int    `json:"calls"`
		} `json:"chunks"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || st.Job.Status != "done" || len(st.Chunks) != 6 {
		t.Fatalf("status --json (%d): %v\n%s", code, err, out)
	}
	for i, c := range st.Chunks {
		if c.Status != "done" || c.Calls < contractreview.CallsPerChunk {
			t.Errorf("chunk %d = %+v", i+1, c)
		}
	}

	code, out, _ = run(t, "", "results", job, "--json", "--server", url)
	var findings []struct {
		Chunk  int                    `json:"chunk"`
		Result contractreview.Finding `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &findings); err != nil || code != 0 || len(findings) != 6 || findings[5].Chunk != 6 || findings[5].Result.Heading == "" {
		t.Fatalf("results --json (%d): %v\n%s", code, err, out)
	}
	code, out, _ = run(t, "", "results", job, "--server", url)
	if code != 0 || strings.Count(out, "Clause ") != 6 {
		t.Errorf("results table (%d):\n%s", code, out)
	}

	code, out, _ = run(t, "", "jobs", "--server", url)
	if code != 0 || !strings.Contains(out, job) {
		t.Errorf("jobs (%d):\n%s", code, out)
	}

	// A plain nats pub of a job message, id learnt from the accepted event.
	nc := salvagetest.Connect(t, url)
	accepted := make(chan *nats.Msg, 1)
	sub, _ := nc.ChanSubscribe("salvage.events.*.accepted", accepted)
	defer sub.Unsubscribe()
	_ = nc.Flush()
	body, _ := json.Marshal(map[string]any{"input": contractreview.Input{Text: contractreview.Contract(40, 4)}})
	if err := nc.Publish(salvage.JobSubject(contractreview.Name), body); err != nil {
		t.Fatal(err)
	}
	var ev salvagetype.JobEvent
	select {
	case m := <-accepted:
		_ = json.Unmarshal(m.Data, &ev)
	case <-time.After(time.Minute):
		t.Fatal("no accepted event for a plain publish")
	}
	code, out, _ = run(t, "", "cancel", ev.Job, "--server", url)
	if code != 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel (%d): %s", code, out)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, out, _ := run(t, "", "status", ev.Job, "--server", url)
		return strings.Contains(out, "status cancelled")
	}, "job to end cancelled")
	_, out, _ = run(t, "", "status", ev.Job, "--server", url)
	if !strings.Contains(out, "cancelled-at-stage-") {
		t.Errorf("no chunk cancelled at a stage:\n%s", out)
	}
}

func TestSubmitBadInput(t *testing.T) {
	t.Parallel()
	// A job for a pipeline no process ever ran is rejected after
	// --unknown-pipeline-wait, at the next sweep.
	url, _ := up(t, "--unknown-pipeline-wait", "500ms", "--sweep-interval", "500ms")
	big := writeFile(t, "big.txt", strings.Repeat("x", 600<<10))
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"malformed JSON", `{"input": `, []string{"submit", "contract-review", "-"}, "not valid JSON"},
		{"no input", `{"metadata": {}}`, []string{"submit", "contract-review", "-"}, `no "input"`},
		{"text for a JSON pipeline", `hello`, []string{"submit", "order-fulfillment", "-"}, "must be a JSON job message"},
		{"oversized", "", []string{"submit", "contract-review", big}, "over the 512 KiB"},
		{"bad pipeline token", `{"input": {}}`, []string{"submit", "contract.review", "-"}, "contains"},
		{"bad job id", `{"job_id": "a>b", "input": {}}`, []string{"submit", "contract-review", "-"}, "contains"},
		{"unknown pipeline", `{"input": {}}`, []string{"submit", "nope", "-", "--wait"}, "unknown-pipeline"},
		{"unknown pipeline, no --wait", `{"input": {}}`, []string{"submit", "nope", "-"}, "unknown-pipeline"},
		{"empty contract, no --wait", `{"input": {"text": ""}}`, []string{"submit", "contract-review", "-"}, "bad-input"},
		{"empty contract", `{"input": {"text": ""}}`, []string{"submit", "contract-review", "-", "--wait"}, "bad-input"},
		{"unknown job", "", []string{"status", "01JNOSUCHJOB0000000000000"}, "no job"},
		{"bad job token", "", []string{"cancel", "a.b"}, "contains"},
		{"unknown role", "", []string{"up", "--role", "bogus", "--listen", "127.0.0.1:-1"}, "unknown role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := run(t, tt.stdin, append(tt.args, "--server", url)...)
			if code != operator.ExitError || !strings.Contains(errOut, tt.want) || repeatsPrefix(errOut) {
				t.Fatalf("exit %d, stderr %q; want exit 1 mentioning %q once", code, errOut, tt.want)
			}
		})
	}
	// Still serving.
	code, out, errOut := run(t, contractreview.Contract(2, 1), "submit", "contract-review", "-", "--wait", "--server", url)
	if code != 0 {
		t.Fatalf("good job after bad input: exit %d: %s", code, errOut)
	}
	// A chunk the job does not have, asked of the service: said once.
	job, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(out), "job "), " ")
	if code, _, errOut := run(t, "", "trace", job, "--chunk", "999", "--server", url); code != operator.ExitError ||
		!strings.Contains(errOut, "has no chunk 999") || repeatsPrefix(errOut) {
		t.Fatalf("trace of chunk 999: exit %d, stderr %q; want it refused, saying so once", code, errOut)
	}
}

// repeatsPrefix reports whether an error message says one of its parts
// twice in a row, as "unknown job: unknown job: ..." did: every layer
// that wraps an error adds what the layer below did not say.
func repeatsPrefix(msg string) bool {
	for line := range strings.Lines(msg) {
		parts := strings.Split(strings.TrimSpace(line), ": ")
		for i := 1; i < len(parts); i++ {
			if parts[i] != "" && strings.EqualFold(parts[i], parts[i-1]) {
				return true
			}
		}
	}
	return false
}

// TestSIGTERMDrains: a worker process told to stop finishes its in-flight
// chunks, exits 0, and the job completes.
func TestSIGTERMDrains(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--role", "dead-letter")
	_, worker := up(t, "--server", url, "--role", "worker", "--worker-id", "drainer", "--model-latency", "20ms")
	code, out, errOut := run(t, "", "submit", "contract-review", writeFile(t, "c.txt", contractreview.Contract(2, 9)), "--server", url)
	if code != 0 {
		t.Fatalf("submit: %s", errOut)
	}
	job := strings.TrimSpace(out)
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, out, _ := run(t, "", "status", job, "--server", url)
		return strings.Contains(out, "drainer")
	}, "the worker to take a chunk")
	if err := worker.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- worker.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker exit after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("worker did not drain within a minute")
	}
	_, out, _ = run(t, "", "status", job, "--server", url)
	if !strings.Contains(out, "status done") {
		t.Fatalf("in-flight chunks not finished by the draining worker:\n%s", out)
	}
}

// TestSubmitExitCodes: --wait exits 4 for an incomplete job and 5 for a
// cancelled one.
func TestSubmitExitCodes(t *testing.T) {
	t.Parallel()
	t.Run("incomplete", func(t *testing.T) {
		url, _ := up(t, "--model-permanent-rate", "1", "--model-latency", "1ms")
		code, _, errOut := run(t, contractreview.Contract(2, 1), "submit", "contract-review", "-", "--wait", "--server", url)
		if code != operator.ExitIncomplete || !strings.Contains(errOut, "incomplete") {
			t.Fatalf("exit %d, want %d: %s", code, operator.ExitIncomplete, errOut)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		url, _ := up(t, "--model-latency", "50ms", "--concurrency", "1")
		cmd := exec.Command(binary, "submit", "contract-review", "-", "--wait", "--server", url)
		demo.DieWithParent(cmd)
		cmd.Stdin = strings.NewReader(contractreview.Contract(12, 2))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() {
			t.Fatal("submit printed no job id")
		}
		job := strings.TrimSpace(sc.Text())
		if code, _, errOut := run(t, "", "cancel", job, "--server", url); code != 0 {
			t.Fatalf("cancel: %s", errOut)
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != operator.ExitCancelled {
			t.Fatalf("submit --wait ended %v, want exit %d", err, operator.ExitCancelled)
		}
	})
}

// TestTwoServersOneStore: a second `salvage up` on a store another one
// uses exits at once, naming the store and the holder's pid; once the
// holder is SIGKILLed the store starts again (no stale lock).
func TestTwoServersOneStore(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	_, first := up(t, "--store", store, "--role", "api")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	second := exec.CommandContext(ctx, binary, "up", "--store", store, "--listen", "127.0.0.1:-1", "--http", "127.0.0.1:0", "--role", "api")
	demo.DieWithParent(second)
	var stderr bytes.Buffer
	second.Stderr = &stderr
	err := second.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || ctx.Err() != nil {
		t.Fatalf("second salvage up on one store: %v (stderr %s); want a prompt non-zero exit", err, stderr.String())
	}
	if msg := stderr.String(); !strings.Contains(msg, store) || !strings.Contains(msg, strconv.Itoa(first.Process.Pid)) {
		t.Fatalf("the refusal should name the store and pid %d: %s", first.Process.Pid, msg)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if url, _ := up(t, "--store", store, "--role", "api"); url == "" {
		t.Fatal("no restart on the store after the holder was killed")
	}
}

// TestUpJoinsNATSURL: with NATS_URL exported (as the README's steps do),
// `salvage up --role worker` joins that server instead of embedding one,
// unless --listen or --store ask for an embedded server: explicit flags
// win over the environment, and --listen with --server is refused as a
// contradiction. --listen HOST:0 picks a free port and prints it. Pointed
// at nothing, every command says so within seconds, naming the URL.
func TestUpJoinsNATSURL(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--role", "api")
	cmd := exec.Command(binary, "up", "--role", "worker", "--http", "127.0.0.1:0", "--log-level", "warn")
	demo.DieWithParent(cmd)
	cmd.Env = append(os.Environ(), "NATS_URL="+url)
	if got := startPrinting(t, cmd, "NATS_URL="); got != url {
		t.Fatalf("up with NATS_URL=%s printed NATS_URL=%s: it did not join", url, got)
	}
	cmd = exec.Command(binary, "up", "--role", "api", "--store", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-level", "warn")
	demo.DieWithParent(cmd)
	cmd.Env = append(os.Environ(), "NATS_URL="+url)
	own := startPrinting(t, cmd, "NATS_URL=")
	if own == url || strings.HasSuffix(own, ":0") || strings.HasSuffix(own, ":4222") || !strings.HasPrefix(own, "nats://127.0.0.1:") {
		t.Fatalf("up --listen 127.0.0.1:0 --store with NATS_URL=%s printed NATS_URL=%s; want its own server on a free port", url, own)
	}
	if code, _, errOut := run(t, "", "up", "--server", url, "--listen", "127.0.0.1:0"); code != operator.ExitError || !strings.Contains(errOut, "one or the other") {
		t.Errorf("up --server with --listen: exit %d, %q; want refused", code, errOut)
	}
	if code, _, errOut := run(t, "", "up", "--server", url, "--keep-calls", "200h"); code != operator.ExitError || !strings.Contains(errOut, "calls 200h0m0s is over 168h0m0s") {
		t.Errorf("up --keep-calls 200h: exit %d, %q; want refused, naming the limit", code, errOut)
	}

	dead := "nats://127.0.0.1:1"
	for _, args := range [][]string{
		{"up", "--server", dead, "--role", "worker", "--connect-timeout", "3s"},
		{"up", "--role", "worker", "--connect-timeout", "3s"}, // through NATS_URL
		{"status", "01JNOSUCHJOB0000000000000", "--server", dead},
		{"dlq", "ls", "--server", dead},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		c := exec.CommandContext(ctx, binary, args...)
		demo.DieWithParent(c)
		c.Env = append(os.Environ(), "NATS_URL="+dead)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		start := time.Now()
		err := c.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(stderr.String(), "127.0.0.1:1") || !strings.Contains(stderr.String(), "refused") {
			t.Errorf("salvage %v against nothing: %v after %s; stderr %q", args, err, time.Since(start).Round(time.Millisecond), stderr.String())
		}
	}
}

// TestHelpGroupsTheCommands: salvage --help lists every command under
// what it is for — running a deployment, jobs, operating, trying it,
// measuring — in that order, and the bench's worker commands not at all.
func TestHelpGroupsTheCommands(t *testing.T) {
	code, out, errOut := run(t, "", "--help")
	if code != operator.ExitOK {
		t.Fatalf("--help: exit %d: %s", code, errOut)
	}
	groups := []struct {
		title string
		cmds  []string
	}{
		{"Run a deployment:", []string{"up", "provision"}},
		{"Submit and follow jobs:", []string{"submit", "status", "results", "trace", "jobs", "cancel", "approve", "tenant"}},
		{"Operate:", []string{"dlq", "breakers", "pipelines", "pause", "resume", "workers", "limits", "storage"}},
		{"Try it:", []string{"demo", "chaos", "sim"}},
		{"Measure:", []string{"bench"}},
		{"Additional Commands:", nil},
	}
	at := 0
	for i, g := range groups {
		start := strings.Index(out, "\n"+g.title+"\n")
		if start < at {
			t.Fatalf("--help has no %q after the groups before it:\n%s", g.title, out)
		}
		end := len(out)
		if i+1 < len(groups) {
			end = strings.Index(out, "\n"+groups[i+1].title+"\n")
		}
		section := out[start:max(end, start)]
		for _, c := range g.cmds {
			if !strings.Contains(section, "\n  "+c+" ") {
				t.Errorf("%s is not listed under %q:\n%s", c, g.title, section)
			}
		}
		at = start
	}
	if strings.Contains(out, "bench-worker") {
		t.Errorf("--help lists the bench's worker commands:\n%s", out)
	}
}

// jsonItems reads the items of a listing's --json ({"items": [...]})
// into v.
func jsonItems[T any](out string, v *[]T) error {
	var page struct {
		Items []T `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		return err
	}
	if page.Items == nil {
		return errors.New("no items")
	}
	*v = page.Items
	return nil
}
