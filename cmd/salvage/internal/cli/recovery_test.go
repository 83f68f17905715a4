package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// startSim runs `salvage sim` as a process and returns a client for it.
func startSim(t *testing.T) *sim.Client {
	t.Helper()
	cmd := exec.Command(binary, "sim", "--listen", "127.0.0.1:0", "--model-latency", "1ms")
	demo.DieWithParent(cmd)
	return &sim.Client{BaseURL: startPrinting(t, cmd, "SIM_URL="), Timeout: 5 * time.Second}
}

type cluster struct {
	url    string
	sim    *sim.Client
	js     jetstream.JetStream
	stores *kv.Stores
}

// fastTiers speed up tiers 1 and 2. These tests drive the DLQ path with
// per-order 503s, which a circuit breaker would rightly take for an
// outage and hold instead: the breaker is out of their way (its own
// tests are in breaker_test.go).
var fastTiers = []string{"--ack-wait", "2s", "--retry-base", "10ms", "--retry-max", "40ms", "--sweep-interval", "1s", "--cool-down", "1s",
	"--breaker-failures", "1000000"}

func startCluster(t *testing.T, faults sim.Config) *cluster {
	t.Helper()
	s := startSim(t)
	if err := s.SetFaults(context.Background(), faults); err != nil {
		t.Fatal(err)
	}
	url, _ := up(t, append([]string{"--role", "dead-letter,recovery", "--sim", s.BaseURL}, fastTiers...)...)
	// A second orchestrator on the same DLQ.
	up(t, append([]string{"--server", url, "--role", "recovery", "--sim", s.BaseURL}, fastTiers...)...)
	nc := salvagetest.Connect(t, url)
	js, _ := jetstream.New(nc)
	stores, err := kv.Open(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{url: url, sim: s, js: js, stores: stores}
}

func (c *cluster) worker(t *testing.T, id string, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"--server", c.url, "--role", "worker", "--worker-id", id, "--sim", c.sim.BaseURL}, fastTiers...)
	_, cmd := up(t, append(args, extra...)...)
	return cmd
}

func order(id string) orders.Order {
	return orders.Order{ID: id, Customer: "c-" + id, Email: id + "@example.test", Amount: 42.5, PaymentMethod: "card",
		Items: []orders.Item{{SKU: "sku-1", Qty: 2, Price: 21.25}}}
}

func (c *cluster) submit(t *testing.T, ids ...string) string {
	t.Helper()
	var list []orders.Order
	for _, id := range ids {
		list = append(list, order(id))
	}
	job := ulid.Make().String()
	body, _ := json.Marshal(map[string]any{"job_id": job, "input": orders.Input{Orders: list}})
	if _, err := c.js.Publish(context.Background(), salvage.JobSubject(orders.Name), body); err != nil {
		t.Fatal(err)
	}
	return job
}

func (c *cluster) waitJob(t *testing.T, job string, statuses ...salvagetype.JobStatus) kv.Job {
	t.Helper()
	var j kv.Job
	salvagetest.Eventually(t, 60*time.Second, func() bool {
		var err error
		j, err = c.stores.Jobs.Get(context.Background(), job)
		for _, s := range statuses {
			if err == nil && j.Status == s {
				return true
			}
		}
		return false
	}, "job %s to be %v (last %+v)", job, statuses, &j)
	return j
}

// stopRulesAfter stops the sim's fault rules for order once chunk 1 of
// job was dead-lettered for the n-th time (its checkpoint counts them):
// every delivery until then met the fault, whatever a loaded machine
// made of the timing. It watches from a goroutine, ended with the test.
func (c *cluster) stopRulesAfter(t *testing.T, job string, n int, order string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for dead := 0; dead < n; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if cp, _, err := c.stores.Parts()[0].Checkpoints.Get(ctx, job, 1); err == nil {
				dead = cp.DeadLetters
			}
		}
		if err := c.sim.StopRules(ctx, "crm", order); err != nil && ctx.Err() == nil {
			t.Errorf("stop the crm fault of %s: %v", order, err)
		}
	}()
}

// effects returns the ledger's effects of one order, by system.
func (c *cluster) effects(t *testing.T, orderID string) map[string][]sim.Effect {
	t.Helper()
	l, err := c.sim.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]sim.Effect{}
	for _, e := range l.Effects {
		if e.Order == orderID {
			out[e.System] = append(out[e.System], e)
		}
	}
	return out
}

