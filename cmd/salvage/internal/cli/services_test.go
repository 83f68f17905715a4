package cli_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

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
	res, err := c.Results(context.Background(), job)
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
}
