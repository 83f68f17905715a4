package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// chaosReport is what `salvage chaos` reports; the JSON names are a
// contract.
type chaosReport struct {
	Jobs               int            `json:"jobs"`
	JobsSettled        int            `json:"jobs_settled"`
	JobsByStatus       map[string]int `json:"jobs_by_status"`
	ChunksMissing      int            `json:"chunks_missing"`
	EnvelopesUnsettled int            `json:"envelopes_unsettled"`
	EnvelopesByStatus  map[string]int `json:"envelopes_by_status"`
	ledgerCheck
	truthCheck
	AutoRecoveryRate float64 `json:"auto_recovery_rate"`
	Kills            int     `json:"kills"`
	ServerRestarts   int     `json:"server_restarts"`
	// Cancels, Replayed and ReplaysRefused count the operator's actions
	// of the run: jobs cancelled mid-flight, envelopes a bulk replay
	// put back to work, and replays Salvage refused (a cancelled job, a
	// recovery running, compensated effects beside standing ones).
	Cancels int `json:"cancels"`
	// CancelsTooLate counts the cancels refused because their job had
	// finished first (ErrJobFinished).
	CancelsTooLate int     `json:"cancels_too_late"`
	Replayed       int     `json:"replayed"`
	ReplaysRefused int     `json:"replays_refused"`
	PublishedWith  string  `json:"published_with"`
	Redeliveries   int     `json:"redeliveries"`
	Tier1Retries   int     `json:"tier1_retries"`
	SyncInterval   string  `json:"sync_interval"`
	WallSeconds    float64 `json:"wall_seconds"`
	TimedOut       bool    `json:"timed_out"`
}

// ok is the run's own check: every job settled, nothing lost, nothing
// repeated, nothing left standing that nobody owns.
func (r *chaosReport) ok() bool {
	return !r.TimedOut && r.JobsSettled == r.Jobs && r.ChunksMissing == 0 && r.EnvelopesUnsettled == 0 &&
		r.DuplicateSideEffects == 0 && r.LeftoverSideEffects == 0 && len(r.Disagreements) == 0
}

func (r *chaosReport) print(w io.Writer) {
	tw := operator.Table(w)
	fmt.Fprintf(tw, "Salvage chaos: %d order jobs published with %s, workers SIGKILLed %d times, server restarted %d times, sync_interval %s\n\n",
		r.Jobs, r.PublishedWith, r.Kills, r.ServerRestarts, r.SyncInterval)
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	row("jobs settled", fmt.Sprintf("%d / %d %v", r.JobsSettled, r.Jobs, r.JobsByStatus))
	row("chunks missing", r.ChunksMissing)
	row("envelopes", r.EnvelopesByStatus)
	row("envelopes unsettled", r.EnvelopesUnsettled)
	row("side effects in the ledger", r.SideEffects)
	row("duplicate side effects", r.DuplicateSideEffects)
	row("leftover side effects", r.LeftoverSideEffects)
	row("automatic recovery rate", fmt.Sprintf("%.2f", r.AutoRecoveryRate))
	row("operator actions", fmt.Sprintf("%d jobs cancelled (%d more had finished first), %d envelopes replayed in bulk, %d replays refused", r.Cancels, r.CancelsTooLate, r.Replayed, r.ReplaysRefused))
	row("tier-1 retries / redeliveries", fmt.Sprintf("%d / %d", r.Tier1Retries, r.Redeliveries))
	truth := fmt.Sprintf("journal %d calls, %d tokens: summaries, chunks, salvage.api, the dashboard and /metrics agree", r.JournalCalls, r.JournalTokens)
	if len(r.Disagreements) > 0 {
		truth = fmt.Sprintf("%d disagreements: %s", len(r.Disagreements), strings.Join(r.Disagreements, "; "))
	}
	row("counts against the records", truth)
	row("wall time", fmt.Sprintf("%.1fs", r.WallSeconds))
	verdict := "every job settled; nothing lost, nothing repeated"
	if !r.ok() {
		verdict = "CHECKS FAILED"
	}
	row("verdict", verdict)
	_ = tw.Flush()
}

type chaosOpts struct {
	Opts
	killEvery time.Duration
	restart   bool
	natsCLI   string
	// operator runs the operator-action phase: cancels and bulk replays
	// while workers are being killed.
	operator bool
}

