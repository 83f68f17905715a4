package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
)

// The reference figures the bench table is read against: peers measured
// on the 2-core development machine with the same job shape (zero-latency
// calls, every call durable), fsync on.
const (
	refDBOS             = "3,200–3,450" // DBOS Transact steps/s on PostgreSQL, synchronous commit on
	refRiverJobsPerSec  = 9_900         // River jobs/s on PostgreSQL, FetchCooldown 1 ms
	refMachine          = "the 2-core development machine"
	targetAlwaysCalls   = 10_000 // 3x DBOS
	targetDefaultCalls  = 25_000 // 2.5x River
	targetFloorRatio    = 0.5
	targetCriticalRatio = 1.10
	targetGrowthSpread  = 0.25
)

// benchReport is what `salvage bench` reports; the JSON names are a
// contract for scripts that compare runs.
type benchReport struct {
	Machine    string          `json:"machine"`
	GoVersion  string          `json:"go_version"`
	Throughput []throughputRow `json:"throughput,omitempty"`
	// ClusterSkipped says why the cluster row is missing.
	ClusterSkipped string          `json:"cluster_skipped,omitempty"`
	Critical       *criticalRow    `json:"critical_path,omitempty"`
	Crash          *crashRow       `json:"crash_to_resume,omitempty"`
	Growth         []growthRow     `json:"growth,omitempty"`
	Storage        []storageRow    `json:"storage,omitempty"`
	Soak           *soakRow        `json:"soak,omitempty"`
	Ramp           *rampRow        `json:"release_ramp,omitempty"`
	Fleet          []fleetRow      `json:"fleet,omitempty"`
	Partitions     []partitionsRow `json:"partitions,omitempty"`
	// PartitionsSkipped says why the partitions rows are missing.
	PartitionsSkipped string `json:"partitions_skipped,omitempty"`
	// Limits are the rate-limit rows; LimitsSkipped says why they are
	// missing.
	Limits        []limitsRow `json:"limits,omitempty"`
	LimitsSkipped string      `json:"limits_skipped,omitempty"`
	// Tenants are the fair-share rows; TenantsSkipped says why they are
	// missing.
	Tenants        []tenantsRow `json:"tenants,omitempty"`
	TenantsSkipped string       `json:"tenants_skipped,omitempty"`
	// FleetSkipped says why the fleet rows are missing.
	FleetSkipped string  `json:"fleet_skipped,omitempty"`
	WallSecs     float64 `json:"wall_seconds"`
}

type benchOpts struct {
	only        []string
	jobs        int
	chunks      int
	concurrency int
	kills       int
	killEvery   time.Duration
	workers     int
	growth      []int
	growthConc  int
	report      string
	natsServer  string
	soak        time.Duration
	fleet       []int
	fleetConc   int
	fleetChunks int
	// fleetJournal is the fleet rows' journal writes: atomic (each
	// process group-commits its concurrent calls' rows) or pipelined.
	fleetJournal string
	// limitsChunks is the chunks of the limits rows' job.
	limitsChunks int
	// tenantsChunks is the chunks of tenant a's job in the tenants rows.
	tenantsChunks int
}

// benchParts are the sections `--only` picks from, in the order they run.
var benchParts = []string{"throughput", "critical", "crash", "growth", "soak", "ramp", "fleet", "partitions", "limits", "tenants"}

