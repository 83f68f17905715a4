package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
)

// settledEnvelopes waits until job settled (salvagetest.Settled, with
// at least one envelope) and returns its envelopes as `salvage dlq ls
// --job` lists them.
func (c *cluster) settledEnvelopes(t *testing.T, job string) []kv.EnvelopeRecord {
	t.Helper()
	js, err := jetstream.New(salvagetest.Connect(t, c.url))
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Settled(t, js, job, 2*time.Minute, func(s salvagetest.Settlement) bool { return len(s.Envelopes) > 0 })
	code, stdout, stderr := run(t, "", "dlq", "ls", "--job", job, "--json", "--server", c.url)
	var recs []kv.EnvelopeRecord
	if code != 0 || jsonItems(stdout, &recs) != nil || len(recs) == 0 {
		t.Fatalf("dlq ls --job %s: %d %s %s", job, code, stdout, stderr)
	}
	for _, r := range recs {
		if !r.Final() {
			t.Fatalf("dlq ls lists envelope %s %s after the records settled", r.ID, r.Status)
		}
	}
	return recs
}

// TestCancelAndReplayFromTheCLI holds `salvage cancel` and `salvage dlq
// replay` to the sim's ledger: a job cancelled while its charges hang in
// the payment system leaves no charge, reservation or invoice standing
// unaccounted; a compensated order replayed after its fault is fixed runs
// fresh — a new charge, the old one refunded, no order done twice; and a
// replay that would leak is refused with exit 1.
func TestCancelAndReplayFromTheCLI(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.Config{Hang: 4 * time.Second, Rules: []sim.Rule{
		{System: "payments", Order: "o-cx1", Mode: "timeout-after", Times: 1},
		{System: "payments", Order: "o-cx2", Mode: "timeout-after", Times: 1},
		{System: "payments", Order: "o-cx3", Mode: "timeout-after", Times: 1},
		{System: "email", Order: "o-fix", Mode: "permanent"},
	}})
	c.worker(t, "w1", "--sim-timeout", "10s", "--concurrency", "4")
	up(t, "--server", c.url, "--role", "api")
	ctx := context.Background()

	// Cancel while the three charges hang, applied, in the payment system.
	cancelled := c.submit(t, "o-cx1", "o-cx2", "o-cx3")
	salvagetest.Eventually(t, time.Minute, func() bool {
		n := 0
		for _, o := range []string{"o-cx1", "o-cx2", "o-cx3"} {
			n += len(c.effects(t, o)["payments"])
		}
		return n == 3
	}, "the three charges to land")
	if code, stdout, errOut := run(t, "", "cancel", cancelled, "--server", c.url); code != 0 {
		t.Fatalf("salvage cancel: %d %s %s", code, stdout, errOut)
	}
	c.waitJob(t, cancelled, salvagetype.JobCancelled)
	recs := c.settledEnvelopes(t, cancelled)
	for _, r := range recs {
		if r.Stopped != salvagetype.StoppedCancelled || r.Status != salvagetype.EnvelopeAbandoned || len(r.Left) != 0 {
			t.Errorf("settlement %s: stopped %q, %s, left %v; want abandoned with every effect compensated", r.ID, r.Stopped, r.Status, r.Left)
		}
	}
	if len(recs) != 3 {
		t.Fatalf("%d settlement envelopes, want one per cancelled order", len(recs))
	}
	for _, o := range []string{"o-cx1", "o-cx2", "o-cx3"} {
		for sys, es := range c.effects(t, o) {
			for _, e := range es {
				if !e.Compensated || e.Applied != 1 || e.CompensationRequests < 1 {
					t.Errorf("%s %s of cancelled %s: applied %d, compensated %v", sys, e.ResourceID, o, e.Applied, e.Compensated)
				}
			}
		}
	}
	// A settlement cannot be replayed: the job was cancelled.
	if code, _, errOut := run(t, "", "dlq", "replay", recs[0].ID, "--server", c.url); code != 1 || !strings.Contains(errOut, "refused") {
		t.Errorf("dlq replay of a cancelled chunk's settlement: exit %d %s", code, errOut)
	}

	// An order whose email was refused: refunded, voided, released;
	// replayed once the mail server takes it, it runs fresh.
	fixed := c.submit(t, "o-fix")
	c.waitJob(t, fixed, salvagetype.JobIncomplete)
	rec := c.envelopeOf(t, fixed, 1)
	if rec.Status != salvagetype.EnvelopeAbandoned {
		t.Fatalf("envelope = %+v", rec)
	}
	findTheFailure(t, c.url, fixed, cancelled, rec)
	if err := c.sim.SetFaults(ctx, sim.Config{}); err != nil {
		t.Fatal(err)
	}
	if code, stdout, errOut := run(t, "", "dlq", "replay", rec.ID, "--server", c.url); code != 0 {
		t.Fatalf("dlq replay: %d %s %s", code, stdout, errOut)
	}
	c.waitJob(t, fixed, salvagetype.JobDone)
	cp, _, err := c.stores.Parts()[0].Checkpoints.Get(ctx, fixed, 1)
	if err != nil || cp.Epoch != 1 || cp.Status != salvagetype.ChunkDone {
		t.Fatalf("replayed chunk = %+v, %v; want done in epoch 1", cp, err)
	}
	e := c.effects(t, "o-fix")
	for _, sys := range []string{"wms", "erp", "payments"} {
		if len(e[sys]) != 2 || e[sys][0].Compensated == e[sys][1].Compensated {
			t.Errorf("%s for o-fix = %+v, want the first compensated and a fresh one standing", sys, e[sys])
		}
	}
	if len(e["email"]) != 1 || e["email"][0].Compensated {
		t.Errorf("email for o-fix = %+v, want one sent", e["email"])
	}
	l, err := c.sim.Ledger(ctx)
	if err != nil || l.Summary.DuplicateKeys != 0 || l.Summary.DuplicateOrders != 0 {
		t.Fatalf("ledger summary %+v, %v", l.Summary, err)
	}
	if code, stdout, _ := run(t, "", "dlq", "show", rec.ID, "--server", c.url); code != 0 || !strings.Contains(stdout, "fresh in a new epoch") {
		t.Errorf("dlq show does not say the replay ran fresh:\n%s", stdout)
	}

	// A job id names one input: the same id with another order is refused
	// at once, naming the id; the job keeps its order.
	other, _ := json.Marshal(map[string]any{"job_id": fixed, "input": map[string]any{"orders": []any{order("o-other")}}})
	if code, _, errOut := run(t, string(other), "submit", "order-fulfillment", "-", "--server", c.url); code != 1 || !strings.Contains(errOut, fixed) || !strings.Contains(errOut, "another input") {
		t.Errorf("salvage submit under a used job id: exit %d %s", code, errOut)
	}
	if e := c.effects(t, "o-other"); len(e) != 0 {
		t.Errorf("the refused job ran: %+v", e)
	}
}

