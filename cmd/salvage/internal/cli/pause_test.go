package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestPauseAndResumeFromTheCLI: `salvage pause` stops a pipeline's
// chunks (JetStream pauses its pool and hold consumers, as the nats CLI
// shows), `salvage status` and `salvage pipelines` say so, and a resume
// through the micro service with the nats CLI lets the job finish.
func TestPauseAndResumeFromTheCLI(t *testing.T) {
	t.Parallel()
	url, _ := up(t, append([]string{"--role", "worker,dead-letter,recovery,api", "--model-latency", "1ms"}, fastTiers...)...)
	salvagetest.Eventually(t, time.Minute, func() bool {
		code, out, _ := run(t, "", "pipelines", "--server", url)
		return code == 0 && strings.Contains(out, "contract-review")
	}, "the worker to record its pipelines")

	code, out, errOut := run(t, "", "pause", "contract-review", "--reason", "model deploy", "--by", "ann", "--server", url)
	if code != operator.ExitOK || !strings.Contains(out, "pipeline contract-review paused by ann") || !strings.Contains(out, "model deploy") {
		t.Fatalf("pause exit %d: %s%s", code, out, errOut)
	}
	if code, _, errOut := run(t, "", "pause", "no-such-pipeline", "--server", url); code == operator.ExitOK || !strings.Contains(errOut, "unknown pipeline") {
		t.Fatalf("pausing an unknown pipeline: exit %d, %s", code, errOut)
	}
	if code, _, errOut := run(t, "", "resume", "a.b", "--server", url); code == operator.ExitOK || !strings.Contains(errOut, "pipeline") {
		t.Fatalf("resuming a bad name: exit %d, %s", code, errOut)
	}

	// The holder pauses the pipeline's pool with JetStream's consumer
	// pause on its next pass; chunks queued from then on are not
	// delivered (a chunk delivered before it parks at its next stage:
	// the consumers package's pause tests).
	var pool struct {
		Paused bool `json:"paused"`
	}
	var raw []byte
	salvagetest.Eventually(t, time.Minute, func() bool {
		raw = natsCmdQuiet(t, url, "consumer", "info", "SALVAGE_CHUNKS", "workers-contract-review", "--json")
		return json.Unmarshal(raw, &pool) == nil && pool.Paused
	}, "nats consumer info to show the pool workers-contract-review paused (last:\n%s)", raw)

	contract := writeFile(t, "contract.txt", contractreview.Contract(3, 0))
	code, out, errOut = run(t, "", "submit", "contract-review", contract, "--server", url)
	if code != operator.ExitOK {
		t.Fatalf("submit exit %d: %s", code, errOut)
	}
	job := strings.TrimSpace(out)
	salvagetest.Eventually(t, time.Minute, func() bool {
		code, out, _ = run(t, "", "status", job, "--server", url)
		return code == 0 && strings.Contains(out, "chunks 3: 0 done, 0 dead-lettered, 0 cancelled, 0 running, 3 pending, 0 held, 0 awaiting-approval, 0 paused") &&
			strings.Contains(out, "pipeline contract-review paused by ann")
	}, "`salvage status` to show 3 chunks pending and the pause (last:\n%s)", out)
	code, out, _ = run(t, "", "pipelines", "--server", url)
	if code != 0 || !strings.Contains(out, "paused") || !strings.Contains(out, "model deploy") {
		t.Fatalf("pipelines exit %d:\n%s", code, out)
	}
	var info struct {
		Paused bool `json:"paused"`
		Config struct {
			FilterSubject string `json:"filter_subject"`
		} `json:"config"`
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		raw = natsCmdQuiet(t, url, "consumer", "info", "SALVAGE_HOLD", "hold-paused-contract-review", "--json")
		return json.Unmarshal(raw, &info) == nil && info.Paused && info.Config.FilterSubject == "salvage.hold.paused-contract-review.>"
	}, "nats consumer info to show hold-paused-contract-review paused (last:\n%s)", raw)
	var p salvage.PipelineStatus
	raw = natsCmd(t, url, "req", "--raw", "salvage.api.pipelines.resume", `{"pipeline": "contract-review", "by": "bob"}`)
	if err := json.Unmarshal(raw, &p); err != nil || p.Paused || p.ResumedBy != "bob" {
		t.Fatalf("salvage.api.pipelines.resume answered %s", raw)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		code, out, _ = run(t, "", "status", job, "--server", url)
		return code == 0 && strings.Contains(out, "status done")
	}, "the job to finish after the resume (last:\n%s)", out)
}
