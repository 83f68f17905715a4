package cli_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
)

// TestBench runs `salvage bench` small: the critical-path section, a
// crash run of two kills and two growth jobs, and checks the report holds
// what was measured.
func TestBench(t *testing.T) {
	t.Parallel()
	out := benchOutput(t, "--only", "critical,crash,growth,soak", "--kills", "2", "--kill-every", "1s",
		"--workers", "2", "--growth", "20,60", "--growth-concurrency", "4", "--soak", "14s", "--report", "json", "--log-level", "error")
	var r struct {
		Critical struct {
			StageDepths  []int         `json:"stage_depths"`
			CriticalPath time.Duration `json:"critical_path_ns"`
			MeasuredPath time.Duration `json:"measured_critical_path_ns"`
			Wall         time.Duration `json:"wall_ns"`
			Ratio        float64       `json:"ratio"`
		} `json:"critical_path"`
		Crash struct {
			Kills    int           `json:"kills"`
			Chunks   int           `json:"chunks_resumed"`
			P50      time.Duration `json:"p50_ns"`
			Requests int           `json:"model_requests"`
			Unique   int           `json:"model_calls"`
		} `json:"crash_to_resume"`
		Growth []struct {
			Chunks  int     `json:"chunks"`
			Status  string  `json:"status"`
			Ms      float64 `json:"ms_per_chunk"`
			PeakRSS int64   `json:"worker_peak_rss_bytes"`
		} `json:"growth"`
		Storage []struct {
			Name      string `json:"stream"`
			PeakMsgs  uint64 `json:"peak_msgs"`
			AfterMsgs uint64 `json:"after_msgs"`
			Retained  uint64 `json:"retained_msgs"`
			Kept      string `json:"kept"`
		} `json:"storage"`
		Soak struct {
			Jobs    int `json:"jobs"`
			Chunks  int `json:"chunks"`
			Samples []struct {
				Governed uint64 `json:"governed_bytes"`
			} `json:"samples"`
			Drained *struct {
				Governed uint64 `json:"governed_bytes"`
			} `json:"drained"`
		} `json:"soak"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	c := r.Critical
	// 22 chunks on 4 slots: 6 waves of 15 calls one after another.
	if len(c.StageDepths) != 3 || c.StageDepths[0] != 1 || c.StageDepths[1] != 11 || c.StageDepths[2] != 3 || c.CriticalPath != 6*15*15*time.Millisecond {
		t.Errorf("critical path = %v from stage depths %v, want 1.35s from [1 11 3]", c.CriticalPath, c.StageDepths)
	}
	if c.MeasuredPath < c.CriticalPath || c.Wall < c.MeasuredPath || c.Ratio < 1 {
		t.Errorf("wall %v, measured path %v, ratio %.2f: the job cannot beat its critical path", c.Wall, c.MeasuredPath, c.Ratio)
	}
	kc := r.Crash
	if kc.Kills != 2 || kc.Chunks < 2 || kc.P50 < time.Second || kc.Requests < kc.Unique || kc.Unique == 0 {
		t.Errorf("crash = %+v: want 2 kills, their chunks resumed a lease (4s) or so later, requests counted", kc)
	}
	if len(r.Growth) != 2 {
		t.Fatalf("growth rows = %+v", r.Growth)
	}
	for i, g := range r.Growth {
		if g.Chunks != []int{20, 60}[i] || g.Status != "done" || g.Ms <= 0 || g.PeakRSS <= 0 {
			t.Errorf("growth row %+v", g)
		}
	}
	kept := map[string]string{}
	for _, s := range r.Storage {
		kept[s.Name] = s.Kept
		if s.Name == "SALVAGE_CHUNKS" && s.AfterMsgs != 0 {
			t.Errorf("SALVAGE_CHUNKS holds %d messages after the job", s.AfterMsgs)
		}
		if s.Name == "KV_salvage_journal" && (s.AfterMsgs == 0 || s.Retained != 0) {
			// Contract review makes pure calls only: none is kept.
			t.Errorf("the journal held %d messages after the job and %d once retention ran; want some, then none", s.AfterMsgs, s.Retained)
		}
	}
	if kept["KV_salvage_claims"] != "24h0m0s" || kept["SALVAGE_CHUNKS"] != "until acked" || kept["KV_salvage_journal"] != "while live, then by retention" {
		t.Errorf("kept = %v", kept)
	}
	// The soak wrote about a KiB per call (116 per chunk); retention keeps
	// a fraction of it at any time.
	k := r.Soak
	if k.Jobs == 0 || len(k.Samples) < 5 {
		t.Fatalf("soak = %+v: want jobs run and samples taken", k)
	}
	// Once the jobs stopped, retention brings the governed stores to at
	// most a quarter of what the soak wrote — decided by the drain's
	// sample, taken once retention caught up (on a loaded machine the
	// last sample of the run itself held a third: retention lags, it
	// does not fail).
	written := uint64(k.Chunks) * 116 << 10
	if last := k.Samples[len(k.Samples)-1].Governed; last == 0 {
		t.Errorf("the soak's last sample says 0 bytes governed after writing about %d: the listing is broken", written)
	}
	if k.Drained == nil || k.Drained.Governed > written/4 {
		t.Errorf("once its jobs stopped, the soak's stores held %+v bytes governed by retention after writing about %d: want at most a quarter", k.Drained, written)
	}
}

// TestBenchFleet runs the fleet rows small: one job of 12 chunks on one
// and on two worker processes sharing two slots, on a nats-server
// process. Each row finishes its job and reports the CPU and the
// deliveries it measured, and the bare loop beside it made the same calls
// per chunk.
func TestBenchFleet(t *testing.T) {
	t.Parallel()
	out := benchOutput(t, "--only", "fleet", "--fleet", "1,2", "--fleet-chunks", "12", "--fleet-concurrency", "2",
		"--nats-server", toolBinary(t, "nats-server"), "--report", "json", "--log-level", "error")
	var r struct {
		Fleet []struct {
			Processes   int     `json:"processes"`
			Concurrency int     `json:"concurrency_per_process"`
			Chunks      int     `json:"chunks"`
			WorkersCPU  float64 `json:"workers_cpu_seconds"`
			ServerCPU   float64 `json:"server_cpu_seconds"`
			PerChunk    float64 `json:"cpu_per_chunk_ms"`
			Delivered   float64 `json:"delivered_to_workers_per_chunk"`
			JobWrites   float64 `json:"job_writes_per_chunk"`
			Journal     float64 `json:"journal_writes_per_chunk"`
			Status      string  `json:"job_status"`
			Baseline    *struct {
				PerChunk  float64 `json:"cpu_per_chunk_ms"`
				Delivered float64 `json:"delivered_to_workers_per_chunk"`
				Calls     int     `json:"calls_per_chunk"`
			} `json:"baseline"`
		} `json:"fleet"`
		Skipped string `json:"fleet_skipped"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if len(r.Fleet) != 2 || r.Skipped != "" {
		t.Fatalf("fleet rows = %+v (skipped: %q); want two", r.Fleet, r.Skipped)
	}
	for i, f := range r.Fleet {
		if f.Processes != i+1 || f.Concurrency != 2/(i+1) || f.Chunks != 12 || f.Status != "done" ||
			f.WorkersCPU <= 0 || f.ServerCPU <= 0 || f.PerChunk <= 0 || f.Delivered <= 0 ||
			f.JobWrites <= 0 || f.Journal < 1 {
			t.Errorf("row %d = %+v; want %d processes of %d slots finishing 12 chunks, with CPU, deliveries and writes measured", i, f, i+1, 2/(i+1))
		}
		// The loop's calls are the job's journal rows per chunk; each
		// call's acknowledged row is one delivery, the chunk one more.
		if b := f.Baseline; b == nil || b.Calls != int(math.Round(f.Journal)) || b.PerChunk <= 0 || b.Delivered < float64(b.Calls+1) {
			t.Errorf("row %d: baseline %+v; want the job's %.0f calls per chunk in a bare loop, its CPU and at least a delivery per call and chunk", i, b, f.Journal)
		}
	}
}

// TestBenchPartitions runs the partitions rows small: 24 jobs of 4
// chunks on three nats-server processes, in one partition and in three,
// each partition led from its own node.
func TestBenchPartitions(t *testing.T) {
	t.Parallel()
	out := benchOutput(t, "--only", "partitions", "--chunks", "4", "--concurrency", "8",
		"--nats-server", toolBinary(t, "nats-server"), "--report", "json", "--log-level", "error")
	var r struct {
		Partitions []struct {
			Partitions  int       `json:"partitions"`
			Jobs        int       `json:"jobs"`
			PerPart     []int     `json:"jobs_per_partition"`
			CallsPerSec float64   `json:"calls_per_sec"`
			NodeCPU     []float64 `json:"node_cpu_seconds"`
			NodeShare   []float64 `json:"node_cpu_share"`
			Leaders     []string  `json:"leaders"`
		} `json:"partitions"`
		Skipped string `json:"partitions_skipped"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if len(r.Partitions) != 2 || r.Skipped != "" {
		t.Fatalf("partitions rows = %+v (skipped: %q); want two", r.Partitions, r.Skipped)
	}
	for i, p := range r.Partitions {
		n := []int{1, 3}[i]
		sum, share := 0, 0.0
		for _, k := range p.PerPart {
			sum += k
		}
		for _, s := range p.NodeShare {
			share += s
		}
		leaders := map[string]bool{}
		for _, l := range p.Leaders {
			leaders[l] = true
		}
		if p.Partitions != n || len(p.PerPart) != n || sum != p.Jobs || p.CallsPerSec <= 0 || len(p.NodeCPU) != 3 ||
			share < 0.99 || share > 1.01 || len(p.Leaders) != n || len(leaders) != n || leaders[""] {
			t.Errorf("row %d = %+v; want %d partitions, every job counted in one, each node's CPU measured, each partition led from its own node", i, p, n)
		}
	}
}

// TestBenchLimits runs the limits rows small: one chunk (116 model calls)
// on four worker processes against a provider admitting 600 requests a
// minute. Without a limit the calls fit the quota and none is refused;
// with one, the worker processes learn it from salvage_limits and pace
// their requests: none refused, never more than the quota in a minute,
// and the job finishes.
func TestBenchLimits(t *testing.T) {
	t.Parallel()
	out := benchOutput(t, "--only", "limits", "--limits-chunks", "1",
		"--nats-server", toolBinary(t, "nats-server"), "--report", "json", "--log-level", "error")
	var r struct {
		Limits []struct {
			Limited  bool    `json:"limit_declared"`
			Admitted int     `json:"admitted"`
			Refused  int     `json:"refused_429"`
			Most     int     `json:"most_sent_in_a_minute"`
			Wall     float64 `json:"wall_seconds"`
			Status   string  `json:"job_status"`
		} `json:"limits"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if len(r.Limits) != 2 || r.Limits[0].Limited || !r.Limits[1].Limited {
		t.Fatalf("limits rows = %+v; want one without a limit, then one with", r.Limits)
	}
	for _, l := range r.Limits {
		if l.Status != "done" || l.Admitted != 116 || l.Refused != 0 || l.Most > 600 {
			t.Errorf("row %+v; want the job done in 116 requests, none refused, at most 600 in a minute", l)
		}
	}
	// 116 requests at 10 a second, less the one each process may send
	// ahead: at least 11 s. Without the limit nothing holds them back.
	if l := r.Limits[1]; l.Wall < 10 {
		t.Errorf("with the limit the job took %.1f s: its 116 requests went faster than 600 a minute", l.Wall)
	}
}

// TestBenchTenants runs the tenants rows small: tenant a's job of 1,500
// chunks (time enough for b's, even on a loaded machine, when the
// windows alone share the slots) on two worker processes, tenant b's of 20 alone and beside it,
// with tenant a capped and with windows only. Both of b's jobs finish
// while a's runs (a's count of finished chunks grows meanwhile, and its
// job is cancelled after).
func TestBenchTenants(t *testing.T) {
	t.Parallel()
	// Warnings too: a failing row prints them (what its workers said).
	out, stderr := benchRun(t, "--only", "tenants", "--tenants-chunks", "1500",
		"--nats-server", toolBinary(t, "nats-server"), "--report", "json", "--log-level", "warn")
	var r struct {
		Tenants []struct {
			Cap        int     `json:"cap_chunks"`
			Alone      float64 `json:"alone_seconds"`
			Beside     float64 `json:"beside_seconds"`
			DoneBefore int     `json:"large_done_before"`
			DoneAfter  int     `json:"large_done_after"`
			Status     string  `json:"small_job_status"`
			// Where b's job beside a's waited, printed with a failing row.
			LastTaken         int     `json:"small_last_taken_chunk"`
			LastTakenSecs     float64 `json:"small_last_taken_seconds"`
			LastTakenDelivery uint64  `json:"small_last_taken_delivery"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if len(r.Tenants) != 2 || r.Tenants[0].Cap != 24 || r.Tenants[1].Cap != 0 {
		t.Fatalf("tenants rows = %+v; want tenant a capped at 24, then windows only", r.Tenants)
	}
	for _, row := range r.Tenants {
		if row.Status != "done" || row.Alone <= 0 || row.Beside <= 0 || row.DoneBefore < 16 || row.DoneAfter < row.DoneBefore || row.DoneAfter >= 1500 {
			t.Errorf("row %+v; want b's job done alone and beside a's, which ran on and was not finished\nthe bench's stderr:\n%s", row, stderr)
		}
	}
}

// benchOutput runs salvage bench with args and returns its stdout; when
// it fails the test fails with the end of its stderr, where the bench
// says why.
func benchOutput(t *testing.T, args ...string) []byte {
	t.Helper()
	out, _ := benchRun(t, args...)
	return out
}

// benchRun is benchOutput that also returns the bench's stderr (its
// last 8 KiB), for a test that fails on what the report says.
func benchRun(t *testing.T, args ...string) (stdout, stderr []byte) {
	t.Helper()
	var errBuf bytes.Buffer
	cmd := exec.Command(binary, append([]string{"bench"}, args...)...)
	demo.DieWithParent(cmd)
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	tail := errBuf.Bytes()[max(0, errBuf.Len()-8<<10):]
	if err != nil {
		t.Fatalf("salvage bench %s: %v\n%s", strings.Join(args, " "), err, tail)
	}
	return out, tail
}
