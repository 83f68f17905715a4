package cli_test

import (
	"encoding/json"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestApprovalSurvivesARestart: chunks parked before a stage that requires
// approval stay parked through a full stop and start of `salvage up`;
// then `salvage approve` lets one finish and `--reject` abandons the other.
func TestApprovalSurvivesARestart(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "pipelines.yaml", `pipelines:
  - name: publishing
    split: items
    stages:
      - name: draft
        agents:
          - name: drafter
            subject: agents.draft
      - name: publish
        requires_approval: true
        agents:
          - name: publisher
            subject: agents.publish
`)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	store := t.TempDir()
	args := []string{"--listen", addr, "--store", store, "--pipelines", file}
	url, first := up(t, args...)

	// The agents: whatever answers NATS requests; this one survives the
	// restart by reconnecting.
	nc := salvagetest.Connect(t, url)
	published := make(chan string, 10)
	if _, err := nc.Subscribe("agents.*", func(m *nats.Msg) {
		if m.Subject == "agents.publish" {
			published <- string(m.Data)
		}
		_ = m.Respond([]byte(`"ok"`))
	}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, `{"input": ["first", "second"]}`, "submit", "publishing", "-", "--server", url)
	if code != 0 {
		t.Fatalf("submit: %d %s %s", code, out, errOut)
	}
	job := strings.TrimSpace(out)
	status := func() salvage.ChunkPage {
		_, out, _ := run(t, "", "status", job, "--json", "--server", url)
		var st salvage.ChunkPage
		_ = json.Unmarshal([]byte(out), &st)
		return st
	}
	awaiting := func(st salvage.ChunkPage) bool {
		return len(st.Chunks) == 2 && st.Chunks[0].Status == salvage.ChunkAwaitingApproval && st.Chunks[1].Status == salvage.ChunkAwaitingApproval
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return awaiting(status()) }, "both chunks to await approval")

	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	url, _ = up(t, args...)
	if st := status(); !awaiting(st) || st.Job.Status != salvage.JobRunning {
		t.Fatalf("after the restart: %+v", st)
	}
	if len(published) != 0 {
		t.Fatal("a stage that requires approval ran before it was approved")
	}
	// salvage approvals lists both across jobs, with the stage that waits,
	// through the service and, with --json, whole.
	if code, out, errOut := run(t, "", "approvals", "--server", url); code != 0 || strings.Count(out, job) != 2 || !strings.Contains(out, "2 publish") {
		t.Fatalf("approvals: %d\n%s%s", code, out, errOut)
	}
	var waiting []salvage.Awaiting
	if code, out, errOut := run(t, "", "approvals", "--json", "--limit", "1", "--server", url); code != 0 || jsonItems(out, &waiting) != nil ||
		len(waiting) != 1 || waiting[0].Job != job || waiting[0].Chunk < 1 || waiting[0].Stage != 2 || waiting[0].StageName != "publish" || waiting[0].Pipeline != "publishing" {
		t.Fatalf("approvals --json --limit 1: %d %v\n%s%s", code, waiting, out, errOut)
	}
	if code, _, errOut := run(t, "", "approvals", "--limit", "201", "--server", url); code == 0 || !strings.Contains(errOut, "--limit 201") {
		t.Fatalf("approvals --limit 201: %d %s", code, errOut)
	}
	if code, out, errOut := run(t, "", "approve", job, "1", "--by", "ann", "--server", url); code != 0 || !strings.Contains(out, "approved") {
		t.Fatalf("approve: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "approve", job, "2", "--reject", "--note", "not this one", "--server", url); code != 0 || !strings.Contains(out, "rejected") {
		t.Fatalf("approve --reject: %d %s %s", code, out, errOut)
	}
	var st salvage.ChunkPage
	salvagetest.Eventually(t, time.Minute, func() bool {
		st = status()
		return st.Job.Status == salvage.JobIncomplete
	}, "the job to end incomplete: one chunk done, one rejected (last %+v)", &st)
	if c := st.Chunks[0]; c.Status != salvage.ChunkDone || len(c.Approvals) != 1 || c.Approvals[0].By != "ann" {
		t.Fatalf("chunk 1 = %+v", c)
	}
	if c := st.Chunks[1]; c.Status != salvage.ChunkDeadLettered || c.Envelope == "" {
		t.Fatalf("chunk 2 = %+v", c)
	}
	if len(published) != 1 {
		t.Fatalf("the publish stage ran %d times; want once, for the approved chunk", len(published))
	}
	if code, _, errOut := run(t, "", "approve", job, "1", "--server", url); code == 0 || !strings.Contains(errOut, "not awaiting approval") {
		t.Fatalf("approving a done chunk: %d %s", code, errOut)
	}
	if code, out, errOut := run(t, "", "approvals", "--server", url); code != 0 || !strings.Contains(out, "no chunk awaits approval") {
		t.Fatalf("approvals once both were decided: %d %s%s", code, out, errOut)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, out, _ := run(t, "", "dlq", "show", st.Chunks[1].Envelope, "--json", "--server", url)
		var d struct {
			Record salvage.EnvelopeRecord `json:"record"`
		}
		return json.Unmarshal([]byte(out), &d) == nil && d.Record.Status == salvage.EnvelopeAbandoned && d.Record.Human
	}, "the rejected chunk's envelope to be abandoned, by a person")
}
