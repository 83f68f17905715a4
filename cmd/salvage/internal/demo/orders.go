package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
)

// OrdersReport is the order-fulfillment demo's outcome; the JSON names
// are a contract.
type OrdersReport struct {
	Orders            int `json:"orders"`
	OrdersCompleted   int `json:"orders_completed"`
	OrdersCompensated int `json:"orders_compensated"`
	OrdersEscalated   int `json:"orders_escalated"`
	OrdersDeadEnd     int `json:"orders_dead_end"`
	OrdersMissing     int `json:"orders_missing"`
	// OrdersPartial completed without an optional stage (the CRM
	// lookup); OrdersHeld were parked while a breaker was open, and
	// OrdersResumed of them completed after it closed.
	OrdersPartial int `json:"orders_partial"`
	OrdersHeld    int `json:"orders_held"`
	OrdersResumed int `json:"orders_resumed"`
	ledgerCheck
	AutoRecoveryRate    float64        `json:"auto_recovery_rate"`
	Envelopes           int            `json:"envelopes"`
	EnvelopesByStatus   map[string]int `json:"envelopes_by_status"`
	EnvelopesByCategory map[string]int `json:"envelopes_by_category"`
	Compensations       int            `json:"compensations"`
	Tier1Retries        int            `json:"tier1_retries"`
	Redeliveries        int            `json:"redeliveries"`
	Takeovers           int            `json:"takeovers"`
	Recoveries          int            `json:"recoveries"`
	Workers             int            `json:"workers"`
	KilledWorker        string         `json:"killed_worker,omitempty"`
	KilledChunk         int            `json:"killed_chunk,omitempty"`
	KilledAtStage       int            `json:"killed_at_stage,omitempty"`
	Scenario            string         `json:"scenario"`
	Outage              string         `json:"outage,omitempty"`
	// OutageRequests counts the requests the down system got during the
	// outage, BreakerOpens how often its breaker opened.
	OutageRequests int `json:"outage_requests"`
	BreakerOpens   int `json:"breaker_opens"`
	// AfterClose counts the down system's requests in each second from
	// the one its breaker last closed in, afterCloseSeconds of them: the
	// held orders coming back, ramped.
	AfterClose    []int    `json:"requests_after_close,omitempty"`
	Escalations   []string `json:"escalations,omitempty"`
	SyncInterval  string   `json:"sync_interval"`
	JournalWrites string   `json:"journal_writes"`
	WallSeconds   float64  `json:"wall_seconds"`
	TimedOut      bool     `json:"timed_out"`
}

func (r *OrdersReport) ok() bool {
	return r.DuplicateSideEffects == 0 && r.LeftoverSideEffects == 0 && r.OrdersMissing == 0 && !r.TimedOut
}

func (r *OrdersReport) print(w io.Writer) {
	tw := operator.Table(w)
	fmt.Fprintf(tw, "Salvage demo: %d orders through salvage sim, %d worker processes, sync_interval %s\n\n", r.Orders, r.Workers, r.SyncInterval)
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	row("orders completed", r.OrdersCompleted)
	row("  of them partial (no CRM lookup)", r.OrdersPartial)
	row("orders held by a circuit breaker", r.OrdersHeld)
	row("  of them resumed and completed", r.OrdersResumed)
	row("orders compensated (abandoned)", r.OrdersCompensated)
	row("orders escalated to a human", r.OrdersEscalated)
	row("orders at a dead end", r.OrdersDeadEnd)
	row("orders missing", r.OrdersMissing)
	row("side effects in the ledger", r.SideEffects)
	row("compensations", r.Compensations)
	row("duplicate side effects", r.DuplicateSideEffects)
	row("leftover side effects", r.LeftoverSideEffects)
	row("envelopes", fmt.Sprintf("%d  %s", r.Envelopes, counts(r.EnvelopesByCategory)))
	row("envelope outcomes", counts(r.EnvelopesByStatus))
	row("automatic recovery rate", fmt.Sprintf("%.2f", r.AutoRecoveryRate))
	row("tier-1 retries / redeliveries / takeovers / recoveries", fmt.Sprintf("%d / %d / %d / %d", r.Tier1Retries, r.Redeliveries, r.Takeovers, r.Recoveries))
	if r.KilledWorker != "" {
		row("killed", fmt.Sprintf("%s with SIGKILL in stage %d of order %d", r.KilledWorker, r.KilledAtStage, r.KilledChunk))
	}
	if r.Outage != "" {
		row("outage", r.Outage)
		row("requests during the outage / breaker opens", fmt.Sprintf("%d / %d", r.OutageRequests, r.BreakerOpens))
		if len(r.AfterClose) > 0 {
			row("requests a second once its breaker closed", strings.Trim(fmt.Sprint(r.AfterClose), "[]"))
		}
	}
	for _, e := range r.Escalations {
		row(string(salvage.EnvelopeEscalated), e)
	}
	row("wall time", fmt.Sprintf("%.1fs", r.WallSeconds))
	verdict := "no side effect repeated, none left standing"
	if r.OrdersEscalated > 0 {
		verdict = fmt.Sprintf("no side effect repeated, none left standing but those of the %d orders escalated to a person", r.OrdersEscalated)
	}
	if !r.ok() {
		verdict = "CHECKS FAILED"
	}
	row("verdict", verdict)
	_ = tw.Flush()
}