// benchLong is salvage bench's help: what each section measures.
const benchLong = `Run the performance harness on embedded NATS servers in temporary directories and
print one table:

  throughput   journaled model calls per second for the reference job shape (contract
               review: 116 zero-latency calls per chunk, --jobs jobs of --chunks chunks
               in flight, --concurrency chunks at once), under sync_interval always and
               the server default, beside the raw JetStream floor measured on the same
               server: atomic batches of 100 and pipelined async publishes of 512 bytes,
               and (shown, not targeted) a journal row's cost alone: async publishes of
               1,000 bytes, each under a key of its own expected to be new; then the same on three nats-server processes with R3 streams (--nats-server,
               else nats-server on PATH, else ./bin/nats-server; skipped without one);
  critical     the reference job (22 chunks x 116 calls, 15 ms per model call) on the
               default concurrency, against its critical path computed from its stages;
  crash        --kills SIGKILLs of worker processes ('salvage up --role worker' against a
               counting model server): time from each kill to its chunks running again
               elsewhere, and model calls made twice per kill;
  growth       one job each of --growth chunks on one fresh worker process each: time
               per chunk, the worker's peak memory, and what the streams and buckets
               hold before and after, and once retention ran on the largest job (its
               calls window shortened to 1s);
  soak         --soak of 20-chunk jobs back to back, two at a time, with every role in one
               process and retention shortened to 1s / 3s / 6s (calls, effects, records):
               the disk use of what retention governs, sampled every 2s, levels off;
  ramp         'salvage demo --scenario outage' (400 orders, 2 worker processes, the CRM
               down 20s): the orders its breaker held, and the CRM's requests in each
               second once the breaker closed;
  fleet        one contract-review job of --fleet-chunks chunks (model 5 ms) on a
               nats-server process (as for the cluster row) at --fleet-concurrency slots
               in all, spread over each of --fleet worker processes: wall time, CPU per
               chunk of the workers and the server, and the messages the server delivered
               to the workers per chunk; beside each, the same calls in a bare loop of the
               same shape (no Salvage, one acknowledged row per call), for what the machine
               charges for more processes;
  partitions   the throughput job shape (24 jobs of --chunks chunks, --concurrency at once)
               on three nats-server processes with R3 streams, in 1 and then 3 partitions
               (each led from its own node): calls per second, and each node's share of
               the servers' CPU;
  limits       4 worker processes of 32 slots against a simulated provider whose model
               admits 600 requests and 200,000 tokens a minute, one contract-review job of
               --limits-chunks chunks (about 2,000 calls), first without a limit declared,
               then with one: the provider's 429s, the most sent in a minute, the share of
               the quota used, the job's tier-1 retries and redeliveries;
  tenants      2 worker processes of 16 slots, contract-review against a simulated model
               of 300 ms a call: tenant b's job of 20 chunks alone, then beside tenant
               a's job of --tenants-chunks chunks, with tenant a capped at 24 chunks in
               flight and with the job windows only: b's time beside a over its time alone
               (no model call times out there: a breaker trip is not what it measures).

The listing pages over 100,000 envelope records and the dashboard's memory over 100,000 are
Go benchmarks, since they seed records below the public API (make bench runs them):
go test -run '^$' -bench 'BenchmarkEnvelopeListing|BenchmarkDashboardMemory' ./cmd/salvage/internal/cli/

Figures depend on the machine; docs/benchmarks.md shows one run.`

// BenchCmd is salvage bench.
func (e *Env) BenchCmd() *cobra.Command {
	var o benchOpts
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput, critical-path overhead, crash-to-resume time, cost growth, retention and the release ramp on embedded servers",
		Long:  benchLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			log, err := e.Logger()
			if err != nil {
				return err
			}
			b := &bench{e: e, o: o, log: log}
			r, err := b.run(cmd.Context())
			if err != nil {
				return err
			}
			if o.report == "json" {
				return e.WriteJSON(r)
			}
			r.print(e.Stdout)
			return nil
		},
	}
	o.register(cmd.Flags())
	return cmd
}

