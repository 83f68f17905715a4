package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestDemoKeep: `salvage demo --keep` starts a dashboard and the API
// before the run and says where (so the run can be watched live), prints
// its report, then leaves its server, the dashboard and the API up, which
// show the demo's job and answer `salvage dlq ls`, until SIGINT.
func TestDemoKeep(t *testing.T) {
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "demo.log")
	cmd := exec.Command(binary, "demo", "--keep", "--chunks", "2", "--workers", "2", "--kill=false", "--report", "json", "--log-file", logFile)
	demo.DieWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan []byte, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		if sc.Scan() {
			reports <- append([]byte(nil), sc.Bytes()...)
		}
		for sc.Scan() {
		}
	}()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	urls := make(chan [2]string, 1)
	var urlAt time.Time // when the dashboard's URL was read
	go func() {
		var nats string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if v, ok := strings.CutPrefix(line, "NATS_URL="); ok {
				nats = v
			}
			if v, ok := strings.CutPrefix(line, "DASHBOARD="); ok {
				if urlAt.IsZero() {
					urlAt = time.Now()
				}
				select {
				case urls <- [2]string{nats, v}:
				default: // said again after the report
				}
			}
		}
	}()
	var u [2]string
	select {
	case u = <-urls:
	case <-time.After(90 * time.Second):
		t.Fatal("the demo printed no DASHBOARD= line")
	}
	// The dashboard is up before the run ends: live, not afterwards.
	if len(reports) != 0 {
		t.Fatal("the report came before the dashboard's URL; --keep should start the dashboard first")
	}
	if resp, err := http.Get(u[1] + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the dashboard while the demo runs: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// The report: one JSON object.
	var rep struct {
		Chunks     int `json:"chunks"`
		ChunksDone int `json:"chunks_done"`
	}
	var report []byte
	select {
	case report = <-reports:
	case <-time.After(time.Minute):
		t.Fatal("no report on stdout")
	}
	if err := json.Unmarshal(report, &rep); err != nil || rep.ChunksDone != 2 {
		t.Fatalf("report %q: %v", report, err)
	}
	code, out, errOut := run(t, "", "jobs", "--json", "--server", u[0])
	var page salvage.JobSearchPage
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Items) != 1 || page.Items[0].Status != salvage.JobDone {
		t.Fatalf("salvage jobs against the kept server: %d %s %s", code, out, errOut)
	}
	// Every chunk finished after the URL was printed: a person had it
	// before the first chunk was done.
	jobs := page.Items
	code, out, errOut = run(t, "", "trace", jobs[0].ID, "--json", "--server", u[0])
	var tr salvage.Trace
	if code != 0 || json.Unmarshal([]byte(out), &tr) != nil || len(tr.Chunks) != 2 {
		t.Fatalf("salvage trace of the demo's job: %d %s %s", code, out, errOut)
	}
	finished := 0
	for _, c := range tr.Chunks {
		for _, ev := range c.Events {
			if ev.Kind == salvage.EventDone {
				finished++
			}
			if ev.Kind == salvage.EventDone && !ev.At.After(urlAt) {
				t.Errorf("chunk %d was done at %s, before the dashboard's URL was printed (read at %s)", c.Chunk, ev.At.Format(time.RFC3339Nano), urlAt.Format(time.RFC3339Nano))
			}
		}
	}
	if finished != 2 {
		t.Errorf("the trace shows %d chunks done; want 2", finished)
	}
	if code, out, errOut := run(t, "", "dlq", "ls", "--server", u[0]); code != 0 {
		t.Errorf("salvage dlq ls against the kept demo (its API): %d %s %s", code, out, errOut)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		resp, err := http.Get(u[1] + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return strings.Contains(b.String(), `salvage_chunks_total{pipeline="contract-review",status="done"} 2`)
	}, "the kept dashboard to count the demo's two chunks")
	// The logs went to the file, not between the report and the URLs.
	if logs, err := os.ReadFile(logFile); err != nil || !bytes.Contains(logs, []byte("embedded server ready")) {
		t.Fatalf("--log-file holds %d bytes (%v); want the demo's logs", len(logs), err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo --keep after SIGINT: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("demo --keep did not stop on SIGINT")
	}
}