// Demo scenarios.
const (
	// scenarioMixed: error rates, timeouts, per-order failures and a
	// short CRM outage.
	scenarioMixed = "mixed"
	// scenarioOutage: no other fault, the CRM down for --outage-for.
	scenarioOutage = "outage"
)

// mixedOutageFor is how long the mixed scenario takes the CRM down.
const mixedOutageFor = 12 * time.Second

// outageSystem is the system the demo takes down: the CRM, read by an
// optional stage (orders go on without it: partial) and written by a
// required one (orders wait there: held).
const outageSystem = "crm"

// orderFaults is the demo's fault plan: error, rate-limit and timeout
// rates on every system, and per-order rules — permanent email failures
// (compensate and abandon), a refund that cannot be made (escalate), a
// reservation refused (dead end) and a CRM failure after the email went
// out (compensate, then escalate the irreversible email).
func orderFaults(n int, seed int64) sim.Config {
	rates := sim.Faults{ErrorRate: 0.02, RateLimitRate: 0.02, TimeoutBeforeRate: 0.005, TimeoutAfterRate: 0.005}
	cfg := sim.Config{Systems: map[string]sim.Faults{}, Hang: 2 * time.Second, Seed: uint64(seed)}
	for _, s := range sim.Systems {
		cfg.Systems[s.Name] = rates
	}
	id := func(i int) string { return fmt.Sprintf("o-%04d", i) }
	for i := 7; i <= n; i += 29 {
		cfg.Rules = append(cfg.Rules, sim.Rule{System: "email", Order: id(i), Mode: "permanent"})
	}
	if n >= 50 {
		cfg.Rules = append(cfg.Rules, sim.Rule{System: "email", Order: id(50), Mode: "permanent"},
			sim.Rule{System: "payments", Order: id(50), Mode: "compensation-fails"})
	}
	if n >= 80 {
		cfg.Rules = append(cfg.Rules, sim.Rule{System: "wms", Order: id(80), Mode: "permanent"})
	}
	if n >= 120 {
		cfg.Rules = append(cfg.Rules, sim.Rule{System: "crm", Order: id(120), Mode: "permanent"})
	}
	return cfg
}