func (c *cluster) envelopeOf(t *testing.T, job string, chunk int) kv.EnvelopeRecord {
	t.Helper()
	var rec kv.EnvelopeRecord
	salvagetest.Eventually(t, time.Minute, func() bool {
		cp, _, err := c.stores.Parts()[0].Checkpoints.Get(context.Background(), job, chunk)
		if err != nil || cp.Envelope == "" {
			return false
		}
		rec, _, err = c.stores.Envelopes.Get(context.Background(), cp.Envelope)
		return err == nil && rec.Final()
	}, "a final envelope for %s.%d", job, chunk)
	return rec
}

// TestOrderRecovery runs the journal and recovery scenarios against a real
// `salvage sim` process, a `salvage up` with two orchestrators, and worker
// processes, one of them SIGKILLed after a charge took effect.
func TestOrderRecovery(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.Config{Hang: 30 * time.Second, Rules: []sim.Rule{
		{System: "payments", Order: "o-crash", Mode: "timeout-after", Times: 1},
		{System: "email", Order: "o-comp", Mode: "permanent"},
		{System: "email", Order: "o-stuck", Mode: "permanent"},
		{System: "payments", Order: "o-stuck", Mode: "compensation-fails"},
		// Until the test stops them: o-res's once its chunk was dead-lettered,
		// o-twice's once its first recovery failed too. A count of requests
		// (12, 24) stood for whole rounds of deliveries, until a loaded
		// machine took a stalled worker's chunk over and a round spent more.
		{System: "crm", Order: "o-res", Mode: "error"},
		{System: "crm", Order: "o-twice", Mode: "error"},
		{System: "payments", Order: "o-after", Mode: "timeout-after", Times: 1},
		{System: "payments", Order: "o-before", Mode: "timeout-before", Times: 1},
		{System: "email", Order: "o-many-1", Mode: "permanent"},
		{System: "email", Order: "o-many-2", Mode: "permanent"},
		{System: "email", Order: "o-many-3", Mode: "permanent"},
		{System: "email", Order: "o-many-4", Mode: "permanent"},
	}})

	// A worker whose sim calls wait long enough to be killed mid-charge.
	victim := c.worker(t, "victim", "--sim-timeout", "25s")
	crashJob := c.submit(t, "o-crash")
	salvagetest.Eventually(t, time.Minute, func() bool { return len(c.effects(t, "o-crash")["payments"]) == 1 }, "the charge to take effect")
	row := chargeRow(t, c, crashJob, 1)
	if row.Status != salvagetype.CallInitiated {
		t.Fatalf("charge row is %s before the kill, want INITIATED", row.Status)
	}
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	c.worker(t, "w1")
	c.worker(t, "w2")
	compJob := c.submit(t, "o-comp")
	stuckJob := c.submit(t, "o-stuck")
	resJob := c.submit(t, "o-res")
	twiceJob := c.submit(t, "o-twice")
	c.stopRulesAfter(t, resJob, 1, "o-res")
	c.stopRulesAfter(t, twiceJob, 2, "o-twice")
	timeoutJob := c.submit(t, "o-after", "o-before")
	manyJob := c.submit(t, "o-many-1", "o-many-2", "o-many-3", "o-many-4")

	t.Run("killed after the charge: one charge, order completes", func(t *testing.T) {
		c.waitJob(t, crashJob, salvagetype.JobDone)
		e := c.effects(t, "o-crash")
		for _, sys := range []string{"wms", "erp", "payments", "email", "crm"} {
			if len(e[sys]) != 1 || e[sys][0].Applied != 1 || e[sys][0].Compensated {
				t.Errorf("%s effects for o-crash = %+v, want exactly one standing", sys, e[sys])
			}
		}
		if e["payments"][0].Requests != 1 {
			t.Errorf("the charge was requested %d times: the resume should verify, not repeat", e["payments"][0].Requests)
		}
		if row := chargeRow(t, c, crashJob, 1); row.Status != salvagetype.CallSucceeded || !row.Verified {
			t.Errorf("charge row after resume = %+v, want SUCCEEDED and verified", row)
		}
		// The trace explains the gap: the victim's delivery, then another
		// worker's, redelivered after the victim stopped answering.
		code, out, errOut := run(t, "", "trace", crashJob, "--server", c.url)
		// A survivor takes it over once the victim's lease lapses, or
		// takes the redelivery, whichever comes first.
		// (A reaper's hand-back that met AckWait's redelivery costs one
		// more delivery: the later one explains itself the same way.)
		redelivered := regexp.MustCompile(`delivery \d taken by w`).MatchString(out) && strings.Contains(out, "ended without a result")
		takenOver := strings.Contains(out, " taken over by w") && strings.Contains(out, "lease lapsed")
		if code != 0 || !strings.Contains(out, "delivery 1 taken by victim") || !(redelivered || takenOver) || !strings.Contains(out, "done") ||
			!strings.Contains(out, "verified: payments said an earlier attempt had taken effect") {
			t.Errorf("salvage trace of the killed chunk does not explain the redelivery: %d %s\n%s", code, errOut, out)
		}
	})

	t.Run("permanent failure at email: refund, void, release in that order", func(t *testing.T) {
		c.waitJob(t, compJob, salvagetype.JobIncomplete)
		rec := c.envelopeOf(t, compJob, 1)
		if rec.Status != salvagetype.EnvelopeAbandoned || rec.Category != salvagetype.CategoryPartialExecution {
			t.Fatalf("envelope = %+v", rec)
		}
		e := c.effects(t, "o-comp")
		var undone []sim.Effect
		for _, sys := range []string{"wms", "erp", "payments"} {
			if len(e[sys]) != 1 || !e[sys][0].Compensated || e[sys][0].CompensationRequests != 1 {
				t.Fatalf("%s for o-comp = %+v, want compensated once", sys, e[sys])
			}
			undone = append(undone, e[sys][0])
		}
		if len(e["email"])+len(e["crm"]) != 0 {
			t.Fatalf("email/crm effects for o-comp: %+v", e)
		}
		sort.Slice(undone, func(i, j int) bool { return undone[i].CompensatedAt.Before(undone[j].CompensatedAt) })
		if got := []string{undone[0].System, undone[1].System, undone[2].System}; strings.Join(got, ",") != "payments,erp,wms" {
			t.Fatalf("compensation order %v, want refund, void, release", got)
		}
		if n := countNotes(rec.Notes, "compensated "); n != 3 {
			t.Fatalf("envelope notes record %d compensations, want 3: %v", n, rec.Notes)
		}
		// The trace shows each compensation in the chunk's timeline,
		// newest effect first.
		code, out, errOut := run(t, "", "trace", compJob, "--server", c.url)
		refund, void := strings.Index(out, "compensated: refund-payment undid charge-payment"), strings.Index(out, "compensated: void-invoice undid create-invoice")
		if code != 0 || refund < 0 || void < refund || !strings.Contains(out, "compensated: release-inventory undid reserve-inventory") ||
			!strings.Contains(out, "dead-lettered after 1 deliveries") {
			t.Errorf("salvage trace of the compensated chunk: %d %s\n%s", code, errOut, out)
		}
	})

	t.Run("a compensation that fails escalates and names what is left", func(t *testing.T) {
		c.waitJob(t, stuckJob, salvagetype.JobIncomplete)
		rec := c.envelopeOf(t, stuckJob, 1)
		if rec.Status != salvagetype.EnvelopeEscalated || len(rec.Left) != 3 || rec.Left[0].Tool != orders.ToolCharge || rec.Left[0].System != "payments" || rec.Left[0].ResourceID == "" {
			t.Fatalf("envelope = %+v, want escalated with charge, invoice, reservation left", rec)
		}
		if row := chargeRow(t, c, stuckJob, 1); row.Status != salvagetype.CallSucceeded {
			t.Fatalf("charge row = %s, want SUCCEEDED: it was not refunded", row.Status)
		}
		if e := c.effects(t, "o-stuck"); len(e["payments"]) != 1 || e["payments"][0].Compensated {
			t.Fatalf("ledger for o-stuck = %+v", e)
		}
		s, _ := c.js.Stream(context.Background(), streams.Events)
		m, err := s.GetLastMsgForSubject(context.Background(), streams.EscalationSubject(salvagetype.CategoryPartialExecution))
		if err != nil || !strings.Contains(string(m.Data), rec.ID) {
			t.Fatalf("no escalation event for %s: %v", rec.ID, err)
		}
	})

	t.Run("resume after an outage skips every call that already succeeded", func(t *testing.T) {
		c.waitJob(t, resJob, salvagetype.JobDone)
		e := c.effects(t, "o-res")
		for _, sys := range []string{"wms", "erp", "payments", "email", "crm"} {
			if len(e[sys]) != 1 || e[sys][0].Requests != 1 {
				t.Errorf("%s for o-res = %+v, want one effect requested once", sys, e[sys])
			}
		}
		rec := c.envelopeOf(t, resJob, 1)
		if rec.Status != salvagetype.EnvelopeResolved || rec.Category != salvagetype.CategoryExternalSystemDown {
			t.Errorf("envelope = %+v, want a resolved EXTERNAL_SYSTEM_DOWN", rec)
		}
	})

	t.Run("a recovery that fails again: the first envelope is superseded, the chunk still completes", func(t *testing.T) {
		c.waitJob(t, twiceJob, salvagetype.JobDone)
		cp, _, err := c.stores.Parts()[0].Checkpoints.Get(context.Background(), twiceJob, 1)
		// Two, unless the fault was stopped after the second recovery's
		// deliveries had all failed too (a third then finished it).
		if err != nil || cp.Recoveries < 2 {
			t.Fatalf("checkpoint = %+v, %v; want two recoveries at least", cp, err)
		}
		// The job counts the chunk before its envelope settles.
		var mine []kv.EnvelopeRecord
		salvagetest.Eventually(t, time.Minute, func() bool {
			recs, _ := c.stores.Envelopes.List(context.Background())
			mine = mine[:0]
			final := true
			for _, r := range recs {
				if r.Job == twiceJob {
					mine = append(mine, r)
					final = final && r.Final()
				}
			}
			return len(mine) == cp.Recoveries && final
		}, "%d final envelopes for o-twice", cp.Recoveries)
		sort.Slice(mine, func(i, j int) bool { return mine[i].CreatedAt.Before(mine[j].CreatedAt) })
		// Each was superseded by the next — not called resolved — and the
		// last resolved when the chunk finished.
		for i, rec := range mine[:len(mine)-1] {
			if rec.Status != salvagetype.EnvelopeSuperseded || rec.SupersededBy != mine[i+1].ID {
				t.Errorf("envelope %d of %d = %s %s by %s; want superseded by %s", i+1, len(mine), rec.ID, rec.Status, rec.SupersededBy, mine[i+1].ID)
			}
		}
		if last := mine[len(mine)-1]; last.Status != salvagetype.EnvelopeResolved || last.ResolvedBy != "chunk" {
			t.Errorf("last envelope = %s %s by %s; want resolved by the chunk", last.ID, last.Status, last.ResolvedBy)
		}
		if r := recovery.AutoRecoveryRate(mine); r.DeadLettered != 1 || r.Recovered != 1 {
			t.Errorf("rate over o-twice = %+v: one chunk, recovered without a person, counted once", r)
		}
		for sys, es := range c.effects(t, "o-twice") {
			if len(es) != 1 || (sys != "crm" && es[0].Requests != 1) {
				t.Errorf("%s for o-twice = %+v", sys, es)
			}
		}
	})

	t.Run("timeouts: after the commit verified done, before it verified not done and retried once", func(t *testing.T) {
		c.waitJob(t, timeoutJob, salvagetype.JobDone)
		after, before := c.effects(t, "o-after")["payments"], c.effects(t, "o-before")["payments"]
		if len(after) != 1 || after[0].Requests != 1 {
			t.Errorf("o-after charges = %+v, want one, requested once (verified, not repeated)", after)
		}
		if row := chargeRow(t, c, timeoutJob, 1); !row.Verified || row.Status != salvagetype.CallSucceeded {
			t.Errorf("o-after charge row = %+v, want SUCCEEDED by verification", row)
		}
		if len(before) != 1 || before[0].Requests != 1 {
			t.Errorf("o-before charges = %+v, want one (the retry), the hung request applied nothing", before)
		}
		if row := chargeRow(t, c, timeoutJob, 2); row.Verified || row.Attempts != 2 || row.Status != salvagetype.CallSucceeded {
			t.Errorf("o-before charge row = %+v, want SUCCEEDED on its second attempt", row)
		}
	})

	t.Run("two orchestrators never run one envelope twice", func(t *testing.T) {
		c.waitJob(t, manyJob, salvagetype.JobIncomplete)
		for chunk := 1; chunk <= 4; chunk++ {
			rec := c.envelopeOf(t, manyJob, chunk)
			if rec.Status != salvagetype.EnvelopeAbandoned || countNotes(rec.Notes, "compensated ") != 3 {
				t.Errorf("envelope of chunk %d = %s, notes %v", chunk, rec.Status, rec.Notes)
			}
			for sys, es := range c.effects(t, fmt.Sprintf("o-many-%d", chunk)) {
				for _, e := range es {
					if e.CompensationRequests != 1 {
						t.Errorf("o-many-%d %s compensation requested %d times", chunk, sys, e.CompensationRequests)
					}
				}
			}
		}
	})

	t.Run("no side effect twice anywhere", func(t *testing.T) {
		l, err := c.sim.Ledger(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if l.Summary.DuplicateKeys != 0 || l.Summary.DuplicateOrders != 0 {
			t.Fatalf("ledger duplicates: %+v", l.Summary)
		}
	})
}

func chargeRow(t *testing.T, c *cluster, job string, chunk int) kv.StoredRow {
	t.Helper()
	rows, err := c.stores.Parts()[0].Journal.Load(context.Background(), job, chunk, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Tool == orders.ToolCharge {
			return r
		}
	}
	t.Fatalf("no charge row for %s.%d", job, chunk)
	return kv.StoredRow{}
}

func countNotes(notes []string, prefix string) int {
	n := 0
	for _, s := range notes {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}
