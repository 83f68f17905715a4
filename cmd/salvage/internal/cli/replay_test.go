package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// natsBinary is the pinned natscli v0.5.0 that `make tools` installs.
func natsBinary(t *testing.T) string {
	t.Helper()
	return toolBinary(t, "nats")
}

// toolBinary is ./bin/name, installed pinned by `make tools` (make test
// installs what the tests use).
func toolBinary(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is not at %s: run `make tools` (make test does)", name, bin)
	}
	return bin
}

func natsCmd(t *testing.T, url string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(natsBinary(t), append([]string{"--server", url}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nats %v: %v\n%s%s", args, err, out, stderr.String())
	}
	return out
}

// TestReplayWithTheNatsCLI: a job submitted with `nats pub` leaves two
// chunks in the DLQ (no orchestrator runs); they are found with `nats sub
// --stream SALVAGE_DLQ --all -T --raw` and replayed both ways — `nats req
// salvage.api.dlq.replay` and a hand `nats pub` with Salvage-Replay-Of —
// and the job completes with no side effect repeated.
func TestReplayWithTheNatsCLI(t *testing.T) {
	t.Parallel()
	s := startSim(t)
	if err := s.SetFaults(context.Background(), sim.Config{Rules: []sim.Rule{
		// CRM fails through both tiers, until both chunks are in the DLQ.
		{System: "crm", Order: "o-r1", Mode: "error"},
		{System: "crm", Order: "o-r2", Mode: "error"},
	}}); err != nil {
		t.Fatal(err)
	}
	url, _ := up(t, append([]string{"--role", "worker,dead-letter,api", "--sim", s.BaseURL}, fastTiers...)...)

	job := "01JREPLAYTEST0000000000000"
	body, _ := json.Marshal(map[string]any{"job_id": job, "input": orders.Input{Orders: []orders.Order{order("o-r1"), order("o-r2")}}})
	natsCmd(t, url, "pub", salvage.JobSubject(orders.Name), string(body))

	// Both chunks end in the DLQ; find them the way an operator would.
	var envs []salvagetype.Envelope
	salvagetest.Eventually(t, 60*time.Second, func() bool {
		out := natsCmdQuiet(t, url, "sub", "--stream", streams.DLQ, "--all", "-T", "--raw", "salvage.dlq.>")
		envs = envs[:0]
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e salvagetype.Envelope
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.ID != "" {
				envs = append(envs, e)
			}
		}
		return len(envs) == 2
	}, "two envelopes in SALVAGE_DLQ")
	for _, e := range envs {
		// A 503 may come after the CRM applied the update: its outcome
		// is unknown until the CRM is asked (no orchestrator runs here).
		if e.Category != salvagetype.CategoryToolTimeout || e.Job != job || len(e.InFlightEntries) != 1 {
			t.Fatalf("envelope = %+v", e)
		}
	}

	// The CRM works again: ended by the event, not after a count of
	// requests a stalled worker's takeover could outrun.
	for _, o := range []string{"o-r1", "o-r2"} {
		if err := s.StopRules(context.Background(), "crm", o); err != nil {
			t.Fatal(err)
		}
	}

	// Way 1: the API, through `nats req`.
	out := natsCmd(t, url, "req", "--raw", "salvage.api.dlq.replay", `{"envelope_id":"`+envs[0].ID+`"}`)
	var rec kv.EnvelopeRecord
	if err := json.Unmarshal(out, &rec); err != nil || rec.Status != salvagetype.EnvelopeRecovering {
		t.Fatalf("replay reply %s: %v", out, err)
	}
	// Way 2: by hand, the original subject and data with Salvage-Replay-Of.
	natsCmd(t, url, "pub", envs[1].Original.Subject, string(envs[1].Original.Data), "-H", salvagetype.HeaderReplayOf+":"+envs[1].ID)

	nc := salvagetest.Connect(t, url)
	js, _ := jetstream.New(nc)
	stores, err := kv.Open(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, 60*time.Second, func() bool {
		j, err := stores.Jobs.Get(context.Background(), job)
		return err == nil && j.Status == salvagetype.JobDone
	}, "the job to complete after the replays")
	for _, e := range envs {
		// Each chunk's run resolves its envelope before it counts itself
		// in the job; one run of many was seen with the envelope still
		// recovering when the job read done, so this waits a little.
		var rec kv.EnvelopeRecord
		salvagetest.Eventually(t, time.Minute, func() bool {
			rec, _, err = stores.Envelopes.Get(context.Background(), e.ID)
			return err == nil && rec.Status == salvagetype.EnvelopeResolved
		}, "envelope %s resolved: %+v", e.ID, &rec)
	}
	// Replaying a resolved envelope again does no harm: a clear error.
	cmd := exec.Command(natsBinary(t), "--server", url, "req", "salvage.api.dlq.replay", `{"envelope_id":"`+envs[0].ID+`"}`)
	again, _ := cmd.CombinedOutput()
	if !strings.Contains(string(again), "409") {
		t.Errorf("second replay answered %s, want a 409 already resolved", again)
	}
	if _, err := stores.Jobs.Get(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	l, err := s.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Effects {
		if e.Requests != 1 || e.Applied != 1 {
			t.Errorf("effect %s/%s for %s requested %d times: the replay repeated it", e.System, e.Op, e.Order, e.Requests)
		}
	}
	if l.Summary.Effects != 10 || l.Summary.DuplicateOrders != 0 {
		t.Errorf("ledger = %+v, want 5 effects per order and no duplicates", l.Summary)
	}

	// The job's timeline shows each chunk's calls and where it broke.
	code, stdout, errOut := run(t, "", "trace", job, "--json", "--server", url)
	var tr salvage.Trace
	if code != 0 || json.Unmarshal([]byte(stdout), &tr) != nil || len(tr.Chunks) != 2 {
		t.Fatalf("salvage trace: %d %s %s", code, stdout, errOut)
	}
	for _, c := range tr.Chunks {
		if len(c.Calls) != 6 || c.Envelope == "" || c.Error == "" || tr.TraceID == "" {
			t.Errorf("trace of chunk %d: %d calls, envelope %q, broke %q, trace %q", c.Chunk, len(c.Calls), c.Envelope, c.Error, tr.TraceID)
		}
		if crm := c.Calls[5]; crm.Tool != orders.ToolCRM || crm.Status != salvage.CallSucceeded || crm.TraceID != tr.TraceID {
			t.Errorf("chunk %d's CRM call = %+v, want it to succeed after the replay, under the job's trace", c.Chunk, crm)
		}
		// The failures before the replay are still there.
		// A 503 of a side effect leaves its outcome unknown (UNKNOWN),
		// verified before the call is made again.
		if crm := c.Calls[5]; len(crm.History) == 0 || crm.History[0].Status != salvage.CallUnknown || crm.History[0].ErrorStatus != 503 {
			t.Errorf("chunk %d's CRM call lost its failures to the replay: history %+v", c.Chunk, crm.History)
		}
	}
	if code, stdout, _ = run(t, "", "trace", job, "--server", url); code != 0 || !strings.Contains(stdout, "stage 5") {
		t.Errorf("salvage trace text:\n%s", stdout)
	}
	// One chunk, and in it only what failed: the CRM call, with its
	// earlier failures.
	code, stdout, errOut = run(t, "", "trace", job, "--chunk", "2", "--failed", "--json", "--server", url)
	var one salvage.Trace
	if code != 0 || json.Unmarshal([]byte(stdout), &one) != nil || len(one.Chunks) != 1 || one.Chunks[0].Chunk != 2 ||
		len(one.Chunks[0].Calls) != 1 || one.Chunks[0].Calls[0].Tool != orders.ToolCRM {
		t.Errorf("trace --chunk 2 --failed: %d %s %s", code, stdout, errOut)
	}
	if code, _, errOut := run(t, "", "trace", job, "--chunk", "9", "--server", url); code == 0 || !strings.Contains(errOut, "no chunk 9") {
		t.Errorf("trace --chunk 9: %d %s", code, errOut)
	}

	// The micro service is visible to the stock CLI, with its endpoints.
	info := natsCmd(t, url, "micro", "info", "salvage")
	for _, ep := range []string{"salvage.api.jobs.submit", "salvage.api.dlq.replay", "salvage.api.dlq.ack"} {
		if !strings.Contains(string(info), ep) {
			t.Errorf("nats micro info lacks %s:\n%s", ep, info)
		}
	}
	// Unknown envelopes and malformed requests get their codes.
	for req, code := range map[string]string{`{"envelope_id":"NOPE"}`: "404", `{"envelope_id":`: "400", `{"envelope_id":"a.b"}`: "400", `{"envelope_id":"a:b"}`: "400"} {
		out, _ := exec.Command(natsBinary(t), "--server", url, "req", "salvage.api.dlq.show", req).CombinedOutput()
		if !strings.Contains(string(out), code) {
			t.Errorf("dlq.show %s answered %s, want %s", req, out, code)
		}
	}
	// Ids that are subject tokens but not KV keys, or reserved, are a 400
	// everywhere (they used to be accepted, then loop on "invalid key").
	for subject, req := range map[string]string{
		"salvage.api.jobs.submit": `{"pipeline":"order-fulfillment","job_id":"job#1","input":{}}`,
		"salvage.api.jobs.status": `{"job_id":"a:b"}`,
		"salvage.api.jobs.cancel": `{"job_id":"jöb"}`,
	} {
		out, _ := exec.Command(natsBinary(t), "--server", url, "req", subject, req).CombinedOutput()
		if !strings.Contains(string(out), "400") {
			t.Errorf("%s %s answered %s, want 400", subject, req, out)
		}
	}
	if out, _ := exec.Command(natsBinary(t), "--server", url, "req", "salvage.api.jobs.submit", `{"pipeline":"order-fulfillment","job_id":"rejected","input":{}}`).CombinedOutput(); !strings.Contains(string(out), "reserved") {
		t.Errorf("a reserved job id was accepted: %s", out)
	}
	// Jobs through the API: submit replies with the job id, status and
	// cancel answer for it, an unknown one is a 404.
	out = natsCmd(t, url, "req", "--raw", "salvage.api.jobs.submit",
		`{"pipeline":"order-fulfillment","input":{"order_id":"o-api","customer":"c","items":[{"sku":"s","qty":1,"price":3}],"amount":3,"payment_method":"card"}}`)
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(out, &sub); err != nil || sub.JobID == "" {
		t.Fatalf("jobs.submit answered %s", out)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		out := natsCmdQuiet(t, url, "req", "--raw", "salvage.api.jobs.status", `{"job_id":"`+sub.JobID+`"}`)
		var st struct {
			Job kv.Job `json:"job"`
		}
		return json.Unmarshal(out, &st) == nil && st.Job.Status == salvagetype.JobDone
	}, "the API-submitted job to finish")
	if out, _ := exec.Command(natsBinary(t), "--server", url, "req", "salvage.api.jobs.status", `{"job_id":"01JNOSUCHJOB0000000000000"}`).CombinedOutput(); !strings.Contains(string(out), "404") {
		t.Errorf("status of an unknown job answered %s", out)
	}

	// The salvage CLI lists the same envelopes, and filters them.
	for args, want := range map[string]int{"--status resolved": 2, "--status open": 0, "--category TOOL_TIMEOUT": 2, "--job nope": 0, "--min-age 1h": 0} {
		code, stdout, errOut := run(t, "", append([]string{"dlq", "ls", "--json", "--server", url}, strings.Fields(args)...)...)
		var recs []kv.EnvelopeRecord
		if code != 0 || jsonItems(stdout, &recs) != nil || len(recs) != want {
			t.Errorf("dlq ls %s: %d %d envelopes %s, want %d", args, code, len(recs), errOut, want)
		}
	}
	if code, stdout, _ := run(t, "", "dlq", "show", envs[0].ID, "--server", url); code != 0 || !strings.Contains(stdout, "update-crm") || !strings.Contains(stdout, "earlier") || !strings.Contains(stdout, "UNKNOWN") {
		t.Errorf("dlq show of a replayed envelope should still show the failure:\n%s", stdout)
	} else if strings.Contains(stdout, "reserve-inventory") || !strings.Contains(stdout, "are folded") {
		t.Errorf("dlq show should fold the calls that simply succeeded:\n%s", stdout)
	}
	if code, stdout, _ := run(t, "", "dlq", "show", envs[0].ID, "--all", "--server", url); code != 0 || !strings.Contains(stdout, "reserve-inventory") {
		t.Errorf("dlq show --all should list every row:\n%s", stdout)
	}
	if code, _, errOut := run(t, "", "dlq", "replay", envs[0].ID, "--server", url); code != 1 || !strings.Contains(errOut, "409") {
		t.Errorf("dlq replay of a resolved envelope: %d %s", code, errOut)
	}
	code, stdout, errOut = run(t, "", "dlq", "ls", "--json", "--server", url)
	var recs []kv.EnvelopeRecord
	if code != 0 || jsonItems(stdout, &recs) != nil || len(recs) != 2 {
		t.Errorf("salvage dlq ls: %d %s %s", code, stdout, errOut)
	}
	// A filter naming a status or category that does not exist is refused,
	// not answered with nothing.
	for _, args := range [][]string{{"--status", "resolvd"}, {"--category", "TIMEOUT"}} {
		if code, _, errOut := run(t, "", append([]string{"dlq", "ls", "--server", url}, args...)...); code == 0 || !strings.Contains(errOut, "400") {
			t.Errorf("dlq ls %v: exit %d %s; want a 400", args, code, errOut)
		}
	}
	// Bulk: a dry run counts, the real run acknowledges both, a second
	// finds them acknowledged; the micro service answers the same.
	if code, stdout, errOut := run(t, "", "dlq", "bulk", "ack", "--category", "TOOL_TIMEOUT", "--dry-run", "--server", url); code != 0 || !strings.Contains(stdout, "2 matched: 2 would be acknowledged") {
		t.Errorf("dlq bulk ack --dry-run: %d %s %s", code, stdout, errOut)
	}
	if code, stdout, errOut := run(t, "", "dlq", "bulk", "ack", "--category", "TOOL_TIMEOUT", "--server", url); code != 0 || !strings.Contains(stdout, "2 matched: 2 acknowledged") {
		t.Errorf("dlq bulk ack: %d %s %s", code, stdout, errOut)
	}
	var res salvage.BulkResult
	if out := natsCmd(t, url, "req", "--raw", "salvage.api.dlq.bulk", `{"action":"ack","category":"TOOL_TIMEOUT"}`); json.Unmarshal(out, &res) != nil || res.Matched != 2 || res.Acted != 0 || res.Unchanged != 2 {
		t.Errorf("salvage.api.dlq.bulk answered %s", out)
	}
	if code, _, errOut := run(t, "", "dlq", "bulk", "replay", "--server", url); code == 0 || !strings.Contains(errOut, "give a filter") {
		t.Errorf("dlq bulk without a filter: %d %s", code, errOut)
	}
}

