package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestAgentServedByTheNatsCLI: a pipeline declared in YAML, whose one
// agent is `nats reply --command` from the pinned nats CLI, runs under
// `salvage up --pipelines`; the agent's answer (here: the request it got,
// printed back) is each chunk's result, and `nats micro ls` shows the
// salvage service.
func TestAgentServedByTheNatsCLI(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "pipelines.yaml", `pipelines:
  - name: echo
    split: items
    stages:
      - name: answer
        agents:
          - name: echoer
            subject: agents.echo
            timeout: 5s
`)
	url, _ := up(t, "--pipelines", file)
	reply := exec.Command(natsBinary(t), "--server", url, "reply", "agents.echo", "--command", "printenv NATS_REQUEST_BODY")
	if err := reply.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reply.Process.Kill(); _ = reply.Wait() })

	code, out, errOut := run(t, `{"input": ["first", {"second": 2}]}`, "submit", "echo", "-", "--wait", "--server", url)
	if code != 0 {
		t.Fatalf("submit --wait: %d\n%s\n%s", code, out, errOut)
	}
	job := strings.TrimSpace(strings.Split(out, "\n")[0])
	js, err := jetstream.New(salvagetest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	c, err := salvage.NewClient(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.JobResults(context.Background(), job)
	if err != nil || len(res) != 2 {
		t.Fatalf("results = %v, %v", res, err)
	}
	// The pipeline has no Result: each result is the stage outputs.
	var outs []salvage.StageOutput
	if err := json.Unmarshal(res[2], &outs); err != nil || len(outs) != 1 {
		t.Fatalf("chunk 2's result %s: %v", res[2], err)
	}
	var req salvage.ServiceRequest
	if err := json.Unmarshal(outs[0].Output, &req); err != nil {
		t.Fatalf("the agent's output is not the request it printed: %s", outs[0].Output)
	}
	if req.Job != job || req.Chunk != 2 || req.Stage != 1 || req.Agent != "echoer" || string(req.Input) != `{"second":2}` {
		t.Errorf("the request the nats CLI got = %+v", req)
	}
	if ls := natsCmd(t, url, "micro", "ls"); !strings.Contains(string(ls), "salvage") {
		t.Errorf("nats micro ls:\n%s", ls)
	}
	// A pipeline of its own shows its results as they are.
	if code, out, _ := run(t, "", "results", job, "--server", url); code != 0 || !strings.Contains(out, "CHUNK  RESULT") || !strings.Contains(out, `"chunk":2,"stage":1,"agent":"echoer"`) {
		t.Errorf("salvage results:\n%s", out)
	}
}

// TestAgentInTypeScript: a pipeline whose agent is the TypeScript example
// (examples/agent-ts, a NATS micro service on Node) finishes; its service
// is SIGKILLed mid-run and started again, and the job still finishes with
// no turn that had been answered asked again. The agent answers in 150 ms;
// its timeout is 6 s, not 2 s: on a loaded machine an answer once came
// after 2 s, and a pure turn whose answer never arrived in time is rightly
// asked again.
func TestAgentInTypeScript(t *testing.T) {
	t.Parallel()
	dir := agentTSDir(t)
	file := writeFile(t, "pipelines.yaml", `pipelines:
  - name: summaries
    split: paragraphs
    stages:
      - name: summarize
        agents:
          - name: summarizer
            subject: agents.summarize
            timeout: 6s
`)
	url, _ := up(t, "--pipelines", file, "--concurrency", "4")
	log := filepath.Join(t.TempDir(), "answers.log")
	node := func() *exec.Cmd {
		cmd := exec.Command("node", "dist/agent.js")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NATS_URL="+url, "AGENT_LOG="+log, "AGENT_DELAY_MS=150")
		startPrinting(t, cmd, "serving ")
		return cmd
	}
	first := node()
	// lines are the agent's log: "asked KEY" when a turn arrives,
	// "answered KEY" once its answer left the process.
	lines := func() [][]string {
		data, _ := os.ReadFile(log)
		var ls [][]string
		for l := range strings.Lines(string(data)) {
			if f := strings.Fields(l); len(f) == 2 {
				ls = append(ls, f)
			}
		}
		return ls
	}
	answered := func() []string {
		var keys []string
		for _, l := range lines() {
			if l[0] == "answered" {
				keys = append(keys, l[1])
			}
		}
		return keys
	}

	var paras []string
	for i := range 24 {
		paras = append(paras, fmt.Sprintf("Paragraph %d: the Supplier shall deliver the goods within %d days of the order.", i+1, i+5))
	}
	body, _ := json.Marshal(map[string]any{"input": strings.Join(paras, "\n\n")})
	code, out, errOut := run(t, string(body), "submit", "summaries", "-", "--server", url)
	if code != 0 {
		t.Fatalf("submit: %s %s", out, errOut)
	}
	job := strings.TrimSpace(out)
	js, err := jetstream.New(salvagetest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	c, err := salvage.NewClient(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(answered()) >= 4 }, "the agent to answer some turns")
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	killedAfter := len(answered())
	beforeKill := len(lines())
	// The service stays down until a chunk has felt it (a turn nobody
	// answered, retried, or held while the agent's breaker is open): on a
	// loaded machine the restart could otherwise land before the worker
	// asked anything.
	salvagetest.Eventually(t, time.Minute, func() bool {
		st, err := c.ChunkList(context.Background(), job, &salvage.Page{Limit: 24})
		if err != nil {
			return false
		}
		for _, ch := range st.Chunks {
			if ch.Tier1Retries > 0 || ch.Status == salvage.ChunkHeld {
				return true
			}
		}
		return false
	}, "a chunk to find the agent gone")
	node()
	j := salvagetest.WaitJob(t, c, job, 2*time.Minute)
	if j.Status != salvage.JobDone || j.Chunks != 24 {
		t.Fatalf("job = %+v", j)
	}
	if killedAfter >= 24 || j.Summary.Tier1Retries+j.Summary.Redeliveries == 0 {
		t.Fatalf("the kill proved nothing: %d of 24 turns answered before it, %d retries, %d redeliveries after",
			killedAfter, j.Summary.Tier1Retries, j.Summary.Redeliveries)
	}
	// Each turn was answered once. The killed process may have sent an
	// answer and died before it logged it: such a turn was asked of it
	// alone, never again — the job's results below hold its answer.
	var answers map[string]int
	var asked, askedAfter map[string]bool
	tally := func() {
		answers, asked, askedAfter = map[string]int{}, map[string]bool{}, map[string]bool{}
		for i, l := range lines() {
			switch l[0] {
			case "asked":
				asked[l[1]] = true
				if i >= beforeKill {
					askedAfter[l[1]] = true
				}
			case "answered":
				answers[l[1]]++
			}
		}
	}
	// The live agent logs "answered" once its flush came back, which on
	// a loaded machine can be after the answer reached Salvage and the
	// job finished: read the log once every turn asked after the kill has
	// its line, or a minute passed (then the check below names the turn).
	allAnswered := func() bool {
		tally()
		for k := range askedAfter {
			if answers[k] == 0 {
				return false
			}
		}
		return true
	}
	logged, cancelLogged := context.WithTimeout(t.Context(), time.Minute)
	defer cancelLogged()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !allAnswered() && logged.Err() == nil {
		select {
		case <-logged.Done():
		case <-tick.C:
		}
	}
	for k := range asked {
		switch n := answers[k]; {
		case n > 1:
			t.Errorf("turn %s answered %d times: an answered turn was asked again", k, n)
		case n == 0 && askedAfter[k]:
			t.Errorf("turn %s was asked again after the kill and never answered", k)
		}
	}
	if len(asked) != 24 {
		t.Errorf("%d turns asked, want 24", len(asked))
	}
	res, err := c.JobResults(context.Background(), job)
	if err != nil || len(res) != 24 || !strings.Contains(string(res[7]), `"summary":"Paragraph 7: the Supplier shall deliver"`) {
		t.Errorf("results: %d, %v; chunk 7: %s", len(res), err, res[7])
	}
	if ls := natsCmd(t, url, "micro", "ls"); !strings.Contains(string(ls), "agent-ts") || !strings.Contains(string(ls), "salvage") {
		t.Errorf("nats micro ls does not show the agent next to salvage:\n%s", ls)
	}
}

// agentTSDir is the TypeScript example, built: make test runs npm ci and
// the build first.
func agentTSDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "examples", "agent-ts")
	if _, err := os.Stat(filepath.Join(dir, "dist", "agent.js")); err != nil {
		t.Fatalf("examples/agent-ts is not built: run `make test` (it runs npm ci and npm run build there): %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is not on PATH")
	}
	return dir
}