// validate checks the flags.
func (o *benchOpts) validate() error {
	if o.report != "text" && o.report != "json" {
		return fmt.Errorf("--report %q: want text or json", o.report)
	}
	for _, p := range o.only {
		if !slices.Contains(benchParts, p) {
			return fmt.Errorf("--only %q: want some of %s", p, strings.Join(benchParts, ","))
		}
	}
	if o.jobs < 1 || o.chunks < 1 || o.concurrency < 1 || o.kills < 1 || o.workers < 2 || o.growthConc < 1 || o.fleetConc < 1 || o.fleetChunks < 1 || o.limitsChunks < 1 || o.tenantsChunks < 1 {
		return errors.New("--jobs, --chunks, --concurrency, --kills, --growth-concurrency, --fleet-concurrency, --fleet-chunks, --limits-chunks and --tenants-chunks must be positive, --workers at least 2")
	}
	for _, n := range o.fleet {
		if n < 1 || n > o.fleetConc {
			return fmt.Errorf("--fleet %d: want from 1 to --fleet-concurrency (%d) processes", n, o.fleetConc)
		}
	}
	if o.fleetJournal != string(salvage.JournalAtomic) && o.fleetJournal != string(salvage.JournalPipelined) {
		return fmt.Errorf("--fleet-journal %q: want %s or %s", o.fleetJournal, salvage.JournalAtomic, salvage.JournalPipelined)
	}
	return nil
}

// register declares the flags on f.
func (o *benchOpts) register(f *pflag.FlagSet) {
	f.StringSliceVar(&o.only, "only", benchParts, "sections to run: "+strings.Join(benchParts, ","))
	f.IntVar(&o.jobs, "jobs", 4, "throughput: jobs in flight at once")
	f.IntVar(&o.chunks, "chunks", 100, "throughput: chunks per job")
	f.IntVar(&o.concurrency, "concurrency", 32, "throughput: chunks in flight in the worker")
	f.IntVar(&o.kills, "kills", 50, "crash: worker processes to SIGKILL")
	f.DurationVar(&o.killEvery, "kill-every", 1500*time.Millisecond, "crash: time between kills")
	f.IntVar(&o.workers, "workers", 4, "crash: worker processes running at once")
	f.IntSliceVar(&o.growth, "growth", []int{100, 1_000, 10_000}, "growth: job sizes in chunks")
	f.IntVar(&o.growthConc, "growth-concurrency", 16, "growth: chunks in flight in the worker")
	f.DurationVar(&o.soak, "soak", 2*time.Minute, "soak: how long jobs run back to back")
	f.IntSliceVar(&o.fleet, "fleet", []int{2, 8, 32, 64}, "fleet: worker process counts")
	f.IntVar(&o.fleetConc, "fleet-concurrency", 64, "fleet: chunks in flight across the worker processes")
	f.IntVar(&o.fleetChunks, "fleet-chunks", 2_000, "fleet: chunks of the job")
	f.StringVar(&o.fleetJournal, "fleet-journal", string(salvage.JournalAtomic), "fleet: journal writes, atomic (each process group-commits the rows of its concurrent calls) or pipelined (a row, an acknowledgement)")
	f.IntVar(&o.limitsChunks, "limits-chunks", 17, "limits: chunks of the job (116 model calls each)")
	f.IntVar(&o.tenantsChunks, "tenants-chunks", 5000, "tenants: chunks of tenant a's job")
	f.StringVar(&o.report, "report", "text", "text or json")
	f.StringVar(&o.natsServer, "nats-server", "", "throughput: the nats-server binary for the 3-node cluster row (default nats-server on PATH, else ./bin/nats-server)")
}

func (r *benchReport) print(w io.Writer) {
	tw := operator.Table(w)
	fmt.Fprintf(tw, "Salvage bench on %s, %s (%.0fs)\n", r.Machine, r.GoVersion, r.WallSecs)
	fmt.Fprintf(tw, "Reference figures (measured on %s, fsync on): DBOS Transact %s steps/s, River %s jobs/s (FetchCooldown 1 ms)\n\n",
		refMachine, refDBOS, operator.Thousands(refRiverJobsPerSec))
	r.printSingle(tw)
	r.printSustained(tw)
	r.printFleets(tw)
	_ = tw.Flush()
}