// natsCmdQuiet runs the nats CLI and returns its stdout, errors or not.
func natsCmdQuiet(t *testing.T, url string, args ...string) []byte {
	out, _ := exec.Command(natsBinary(t), append([]string{"--server", url}, args...)...).Output()
	return out
}

// natsPubStdin publishes body (too long for an argument) with `nats pub
// --force-stdin`.
func natsPubStdin(t *testing.T, url, subject string, body []byte) {
	t.Helper()
	cmd := exec.Command(natsBinary(t), "--server", url, "pub", subject, "--force-stdin")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats pub %s: %v\n%s", subject, err, out)
	}
}

// TestHostileInputWithTheNatsCLI replays the reports: jobs published with
// the stock nats CLI that used to leave half-made jobs, unsendable
// rejections retried forever, unbounded jobs and unanswerable status
// requests.
func TestHostileInputWithTheNatsCLI(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--max-chunks", "300", "--model-latency", "20ms")
	nc := salvagetest.Connect(t, url)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	rejections := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("salvage.events.rejected.>", rejections)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = nc.Flush()
	expect := func(reason salvagetype.RejectReason) salvagetype.Rejection {
		t.Helper()
		select {
		case m := <-rejections:
			var r salvagetype.Rejection
			if err := json.Unmarshal(m.Data, &r); err != nil || r.Reason != reason || len(m.Data) > 16<<10 {
				t.Fatalf("rejection on %s (%d bytes): %+v %v; want a bounded %s", m.Subject, len(m.Data), r, err, reason)
			}
			return r
		case <-time.After(time.Minute):
			t.Fatalf("no %s rejection", reason)
		}
		return salvagetype.Rejection{}
	}
	lt := strings.Repeat("<", 200_000)

	// One paragraph of 200,000 '<': valid, but its chunk is 1.2 MB once
	// JSON-escaped. Rejected whole: no record, no chunk.
	body := []byte(`{"input": {"text": "Clause 1\n\n` + lt + `"}}`)
	natsPubStdin(t, url, "salvage.jobs.contract-review", body)
	expect(salvagetype.RejectOversizedChunk)
	// A malformed body of the same: its rejection is a prefix and a hash.
	natsPubStdin(t, url, "salvage.jobs.contract-review", []byte(lt))
	if r := expect(salvagetype.RejectMalformedJSON); r.Size != len(lt) || !r.DataTruncated {
		t.Errorf("malformed rejection = size %d truncated %v", r.Size, r.DataTruncated)
	}
	// More chunks than the pipeline allows.
	body, _ = json.Marshal(map[string]any{"input": contractreview.Input{Text: contractreview.Contract(301, 1)}})
	natsPubStdin(t, url, "salvage.jobs.contract-review", body)
	expect(salvagetype.RejectTooManyChunks)
	stores, err := kv.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if jobs, _ := stores.Jobs.List(ctx); len(jobs) != 0 {
		t.Fatalf("rejected jobs left %d records", len(jobs))
	}
	for _, name := range []string{streams.Jobs, streams.Chunks, streams.Backlog} {
		salvagetest.Eventually(t, time.Minute, func() bool {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return false
			}
			info, err := s.Info(ctx)
			return err == nil && info.State.Msgs == 0
		}, "%s empty after the rejections", name)
	}

	// A 300-chunk job: its status comes in pages, and cancelling it ends
	// it at once.
	job := "01JHOSTILE0000000000000000"
	body, _ = json.Marshal(map[string]any{"job_id": job, "input": contractreview.Input{Text: contractreview.Contract(300, 2)}})
	natsPubStdin(t, url, "salvage.jobs.contract-review", body)
	var st struct {
		Job        kv.Job          `json:"job"`
		Chunks     []kv.Checkpoint `json:"chunks"`
		NextOffset int             `json:"next_offset"`
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		out := natsCmdQuiet(t, url, "req", "--raw", "salvage.api.jobs.status", `{"job_id":"`+job+`","offset":100}`)
		return json.Unmarshal(out, &st) == nil && st.Job.Chunks == 300
	}, "the big job's status")
	if len(st.Chunks) != 100 || st.Chunks[0].Chunk != 101 || st.NextOffset != 200 || st.Job.Window != 16 {
		t.Errorf("status page: %d chunks from %d, next %d, window %d", len(st.Chunks), st.Chunks[0].Chunk, st.NextOffset, st.Job.Window)
	}
	if code, out, errOut := run(t, "", "cancel", job, "--server", url); code != 0 {
		t.Fatalf("cancel: %s %s", out, errOut)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		j, err := stores.Jobs.Get(ctx, job)
		return err == nil && j.Status == salvagetype.JobCancelled
	}, "the cancelled job to settle")
	j, _ := stores.Jobs.Get(ctx, job)
	if j.Summary.Done+j.Summary.Cancelled != 300 || j.Summary.Cancelled < 250 {
		t.Errorf("cancelled job summary = %+v", j.Summary)
	}
	if code, out, _ := run(t, "", "status", job, "--server", url); code != 0 || !strings.Contains(out, "cancelled-at-stage-0") {
		t.Errorf("status of the cancelled job:\n%.2000s", out)
	}
}
