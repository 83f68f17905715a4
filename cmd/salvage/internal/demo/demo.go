package demo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// Opts are the demo's settings; the bench's rows start deployments with
// them too.
type Opts struct {
	Run       operator.RunFlags
	pipeline  string
	Workers   int
	chunks    int
	jobs      int
	orders    int
	kill      bool
	outage    bool
	scenario  string
	outageFor time.Duration
	report    string
	keep      bool
	logFile   string
	// progress, when set, gets the live display (a terminal).
	progress io.Writer
	// onDone, when set, runs once the demo's report is complete and
	// before its server is closed (--keep).
	onDone func(d *Deployment, r demoResult)
	// notice, with keep, hears where the server and the dashboard are as
	// soon as they are up, before the run (the terminal, never the log
	// file).
	notice  io.Writer
	timeout time.Duration
	Sync    string
	// api runs the salvage.api service in process (--keep does too).
	api bool
}

// demoResult is what a run that ends in a report (demo, chaos) reports.
type demoResult interface {
	ok() bool
	print(w io.Writer)
}

// writeReport prints r as text or as one JSON object, and turns failed
// checks into exit code 1 with failed as the message.
func (e *Env) writeReport(format string, r demoResult, failed string) error {
	if format == "json" {
		if err := json.NewEncoder(e.Stdout).Encode(r); err != nil {
			return err
		}
	} else {
		r.print(e.Stdout)
	}
	if !r.ok() {
		return &operator.Exit{Code: operator.ExitError, Err: errors.New(failed)}
	}
	return nil
}

// demoLong is salvage demo's help.
const demoLong = `Start an embedded NATS server and worker processes, run a demo job with injected
faults, SIGKILL one worker process mid-chunk, wait until everything has settled, and
report. With --report json it prints one JSON object on stdout; it exits 0 when its own
checks hold (nothing lost, nothing repeated) and 1 otherwise.

--pipeline contract-review (default): the reference job shape, 22 chunks x 116 model
calls, with 5% of model calls failing transiently.
--pipeline order-fulfillment: 200 orders through a 'salvage sim' process. The mixed
scenario (default) injects error rates, timeouts before and after commits, a 12-second
CRM outage, permanent failures that need compensation, and a refund that cannot be
made; reports orders completed, compensated and escalated, duplicate and leftover side
effects, and the automatic recovery rate. --scenario outage injects nothing but a CRM
outage of --outage-for: the CRM's circuit breaker opens, orders that need the CRM are
held on SALVAGE_HOLD (not dead-lettered) and resume when it closes, and the optional
CRM lookup is skipped (partial orders); it reports held, resumed and partial orders and
the requests the CRM got while down.`

// DemoCmd is salvage demo.
func (e *Env) DemoCmd() *cobra.Command {
	var o Opts
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a demo job on an embedded server with injected faults and a killed worker, and report",
		Long:  demoLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return e.demo(cmd, o)
		},
	}
	o.register(cmd.Flags())
	return cmd
}

// validate checks the demo's flags.
func (o *Opts) validate() error {
	if o.report != "text" && o.report != "json" {
		return fmt.Errorf("--report %q: want text or json", o.report)
	}
	if o.Workers < 1 || o.chunks < 1 || o.jobs < 1 || o.orders < 1 {
		return errors.New("--workers, --chunks, --jobs and --orders must be at least 1")
	}
	if o.scenario != scenarioMixed && o.scenario != scenarioOutage {
		return fmt.Errorf("--scenario %q: want %s or %s", o.scenario, scenarioMixed, scenarioOutage)
	}
	if o.outageFor <= 0 {
		return errors.New("--outage-for must be positive")
	}
	if o.kill && o.Workers < 2 {
		return errors.New("--kill needs at least 2 --workers: one is killed, another finishes its chunk")
	}
	return nil
}