// ChaosCmd is salvage chaos: jobs run while worker processes are
// SIGKILLed, the server restarts and operators act, checked against the
// ledger of effects.
func (e *Env) ChaosCmd() *cobra.Command {
	var o chaosOpts
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Publish order jobs with the nats CLI while workers are SIGKILLed and the server restarts; check everything settles",
		Long: `Start an embedded NATS server, 'salvage sim' with faults on every external system,
the dead-letter and recovery roles, and worker processes. Publish --jobs one-order jobs
with the nats CLI (--nats, else 'nats' on PATH or ./bin/nats; else the Go client),
SIGKILL a worker every --kill-every and start another, restart the server once, and wait
until everything has settled. Meanwhile, as an operator would (--operator), it cancels
every tenth job mid-flight and replays the DLQ in bulk a few times. It exits 0 when every
job settled, no chunk was lost, no
envelope is left open or recovering, and the sim's ledger shows no repeated and no
orphaned side effect; 1 otherwise. --report json prints one JSON object.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.report != "text" && o.report != "json" {
				return fmt.Errorf("--report %q: want text or json", o.report)
			}
			if o.Workers < 2 || o.jobs < 1 {
				return errors.New("--workers must be at least 2 (one is always being killed) and --jobs at least 1")
			}
			log, err := e.Logger()
			if err != nil {
				return err
			}
			r, err := e.runChaos(cmd.Context(), o, log)
			if err != nil {
				return err
			}
			return e.writeReport(o.report, r, "chaos checks failed: a job did not settle, or something was lost or repeated")
		},
	}
	f := cmd.Flags()
	o.Run.DemoPipelines = true
	o.Run.Register(f, simmodel.Config{Seed: 1, Latency: time.Millisecond})
	for name, v := range map[string]string{"cool-down": "3s", "breaker-cool-down": "3s", "sim-timeout": "500ms", "ack-wait": "4s"} {
		_ = f.Set(name, v)
		f.Lookup(name).DefValue = v
	}
	f.IntVar(&o.jobs, "jobs", 150, "one-order jobs to publish")
	f.IntVar(&o.Workers, "workers", 3, "worker processes alive at a time")
	f.DurationVar(&o.killEvery, "kill-every", 3*time.Second, "SIGKILL a random worker process this often, and start another")
	f.BoolVar(&o.restart, "restart", true, "restart the embedded server once, mid-run")
	f.BoolVar(&o.operator, "operator", true, "cancel every tenth job mid-flight and replay the DLQ in bulk while workers are killed")
	f.StringVar(&o.natsCLI, "nats", "", "the nats CLI to publish with (default: nats on PATH, else ./bin/nats, else the Go client)")
	f.StringVar(&o.report, "report", "text", "report format: text or json")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up waiting after this long")
	f.StringVar(&o.Sync, "sync-interval", "always", "embedded server's sync_interval: always, default, or a duration")
	return cmd
}

func (e *Env) runChaos(ctx context.Context, o chaosOpts, log zerolog.Logger) (*chaosReport, error) {
	rep := &chaosReport{Jobs: o.jobs, JobsByStatus: map[string]int{}, EnvelopesByStatus: map[string]int{}}
	simURL, simCmd, err := e.startSim(ctx, "--seed", fmt.Sprint(o.Run.Model.Seed), "--model-latency", "1ms")
	if err != nil {
		return rep, err
	}
	defer func() { _ = simCmd.Process.Signal(syscall.SIGTERM); _ = simCmd.Wait() }()
	client := &sim.Client{BaseURL: simURL, Timeout: 5 * time.Second}
	if err := client.SetFaults(ctx, orderFaults(o.jobs, o.Run.Model.Seed)); err != nil {
		return rep, err
	}
	o.Run.SimURL = simURL
	o.api = true // the truth check asks salvage.api too
	d, err := e.StartDeployment(ctx, &o.Opts, log)
	rep.SyncInterval = d.syncInterval
	if err != nil {
		return rep, err
	}
	defer d.Close()
	// A dashboard watches the whole run: at the end its counts and
	// /metrics must be the records' (truthCheck).
	dash, err := dashboard.Listen(d.JS, d.Client, dashboard.Config{Addr: "127.0.0.1:0", Logger: &log})
	if err != nil {
		return rep, err
	}
	dctx, stopDash := context.WithCancel(ctx)
	dashDone := make(chan struct{})
	go func() { defer close(dashDone); _ = dash.Run(dctx) }()
	defer func() { stopDash(); <-dashDone }()
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()

	// The killer: one worker SIGKILLed, another started, every killEvery.
	killCtx, stopKilling := context.WithCancel(waitCtx)
	killed := e.killWorkers(ctx, killCtx, o, d, log)

	jobs := make([]string, o.jobs)
	for i := range jobs {
		jobs[i] = ulid.Make().String()
	}
	operated := make(chan operatorActions, 1)
	opCtx, stopOperating := context.WithCancel(waitCtx)
	defer stopOperating()
	go func() {
		if !o.operator {
			operated <- operatorActions{}
			return
		}
		operated <- operate(opCtx, d.Client, jobs, log)
	}()
	published, err := e.publishChaosJobs(waitCtx, o, d, jobs)
	rep.PublishedWith = published
	if err != nil {
		stopKilling()
		stopOperating()
		<-killed
		<-operated
		return rep, err
	}
	acts := <-operated
	rep.Cancels, rep.CancelsTooLate, rep.Replayed, rep.ReplaysRefused = acts.cancels, acts.late, acts.replayed, acts.refused
	if err := waitChaos(waitCtx, o, d, jobs, rep, log); err != nil {
		stopKilling()
		<-killed
		return rep, err
	}
	stopKilling()
	rep.Kills = <-killed
	rep.WallSeconds = time.Since(start).Seconds()
	if err := collectChaos(ctx, d, client, jobs, rep); err != nil {
		return rep, err
	}
	rep.truthCheck = checkTruth(ctx, d, dash.URL(), jobs)
	return rep, nil
}

// killWorkers SIGKILLs a random worker every o.killEvery and starts
// another in its place, until killCtx ends; the channel then gets the
// number killed.
func (e *Env) killWorkers(ctx, killCtx context.Context, o chaosOpts, d *Deployment, log zerolog.Logger) <-chan int {
	killed := make(chan int, 1)
	go func() {
		n, spawned := 0, len(d.Workers)
		defer func() { killed <- n }()
		for {
			select {
			case <-killCtx.Done():
				return
			case <-time.After(o.killEvery):
			}
			i := rand.IntN(len(d.Workers))
			w := d.Workers[i]
			_ = w.Cmd.Process.Signal(syscall.SIGKILL)
			_ = w.Cmd.Wait()
			n++
			spawned++
			nw, err := e.StartWorker(ctx, o.Opts, d.URL, fmt.Sprintf("chaos-w%d", spawned))
			if err != nil {
				log.Error().Err(err).Msg("start a replacement worker")
				if nw == nil {
					continue
				}
			}
			d.Workers[i] = nw
			log.Warn().Str("killed", w.ID).Str("started", nw.ID).Msg("worker SIGKILLed and replaced")
		}
	}()
	return killed
}

// waitChaos waits until every job has settled (rep.TimedOut when waitCtx
// ends first), restarting the server once a third have, unless o says
// not to.
func waitChaos(waitCtx context.Context, o chaosOpts, d *Deployment, jobs []string, rep *chaosReport, log zerolog.Logger) error {
	restarted := !o.restart
	for {
		settled, done := chaosProgress(waitCtx, d.Client, jobs)
		if !restarted && done >= len(jobs)/3 {
			log.Warn().Int("jobs_settled", done).Msg("restarting the NATS server")
			if err := d.restartServer(); err != nil {
				return fmt.Errorf("restart the server: %w", err)
			}
			rep.ServerRestarts++
			restarted = true
		}
		if settled {
			break
		}
		select {
		case <-waitCtx.Done():
			rep.TimedOut = true
		case <-time.After(500 * time.Millisecond):
			continue
		}
		break
	}
	return nil
}

// operatorActions counts what operate did.
type operatorActions struct {
	cancels, late, replayed, refused int
}

// operate is the operator of a chaos run, acting while workers die: it
// cancels every tenth job as soon as it is recorded (its order may be
// mid-charge), and replays the DLQ in bulk — open, escalated, abandoned
// and dead-end envelopes alike — every two seconds, five times. Every
// action is one a person could take; Salvage must leak and repeat nothing.
func operate(ctx context.Context, c *salvage.Client, jobs []string, log zerolog.Logger) operatorActions {
	var acts operatorActions
	toCancel := map[string]bool{}
	for i := 3; i < len(jobs); i += 10 {
		toCancel[jobs[i]] = true
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	nextBulk, bulks := time.Now().Add(2*time.Second), 0
	for len(toCancel) > 0 || bulks < 5 {
		select {
		case <-ctx.Done():
			return acts
		case <-tick.C:
		}
		for id := range toCancel {
			if _, err := c.JobGet(ctx, id); err != nil {
				continue // not recorded yet
			}
			if _, err := c.JobCancel(ctx, id, "chaos"); errors.Is(err, salvage.ErrJobFinished) {
				// It finished before the operator got to it: a cancel
				// is refused, and the job stands as it ended.
				delete(toCancel, id)
				acts.late++
				continue
			} else if err != nil {
				log.Warn().Err(err).Str("job_id", id).Msg("chaos cancel")
				continue
			}
			delete(toCancel, id)
			acts.cancels++
		}
		if bulks < 5 && time.Now().After(nextBulk) {
			for _, status := range []salvage.EnvelopeStatus{salvage.EnvelopeOpen, salvage.EnvelopeEscalated, salvage.EnvelopeAbandoned, salvage.EnvelopeDeadEnd} {
				res, err := c.EnvelopeBulk(ctx, salvage.BulkRequest{Action: salvage.BulkReplay, Filter: salvage.EnvelopeFilter{Status: status}, By: "chaos"})
				if err != nil {
					log.Warn().Err(err).Str("status", string(status)).Msg("chaos bulk replay")
					continue
				}
				acts.replayed += res.Acted
				acts.refused += res.Refused
			}
			bulks++
			nextBulk = time.Now().Add(2 * time.Second)
		}
	}
	return acts
}

// publishChaosJobs publishes one order per job with the nats CLI when
// there is one, else with the client; it says which.
func (e *Env) publishChaosJobs(ctx context.Context, o chaosOpts, d *Deployment, jobs []string) (string, error) {
	all := orders.Generate(len(jobs), o.Run.Model.Seed)
	cli := o.natsCLI
	if cli == "" {
		if p, err := exec.LookPath("nats"); err == nil {
			cli = p
		} else if p, err := filepath.Abs(filepath.Join("bin", "nats")); err == nil {
			if _, err := os.Stat(p); err == nil {
				cli = p
			}
		}
	}
	for i, id := range jobs {
		body, err := json.Marshal(map[string]any{"job_id": id, "input": all[i]})
		if err != nil {
			return "", err
		}
		if cli == "" {
			if _, err := d.Client.JobSubmit(ctx, orders.Name, all[i], &salvage.SubmitOpts{JobID: id}); err != nil {
				return "client", err
			}
			continue
		}
		// The server may be restarting: the CLI gets a few tries.
		var out []byte
		for try := 0; try < 5; try++ {
			out, err = exec.CommandContext(ctx, cli, "--server", d.URL, "pub", salvage.JobSubject(orders.Name), string(body)).CombinedOutput()
			if err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			return "nats CLI", fmt.Errorf("nats pub: %v: %s", err, out)
		}
	}
	if cli == "" {
		return "client", nil
	}
	return "nats CLI", nil
}

// chaosProgress reports whether every job and envelope has settled, and
// how many jobs have.
func chaosProgress(ctx context.Context, c *salvage.Client, jobs []string) (bool, int) {
	done := 0
	for _, id := range jobs {
		if j, err := c.JobGet(ctx, id); err == nil && j.Status.Finished() {
			done++
		}
	}
	if done < len(jobs) {
		return false, done
	}
	for _, status := range []salvage.EnvelopeStatus{salvage.EnvelopeOpen, salvage.EnvelopeRecovering} {
		if l, err := c.EnvelopeList(ctx, salvage.EnvelopeFilter{Status: status}, nil); err != nil || l.Total > 0 {
			return false, done
		}
	}
	return true, done
}

// collectChaos fills the report from the job records, checkpoints,
// envelope records and the sim's ledger.
func collectChaos(ctx context.Context, d *Deployment, client *sim.Client, jobs []string, r *chaosReport) error {
	order := map[string]string{}  // job -> its one order
	standing := map[string]bool{} // orders whose effects stand by design: done
	named := map[string]bool{}    // idempotency keys an escalation leaves to a person
	for i, id := range jobs {
		order[id] = fmt.Sprintf("o-%04d", i+1)
		j, err := d.Client.JobGet(ctx, id)
		if err != nil {
			r.JobsByStatus["missing"]++
			r.ChunksMissing++
			continue
		}
		r.JobsByStatus[string(j.Status)]++
		if j.Status.Finished() {
			r.JobsSettled++
		}
		r.ChunksMissing += j.Chunks - j.Summary.Terminal()
		r.Tier1Retries += j.Summary.Tier1Retries
		r.Redeliveries += j.Summary.Redeliveries
		if j.Status == salvage.JobDone || j.Status == salvage.JobPartial {
			standing[order[id]] = true
		}
	}
	// Its own jobs' envelopes, by job: whatever else the DLQ holds.
	var ours []salvage.EnvelopeRecord
	for _, id := range slices.Sorted(maps.Keys(order)) {
		recs, err := operator.AllEnvelopes(ctx, d.Client, salvage.EnvelopeFilter{Job: id})
		if err != nil {
			return err
		}
		ours = append(ours, recs...)
	}
	for _, rec := range ours {
		r.EnvelopesByStatus[string(rec.Status)]++
		switch rec.Status {
		case salvage.EnvelopeOpen, salvage.EnvelopeRecovering:
			r.EnvelopesUnsettled++
		case salvage.EnvelopeEscalated:
			// Left to a person, each effect by name.
			for _, left := range rec.Left {
				named[left.IdempotencyKey] = true
			}
		}
	}
	r.AutoRecoveryRate = salvage.AutoRecoveryRate(ours).Rate
	l, err := client.Ledger(ctx)
	if err != nil {
		return err
	}
	r.ledgerCheck = checkLedger(l, standing, named)
	explainLeftovers(ctx, d.Client, order, ours, r)
	return nil
}

// explainLeftovers adds to each leftover effect what the records say of
// its order: the job's status, its envelopes, and the journal row that
// made the effect (its status, epoch and earlier runs). Each job is read
// once, however many of its effects were left.
func explainLeftovers(ctx context.Context, c *salvage.Client, order map[string]string, envs []salvage.EnvelopeRecord, r *chaosReport) {
	jobOf := make(map[string]string, len(order))
	for job, o := range order {
		jobOf[o] = job
	}
	type told struct {
		head, tail string
		calls      []salvage.Call
	}
	seen := map[string]told{}
	for i, e := range r.leftover {
		job, ok := jobOf[e.Order]
		if !ok {
			continue
		}
		t, ok := seen[job]
		if !ok {
			t.head = " — job " + job
			if j, err := c.JobGet(ctx, job); err == nil {
				t.head += " " + string(j.Status)
			}
			for _, rec := range envs {
				if rec.Job == job {
					t.head += fmt.Sprintf("; envelope %s %s %s %s notes %q", rec.ID, rec.Category, rec.Strategy, rec.Status, rec.Notes)
				}
			}
			if tc, err := c.ChunkTrace(ctx, job, 1); err == nil {
				t.calls = tc.Calls
				t.tail = fmt.Sprintf("; chunk %s epoch %d events %d", tc.Status, tc.Epoch, len(tc.Events))
				for _, ev := range tc.Events {
					t.tail += fmt.Sprintf(" [%s %s %s %s]", ev.Kind, ev.At.Format("15:04:05.000"), ev.Worker, ev.Detail)
				}
			}
			seen[job] = t
		}
		s := t.head
		for _, call := range t.calls {
			if call.IdempotencyKey == e.Key {
				s += fmt.Sprintf("; journal %s %s epoch %d stage %d history %d", call.Tool, call.Status, call.Epoch, call.Stage, len(call.History))
			}
		}
		r.Leftovers[i] += s + t.tail
	}
}

// ledgerCheck is what the sim's ledger says of a run's side effects;
// the JSON names are part of the reports' contract.
type ledgerCheck struct {
	SideEffects          int `json:"side_effects"`
	DuplicateSideEffects int `json:"duplicate_side_effects"`
	// LeftoverSideEffects are effects standing for an order that should
	// have none: neither completed nor left to a person.
	LeftoverSideEffects int `json:"leftover_side_effects"`
	// Leftovers describe the first leftoversMax of them, for a person
	// to find why.
	Leftovers []string `json:"leftovers,omitempty"`
	leftover  []sim.Effect
}

// leftoversMax bounds ledgerCheck.Leftovers.
const leftoversMax = 10

// checkLedger counts the ledger's effects, those applied twice, and those
// left standing unaccounted: not compensated, not of an order in
// settled, and not named (by idempotency key) in named.
func checkLedger(l sim.Ledger, settled, named map[string]bool) ledgerCheck {
	c := ledgerCheck{SideEffects: l.Summary.Effects, DuplicateSideEffects: l.Summary.DuplicateKeys + l.Summary.DuplicateOrders}
	for _, e := range l.Effects {
		if !e.Compensated && !settled[e.Order] && !named[e.Key] {
			c.LeftoverSideEffects++
			if len(c.leftover) < leftoversMax {
				c.leftover = append(c.leftover, e)
				c.Leftovers = append(c.Leftovers, fmt.Sprintf("order %s: %s %s %s key %s applied %d at %s, %d undo requests",
					e.Order, e.System, e.Op, e.ResourceID, e.Key, e.Applied, e.At.Format(time.RFC3339Nano), e.CompensationRequests))
			}
		}
	}
	return c
}