func (e *Env) runOrdersDemo(ctx context.Context, o Opts, log zerolog.Logger) (*OrdersReport, error) {
	rep := &OrdersReport{Orders: o.orders, Workers: o.Workers, EnvelopesByStatus: map[string]int{}, EnvelopesByCategory: map[string]int{}}
	simURL, simCmd, err := e.startSim(ctx, "--seed", fmt.Sprint(o.Run.Model.Seed), "--model-latency", "1ms")
	if err != nil {
		return rep, err
	}
	defer func() { _ = simCmd.Process.Signal(syscall.SIGTERM); _ = simCmd.Wait() }()
	client := &sim.Client{BaseURL: simURL, Timeout: 5 * time.Second}
	faults := orderFaults(o.orders, o.Run.Model.Seed)
	outageFor := mixedOutageFor
	rep.Scenario = o.scenario
	if o.scenario == scenarioOutage {
		faults, outageFor = sim.Config{Systems: map[string]sim.Faults{}, Seed: uint64(o.Run.Model.Seed)}, o.outageFor
	}
	if err := client.SetFaults(ctx, faults); err != nil {
		return rep, err
	}
	o.Run.SimURL = simURL
	d, err := e.StartDeployment(ctx, &o, log)
	rep.SyncInterval, rep.JournalWrites = d.syncInterval, o.Run.JournalWrites
	if err != nil {
		return rep, err
	}
	defer d.Close()
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	jobs, k, err := d.submit(waitCtx, o, orders.Name, []any{orders.Input{Orders: orders.Generate(o.orders, o.Run.Model.Seed)}})
	if err != nil {
		return rep, err
	}
	id := jobs[0]
	if k != nil {
		rep.KilledWorker, rep.KilledChunk, rep.KilledAtStage = k.worker, k.chunk, k.stage
	}
	stop := startProgress(waitCtx, o.progress, d.Client, jobs, k)
	defer stop()
	atOutage, err := waitOrders(waitCtx, o, d, client, faults, outageFor, id, rep, log)
	if err != nil {
		return rep, err
	}
	rep.WallSeconds = time.Since(start).Seconds()
	stop()
	if rep.Outage != "" {
		if err := reportOutage(ctx, d, client, atOutage, rep); err != nil {
			return rep, err
		}
	}
	err = collectOrders(ctx, d.Client, client, id, rep)
	if err == nil && o.onDone != nil {
		o.onDone(d, rep)
	}
	return rep, err
}

// waitOrders waits until job id finished and its envelopes settled, or
// ctx ends (rep.TimedOut), and with --outage (or the outage scenario)
// takes the CRM down for outageFor once a quarter of the orders are
// done, for longer than tiers 1 and 2 can ride out. atOutage is what the
// CRM had been asked when it went down.
func waitOrders(waitCtx context.Context, o Opts, d *Deployment, client *sim.Client, faults sim.Config, outageFor time.Duration, id string, rep *OrdersReport, log zerolog.Logger) (atOutage sim.Requests, _ error) {
	outageDone := !o.outage && o.scenario != scenarioOutage
	for {
		j, err := d.Client.JobGet(waitCtx, id)
		if err == nil && !outageDone && j.Summary.Done >= o.orders/4 {
			// Take the CRM down for longer than tiers 1 and 2 can ride out.
			reqs, rerr := client.Requests(waitCtx)
			if rerr != nil {
				return atOutage, rerr
			}
			atOutage = reqs[outageSystem]
			f := faults.Systems[outageSystem]
			f.OutageUntil = time.Now().Add(outageFor)
			faults.Systems[outageSystem] = f
			if err := client.SetFaults(waitCtx, faults); err != nil {
				return atOutage, err
			}
			rep.Outage = fmt.Sprintf("%s down for %s after %d orders completed", outageSystem, outageFor, j.Summary.Done)
			log.Warn().Msg(rep.Outage)
			outageDone = true
		}
		if err == nil && j.Status.Finished() {
			if settled, err := envelopesSettled(waitCtx, d.Client, id); err == nil && settled {
				break
			}
		}
		select {
		case <-waitCtx.Done():
			rep.TimedOut = true
		case <-time.After(250 * time.Millisecond):
			if err == nil {
				log.Debug().Int("done", j.Summary.Done).Int("dead_lettered", j.Summary.DeadLettered).Msg("progress")
			}
			continue
		}
		break
	}
	return atOutage, nil
}

// reportOutage adds to rep what the outage system went through: the
// requests it got while down (from atOutage, its counts when it went
// down), how often its breaker opened, and its requests a second after
// the breaker closed.
func reportOutage(ctx context.Context, d *Deployment, client *sim.Client, atOutage sim.Requests, rep *OrdersReport) error {
	reqs, err := client.Requests(ctx)
	if err != nil {
		return err
	}
	rep.OutageRequests = reqs[outageSystem].DuringOutage - atOutage.DuringOutage
	bs, err := d.Client.BreakerList(ctx)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if b.System == outageSystem {
			rep.BreakerOpens = b.Opens
			if b.State == salvage.BreakerClosed && b.Opens > 0 {
				rep.AfterClose = perSecondFrom(reqs[outageSystem], b.UpdatedAt, afterCloseSeconds)
			}
		}
	}
	return nil
}

