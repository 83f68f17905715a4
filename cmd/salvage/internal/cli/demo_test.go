package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
)

func TestDemoReportJSON(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "demo", "--report", "json", "--chunks", "8", "--workers", "2",
		"--ack-wait", "2s", "--log-level", "warn", "--model-failure-rate", "0.05")
	demo.DieWithParent(cmd)
	// Killed at the deadline, its output stops being waited for too.
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s", err, stderr.String())
	}
	var r map[string]any
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("demo stdout is not one JSON object: %v", err)
	}
	if dec.More() {
		t.Fatal("demo printed more than one JSON object")
	}
	for _, k := range []string{"chunks", "chunks_done", "chunks_dead_lettered", "chunks_missing", "calls", "tier1_retries", "redeliveries", "envelopes", "wall_seconds"} {
		if _, ok := r[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	if r["chunks"] != 8.0 || r["chunks_done"] != 8.0 || r["chunks_missing"] != 0.0 {
		t.Errorf("report = %v", r)
	}
	if r["redeliveries"].(float64) < 1 || r["killed_worker"] == nil {
		t.Errorf("the killed worker caused no redelivery: %v", r)
	}
	if r["tier1_retries"].(float64) < 1 {
		t.Errorf("no tier-1 retries at 5%% failures: %v", r)
	}
	// The model calls went through the OpenAI-compatible client to the
	// sim, which reports one completion token per answer. A call answered
	// from the journal on a resume is not counted again; what the killed
	// worker spent in the stage it died in is not counted at all (its
	// stats die with it; the journal rows keep their usage), hence 90%.
	if url, _ := r["model_url"].(string); !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/v1") {
		t.Errorf("model_url = %v, want the sim's /v1", r["model_url"])
	}
	if c := r["model_completion_tokens"].(float64); c < 8*116*0.9 || c > 8*116 || r["model_prompt_tokens"].(float64) < 40*c {
		t.Errorf("tokens = %v prompt, %v completion; want up to one completion token for each of 8x116 calls", r["model_prompt_tokens"], c)
	}
}

func TestOrdersDemoReportJSON(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "demo", "--pipeline", "order-fulfillment", "--orders", "60", "--report", "json",
		"--ack-wait", "2s", "--log-level", "error")
	demo.DieWithParent(cmd)
	// Killed at the deadline, its output stops being waited for too.
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var r map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("demo stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	for _, k := range []string{"orders", "orders_completed", "orders_compensated", "orders_escalated", "duplicate_side_effects", "leftover_side_effects", "auto_recovery_rate"} {
		if _, ok := r[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	if r["orders"] != 60.0 || r["duplicate_side_effects"] != 0.0 || r["leftover_side_effects"] != 0.0 || r["orders_missing"] != 0.0 {
		t.Errorf("report = %v", r)
	}
	// The fault plan fails orders 7 and 36 at email (compensated) and
	// order 50's refund (escalated).
	if r["orders_compensated"].(float64) < 2 || r["orders_escalated"].(float64) < 1 {
		t.Errorf("compensated %v, escalated %v", r["orders_compensated"], r["orders_escalated"])
	}
	if rate := r["auto_recovery_rate"].(float64); rate <= 0 || rate >= 1 {
		t.Errorf("auto_recovery_rate = %v, want a fraction with one escalation in it", rate)
	}
	if r["orders_completed"].(float64)+r["orders_compensated"].(float64)+r["orders_escalated"].(float64)+r["orders_dead_end"].(float64) != 60 {
		t.Errorf("orders do not add up: %v", r)
	}
}

// TestChaos: order jobs published with the real nats CLI, spread over
// three partitions, while worker processes are SIGKILLed every second, the
// server restarts once and an operator cancels jobs and replays the DLQ in
// bulk; the run's own checks
// (every job and envelope settled, nothing lost, the sim's ledger free of
// repeated effects and of effects standing unaccounted) must hold.
func TestChaos(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "chaos", "--jobs", "40", "--kill-every", "1s", "--partitions", "3", "--report", "json",
		"--log-level", "error", "--nats", natsBinary(t))
	demo.DieWithParent(cmd)
	cmd.Dir = t.TempDir()
	// Killed at the deadline, chaos cannot stop its children, which hold
	// its output open: stop waiting for them.
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var r map[string]any
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
		t.Fatalf("chaos: %v, stdout is not one JSON object: %v\n%s\n%s", err, jerr, stdout.String(), stderr.String())
	}
	if err != nil {
		t.Fatalf("chaos checks failed: %v\n%v", err, r)
	}
	// The operator-action phase: every tenth job cancelled, bulk replays.
	if r["jobs_settled"] != 40.0 || r["duplicate_side_effects"] != 0.0 || r["leftover_side_effects"] != 0.0 ||
		r["server_restarts"] != 1.0 || r["kills"].(float64) < 1 || r["published_with"] != "nats CLI" || r["cancels"].(float64)+r["cancels_too_late"].(float64) != 4.0 {
		t.Errorf("report = %v", r)
	}
}