// demo runs the demo o asks for and writes its report.
func (e *Env) demo(cmd *cobra.Command, o Opts) error {
	// With --log-file, the demo's logs and its processes' go to
	// the file; the report and what --keep says stay here.
	runner := e
	if o.report == "text" && o.logFile == "" && isTerminal(e.Stdout) {
		// On a terminal the demo draws its progress; its logs
		// would scroll it away, so they go to a file it names.
		o.logFile = filepath.Join(os.TempDir(), fmt.Sprintf("salvage-demo-%s.log", time.Now().Format("20060102-150405")))
		o.progress = e.Stdout
	}
	if o.logFile != "" {
		f, err := os.Create(o.logFile)
		if err != nil {
			return fmt.Errorf("--log-file: %w", err)
		}
		defer f.Close()
		// A copy of the shared environment, not of the pointer to it:
		// e's own stderr stays the terminal.
		c := *e.Env
		c.Stderr = f
		runner = &Env{Env: &c}
		fmt.Fprintf(e.Stderr, "salvage demo: logs go to %s\n", o.logFile)
	}
	log, err := runner.Logger()
	if err != nil {
		return err
	}
	kept := false
	var keptErr error
	if o.keep {
		o.notice = e.Stderr
		o.onDone = func(d *Deployment, r demoResult) {
			kept = true
			keptErr = e.writeReport(o.report, r, "demo checks failed: something was lost or repeated")
			e.keepRunning(cmd.Context(), d)
		}
	}
	var r demoResult
	switch o.pipeline {
	case contractreview.Name:
		r, err = runner.runReviewDemo(cmd.Context(), o, log)
	case orders.Name:
		r, err = runner.runOrdersDemo(cmd.Context(), o, log)
	default:
		return fmt.Errorf("--pipeline %q: want %s or %s", o.pipeline, contractreview.Name, orders.Name)
	}
	if kept {
		return keptErr
	}
	if err != nil {
		return err
	}
	return e.writeReport(o.report, r, "demo checks failed: something was lost or repeated")
}

// register declares the demo's flags on f.
func (o *Opts) register(f *pflag.FlagSet) {
	o.Run.DemoPipelines = true
	o.Run.Register(f, simmodel.Config{Seed: 1, Latency: 15 * time.Millisecond, FailureRate: 0.05})
	// A demo should not sit out the production cool-down.
	for name, v := range map[string]string{"cool-down": "3s", "breaker-cool-down": "5s", "sim-timeout": "500ms"} {
		_ = f.Set(name, v)
		f.Lookup(name).DefValue = v
	}
	f.StringVar(&o.pipeline, "pipeline", contractreview.Name, "demo pipeline: contract-review or order-fulfillment")
	f.IntVar(&o.Workers, "workers", 3, "worker processes")
	f.IntVar(&o.chunks, "chunks", 22, "contract-review: chunks (contract clauses) per job")
	f.IntVar(&o.jobs, "jobs", 1, "contract-review: jobs to submit")
	f.IntVar(&o.orders, "orders", 200, "order-fulfillment: orders")
	f.BoolVar(&o.kill, "kill", true, "SIGKILL one worker process mid-chunk")
	f.BoolVar(&o.outage, "outage", true, "order-fulfillment, mixed scenario: take the CRM down for 12 seconds mid-run")
	f.StringVar(&o.scenario, "scenario", scenarioMixed, "order-fulfillment: mixed (many faults) or outage (only a CRM outage of --outage-for)")
	f.DurationVar(&o.outageFor, "outage-for", 30*time.Second, "order-fulfillment, outage scenario: how long the CRM is down")
	f.StringVar(&o.report, "report", "text", "report format: text or json")
	f.StringVar(&o.logFile, "log-file", "", "write the demo's logs, and its worker and sim processes', to this file instead of stderr")
	f.BoolVar(&o.keep, "keep", false, "run a dashboard and the salvage.api service beside the demo (their URLs on stderr before the run starts, so it can be watched live) and leave them and the server up after the report until Ctrl-C")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up waiting after this long")
	f.StringVar(&o.Sync, "sync-interval", "always", "embedded server's sync_interval: always, default, or a duration")
}