// afterCloseSeconds is how many seconds after a breaker closed the demo
// reports the recovered system's requests for.
const afterCloseSeconds = 10

// perSecondFrom is r's requests in each of the n seconds from the one
// holding from.
func perSecondFrom(r sim.Requests, from time.Time, n int) []int {
	out := make([]int, n)
	for _, c := range r.PerSecond {
		if i := int(c.Unix - from.Unix()); i >= 0 && i < n {
			out[i] = c.N
		}
	}
	return out
}

// envelopesSettled reports whether every envelope of job is final.
func envelopesSettled(ctx context.Context, c *salvage.Client, job string) (bool, error) {
	recs, err := operator.AllEnvelopes(ctx, c, salvage.EnvelopeFilter{Job: job})
	if err != nil {
		return false, err
	}
	for _, r := range recs {
		if r.Status == salvage.EnvelopeOpen || r.Status == salvage.EnvelopeRecovering {
			return false, nil
		}
	}
	return true, nil
}

// collectOrders fills the report from checkpoints, envelope records and the
// sim's ledger.
func collectOrders(ctx context.Context, c *salvage.Client, simClient *sim.Client, job string, r *OrdersReport) error {
	_, chunks, err := operator.AllChunks(ctx, c, job)
	if err != nil {
		return err
	}
	mine, err := operator.AllEnvelopes(ctx, c, salvage.EnvelopeFilter{Job: job})
	if err != nil {
		return err
	}
	byID := map[string]salvage.EnvelopeRecord{}
	for _, rec := range mine {
		byID[rec.ID] = rec
		r.Envelopes++
		r.EnvelopesByStatus[string(rec.Status)]++
		r.EnvelopesByCategory[string(rec.Category)]++
	}
	r.AutoRecoveryRate = salvage.AutoRecoveryRate(mine).Rate
	settledOrders := map[string]bool{} // completed: effects stand by design
	named := map[string]bool{}         // idempotency keys escalations leave to a person
	for i, ch := range chunks {
		orderID := fmt.Sprintf("o-%04d", i+1)
		r.Tier1Retries += ch.Tier1Retries
		r.Redeliveries += ch.Redeliveries
		r.Takeovers += ch.Takeovers
		r.Recoveries += ch.Recoveries
		rec := byID[ch.Envelope]
		if ch.Holds > 0 {
			r.OrdersHeld++
		}
		switch {
		case ch.Status == salvage.ChunkDone:
			r.OrdersCompleted++
			settledOrders[orderID] = true
			if len(ch.Gaps) > 0 {
				r.OrdersPartial++
			}
			if ch.Holds > 0 {
				r.OrdersResumed++
			}
		case ch.Status == salvage.ChunkDeadLettered && rec.Status == salvage.EnvelopeAbandoned:
			r.OrdersCompensated++
		case ch.Status == salvage.ChunkDeadLettered && rec.Status == salvage.EnvelopeEscalated:
			r.OrdersEscalated++
			left := make([]string, len(rec.Left))
			for i, l := range rec.Left {
				left[i] = l.Tool + " " + l.ResourceID
				named[l.IdempotencyKey] = true
			}
			r.Escalations = append(r.Escalations, fmt.Sprintf("%s (%s): left %s", orderID, rec.Category, strings.Join(left, ", ")))
		case ch.Status == salvage.ChunkDeadLettered && rec.Status == salvage.EnvelopeDeadEnd:
			r.OrdersDeadEnd++
		default:
			r.OrdersMissing++
		}
	}
	l, err := simClient.Ledger(ctx)
	if err != nil {
		return err
	}
	r.Compensations = l.Summary.Compensated
	r.ledgerCheck = checkLedger(l, settledOrders, named)
	return nil
}

// counts prints a count per name, by name: "abandoned 7, escalated 2".
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