// printSingle writes the sections measured on one server: throughput,
// the critical path, crash to resume, cost growth and storage.
func (r *benchReport) printSingle(tw io.Writer) {
	if len(r.Throughput) > 0 {
		fmt.Fprintln(tw, "THROUGHPUT\tservers\tsync_interval\tjournal\tcalls/s\tchunks/s\trows/flush\tfloor: batches/s\tfloor: async/s\tfloor: rows/s\tcalls/floor\ttarget")
		for _, t := range r.Throughput {
			fmt.Fprintf(tw, "  %d jobs x %d chunks x %d calls, %d at once\t%s\t%s\t%s\t%s\t%.0f\t%.1f\t%s\t%s\t%s\t%.2f (%s)\t%s\n",
				t.Jobs, t.Chunks, t.CallsPerChunk, t.Concurrency, t.Servers, t.SyncInterval, t.Journal, operator.Thousands(int(t.CallsPerSec)), t.ChunksPerSec,
				t.RowsPerFlush, operator.Thousands(int(t.FloorBatchPerSec)), operator.Thousands(int(t.FloorAsyncPerSec)), operator.Thousands(int(t.FloorRowsPerSec)), t.FloorRatio, t.FloorKind, t.verdict())
		}
		if r.ClusterSkipped != "" {
			fmt.Fprintf(tw, "  cluster row skipped: %s\n", r.ClusterSkipped)
		}
		fmt.Fprintln(tw)
	}
	if c := r.Critical; c != nil {
		fmt.Fprintln(tw, "CRITICAL PATH\tsync_interval\tconcurrency\tcritical path: nominal / measured calls\twall\twall/measured\ttarget")
		fmt.Fprintf(tw, "  %d chunks x %d calls, %s per call (stage depths %v)\t%s\t%d\t%s / %s\t%s\t%.2f\t%s\n",
			c.Chunks, c.CallsPerChunk, c.Latency, c.StageDepths, c.SyncInterval, c.Concurrency,
			c.CriticalPath.Round(time.Millisecond), c.MeasuredPath.Round(time.Millisecond), c.Wall.Round(time.Millisecond), c.Ratio, c.verdict())
		fmt.Fprintln(tw)
	}
	if c := r.Crash; c != nil {
		fmt.Fprintln(tw, "CRASH TO RESUME\tsync_interval\tack wait\tp50\tp99\tmax\tp99 without re-lost\tcalls made twice per kill\ttarget")
		fmt.Fprintf(tw, "  %d kills of %d worker processes, %d chunks resumed, %d re-lost\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f (at most %.1f in flight)\t%s\n",
			c.Kills, c.Workers, c.Chunks, c.Relost, c.SyncInterval, c.AckWait, c.P50.Round(10*time.Millisecond), c.P99.Round(10*time.Millisecond),
			c.Max.Round(10*time.Millisecond), c.CleanP99.Round(10*time.Millisecond), c.TwicePerKill, c.InFlightBound, c.verdict())
		fmt.Fprintln(tw)
	}
	if len(r.Growth) > 0 {
		fmt.Fprintln(tw, "COST GROWTH\tsync_interval\tconcurrency\tms per chunk\tworker peak RSS\tjob status\ttarget")
		for _, g := range r.Growth {
			fmt.Fprintf(tw, "  one job of %s chunks\t%s\t%d\t%.2f\t%s\t%s\t%s\n",
				operator.Thousands(g.Chunks), g.SyncInterval, g.Concurrency, g.MsPerChunk, mib(g.PeakRSS), g.Status, growthVerdict(r.Growth))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Storage) > 0 {
		fmt.Fprintln(tw, "STORAGE\tduring the largest job\tafter it\tonce retention ran\tkept for")
		var total [3]uint64
		for _, s := range r.Storage {
			fmt.Fprintf(tw, "  %s\t%s msgs, %s\t%s msgs, %s\t%s msgs, %s\t%s\n", s.Name, operator.Thousands(int(s.PeakMsgs)), mib(int64(s.PeakBytes)),
				operator.Thousands(int(s.AfterMsgs)), mib(int64(s.AfterBytes)), operator.Thousands(int(s.RetainedMsgs)), mib(int64(s.RetainedBytes)), s.Kept)
			total[0], total[1], total[2] = total[0]+s.PeakBytes, total[1]+s.AfterBytes, total[2]+s.RetainedBytes
		}
		fmt.Fprintf(tw, "  total\t%s\t%s\t%s\t\n", mib(int64(total[0])), mib(int64(total[1])), mib(int64(total[2])))
		if v := retentionVerdict(r.Storage); v != "" {
			fmt.Fprintf(tw, "  %s\n", v)
		}
		fmt.Fprintln(tw)
	}
}

// printSustained writes the soak and release-ramp sections.
func (r *benchReport) printSustained(tw io.Writer) {
	if k := r.Soak; k != nil {
		fmt.Fprintln(tw, "SOAK\tsync_interval\tjobs\tchunks (dead-lettered)\tretention (calls/effects/records)\tgoverned bytes at 25/50/75/100%\taged bytes at the end\ttarget")
		at := func(f float64) string {
			if len(k.Samples) == 0 {
				return "-"
			}
			return mib(int64(k.Samples[min(int(f*float64(len(k.Samples))), len(k.Samples)-1)].Governed))
		}
		aged := "-"
		if n := len(k.Samples); n > 0 {
			aged = mib(int64(k.Samples[n-1].Aged))
		}
		fmt.Fprintf(tw, "  %s of jobs of %d chunks, %d at once\t%s\t%s\t%s (%s)\t%s / %s / %s\t%s %s %s %s\t%s\t%s\n",
			k.Duration, soakJobChunks, soakInFlight, k.SyncInterval, operator.Thousands(k.Jobs), operator.Thousands(k.Chunks), operator.Thousands(k.DeadLettered),
			k.Retention.Calls, k.Retention.Effects, k.Retention.Records, at(0.25), at(0.5), at(0.75), at(1), aged, k.verdict())
		if d := k.Drained; d != nil {
			fmt.Fprintf(tw, "  once the jobs stopped, retention brought the governed stores to %s (peak %s) at %.0f s\t\t\t\t\t\t\t\n", mib(int64(d.Governed)), mib(int64(k.peak())), d.AtSecs)
		}
		fmt.Fprintln(tw)
	}
	if k := r.Ramp; k != nil {
		fmt.Fprintln(tw, "RELEASE RAMP\torders held (resumed)\tCRM requests a second from its breaker's close\tpeak\ttarget")
		fmt.Fprintf(tw, "  %d orders, %d worker processes, CRM down %s\t%d (%d)\t%s\t%d\t%s\n", k.Orders, k.Workers, k.Outage, k.Held, k.Resumed,
			strings.Trim(fmt.Sprint(k.AfterClose), "[]"), k.peak(), k.verdict())
		fmt.Fprintln(tw)
	}
}

// printFleets writes the sections measured on fleets of processes:
// fleet, limits, tenants and partitions.
func (r *benchReport) printFleets(tw io.Writer) {
	if len(r.Fleet) > 0 || r.FleetSkipped != "" {
		fmt.Fprintln(tw, "FLEET	processes x slots	wall	workers CPU	server CPU	control CPU	CPU/chunk (workers+server)	delivered to workers/chunk	job record, journal writes/chunk	job")
		for _, f := range r.Fleet {
			fmt.Fprintf(tw, "  one job of %s chunks, model %s, %s journal\t%d x %d\t%.1f s\t%.1f s\t%.1f s\t%.1f s\t%.2f ms\t%.1f\t%.1f, %.1f\t%s\n", operator.Thousands(f.Chunks), fleetLatency, f.Journal,
				f.Processes, f.Concurrency, f.WallSecs, f.WorkersCPU, f.ServerCPU, f.ControlCPU, f.CPUPerChunkMS, f.DeliveredPerChunk,
				f.JobWritesPerChunk, f.JournalWritesPerChunk, f.Status)
			if fl := f.Baseline; fl != nil {
				fmt.Fprintf(tw, "    the same calls in a bare loop, a row acknowledged each\t%d x %d\t%.1f s\t\t\t\t%.2f ms\t%.1f\t-, %d\t\n",
					f.Processes, f.Concurrency, fl.WallSecs, fl.CPUPerChunkMS, fl.DeliveredPerChunk, fl.CallsPerChunk)
			}
		}
		if r.FleetSkipped != "" {
			fmt.Fprintf(tw, "  fleet rows skipped: %s\n", r.FleetSkipped)
		} else {
			fmt.Fprintf(tw, "  %s\n", fleetVerdict(r.Fleet))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Limits) > 0 || r.LimitsSkipped != "" {
		fmt.Fprintln(tw, "LIMITS\tlimit\twall\tadmitted\t429s\tmost sent in a minute\tadmitted a minute (quota 600)\ttier-1 retries\tredeliveries\tjob")
		for _, l := range r.Limits {
			declared := "none"
			if l.Limited {
				declared = "600 rpm, 200,000 tpm"
			}
			fmt.Fprintf(tw, "  %d x %d slots, %d chunks\t%s\t%.1f s\t%s\t%s\t%d\t%.0f (%.0f%%)\t%d\t%d\t%s\n", l.Workers, l.Slots, l.Chunks, declared, l.WallSecs,
				operator.Thousands(l.Admitted), operator.Thousands(l.Refused), l.MostInAMinute, l.PerMinute, 100*l.Share, l.Tier1Retries, l.Redeliveries, l.Status)
		}
		if r.LimitsSkipped != "" {
			fmt.Fprintf(tw, "  limits rows skipped: %s\n", r.LimitsSkipped)
		} else {
			fmt.Fprintf(tw, "  %s\n", limitsVerdict(r.Limits))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Tenants) > 0 || r.TenantsSkipped != "" {
		fmt.Fprintln(tw, "TENANTS	tenant a's cap	b alone	b beside a	ratio	a's chunks done while b ran	b's job")
		for _, t := range r.Tenants {
			capped := "none (job windows only)"
			if t.Cap > 0 {
				capped = fmt.Sprintf("%d chunks in flight", t.Cap)
			}
			fmt.Fprintf(tw, "  %d x %d slots, a: %s chunks, b: %d\t%s\t%.1f s\t%.1f s\t%.2fx\t%s\t%s\n", t.Workers, t.Slots, operator.Thousands(t.LargeChunks), t.SmallChunks,
				capped, t.AloneSecs, t.BesideSecs, t.Ratio, operator.Thousands(t.LargeDoneAfter-t.LargeDoneBefore), t.Status)
		}
		if r.TenantsSkipped != "" {
			fmt.Fprintf(tw, "  tenants rows skipped: %s\n", r.TenantsSkipped)
		} else {
			fmt.Fprintf(tw, "  %s\n", tenantsVerdict(r.Tenants))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Partitions) > 0 || r.PartitionsSkipped != "" {
		fmt.Fprintln(tw, "PARTITIONS\tservers\tpartitions (jobs in each)\tleaders\tworkers on\tcalls/s\tCPU share of each node")
		for _, p := range r.Partitions {
			shares := make([]string, len(p.NodeShare))
			for i, s := range p.NodeShare {
				shares[i] = fmt.Sprintf("%.0f%% (%.1f s)", 100*s, p.NodeCPU[i])
			}
			fmt.Fprintf(tw, "  %d jobs x %d chunks x %d calls, %d at once\t%s\t%d %v\t%s\t%s\t%s\t%s\n", p.Jobs, p.Chunks, p.CallsPerChunk, p.Concurrency,
				p.Servers, p.Partitions, p.JobsPerPartition, strings.Join(p.Leaders, ","), p.ConnectedTo, operator.Thousands(int(p.CallsPerSec)), strings.Join(shares, ", "))
		}
		if r.PartitionsSkipped != "" {
			fmt.Fprintf(tw, "  partitions rows skipped: %s\n", r.PartitionsSkipped)
		} else {
			fmt.Fprintf(tw, "  %s\n", partitionsVerdict(r.Partitions))
		}
	}
}

// machine describes this computer for the report.
func machine() string {
	model := runtime.GOARCH
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s/%s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}