// findTheFailure checks what an operator at 3 a.m. types to find a failed
// job and its envelope, and that a script's typo or out-of-range value
// fails instead of passing for success: failed is an incomplete job of one
// order whose envelope rec was abandoned; cancelled a cancelled job of
// three orders, each with a settlement envelope.
func findTheFailure(t *testing.T, url, failed, cancelled string, rec kv.EnvelopeRecord) {
	t.Helper()
	code, out, errOut := run(t, "", "status", failed, "--failed", "--server", url)
	if code != 0 || !strings.Contains(out, "chunks 1: 0 done, 1 dead-lettered, 0 cancelled, 0 held, 0 awaiting-approval, 0 paused") ||
		!strings.Contains(out, "\tdead-lettered\t") && !strings.Contains(out, " dead-lettered ") {
		t.Errorf("status --failed: %d %s\n%s", code, errOut, out)
	}
	var st struct {
		Chunks []struct {
			Chunk  int    `json:"chunk"`
			Status string `json:"status"`
		} `json:"chunks"`
	}
	code, out, _ = run(t, "", "status", cancelled, "--failed", "--json", "--server", url)
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Chunks) != 3 {
		t.Errorf("status --failed --json of a job whose three chunks were cancelled with settlements: %d\n%s", code, out)
	}
	jobsIn := func(statuses string) map[string]bool {
		code, out, errOut := run(t, "", "jobs", "--status", statuses, "--json", "--server", url)
		var js struct {
			Items []struct {
				ID string `json:"job_id"`
			} `json:"items"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &js) != nil {
			t.Fatalf("jobs --status %s: %d %s %s", statuses, code, out, errOut)
		}
		ids := map[string]bool{}
		for _, j := range js.Items {
			ids[j.ID] = true
		}
		return ids
	}
	if ids := jobsIn("incomplete"); !ids[failed] || ids[cancelled] {
		t.Errorf("jobs --status incomplete = %v", ids)
	}
	if ids := jobsIn("cancelled,incomplete"); !ids[failed] || !ids[cancelled] {
		t.Errorf("jobs --status cancelled,incomplete = %v", ids)
	}
	if ids := jobsIn("done"); ids[failed] || ids[cancelled] {
		t.Errorf("jobs --status done = %v", ids)
	}
	code, out, _ = run(t, "", "dlq", "ls", "--status", "abandoned,resolved", "--json", "--server", url)
	var recs []kv.EnvelopeRecord
	if code != 0 || jsonItems(out, &recs) != nil || len(recs) != 4 || recs[len(recs)-1].ID != rec.ID {
		t.Errorf("dlq ls --status abandoned,resolved: %d, %d envelopes, want the 3 settlements and %s last (oldest first)\n%s", code, len(recs), rec.ID, out)
	}
	code, out, _ = run(t, "", "dlq", "show", rec.ID, "--server", url)
	if code != 0 || strings.Contains(out, "agent ,") || strings.Contains(out, "(tool )") {
		t.Errorf("dlq show prints empty names:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "lst"}, `did you mean ls`},
		{[]string{"nothing"}, `unknown command "nothing" for "salvage"`},
		{[]string{"trace", failed, "--chunk", "0"}, "numbered from 1"},
		{[]string{"jobs", "--limit", "0"}, "--limit 0"},
		{[]string{"jobs", "--status", "finished"}, `--status "finished"`},
		{[]string{"dlq", "ls", "--status", "abandoned,abandonned"}, "400"},
	} {
		code, out, errOut := run(t, "", append(tc.args, "--server", url)...)
		if code == 0 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "salvage: salvage:") || out != "" {
			t.Errorf("salvage %v: exit %d, stdout %q, stderr %q; want a non-zero exit saying %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
