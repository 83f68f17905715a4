package bench

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/natsconf"
)

// fleetLatency is the simulated model's latency in the fleet rows.
const fleetLatency = 5 * time.Millisecond

// fleetRow is one fleet size: the same job at the same total concurrency
// on Processes worker processes of Concurrency slots each.
type fleetRow struct {
	Processes   int     `json:"processes"`
	Concurrency int     `json:"concurrency_per_process"`
	Chunks      int     `json:"chunks"`
	WallSecs    float64 `json:"wall_seconds"`
	// WorkersCPU, ServerCPU and ControlCPU are CPU seconds from the
	// job's submission to its finish: the worker processes together, the
	// nats-server process, and the bench's own process (the dead-letter
	// role and the simulated model).
	WorkersCPU float64 `json:"workers_cpu_seconds"`
	ServerCPU  float64 `json:"server_cpu_seconds"`
	ControlCPU float64 `json:"control_cpu_seconds"`
	// CPUPerChunkMS is (WorkersCPU + ServerCPU) per chunk, in ms.
	CPUPerChunkMS float64 `json:"cpu_per_chunk_ms"`
	// DeliveredPerChunk is the messages the server delivered to the
	// worker processes' connections, per chunk (its out_msgs).
	DeliveredPerChunk float64 `json:"delivered_to_workers_per_chunk"`
	// JobWritesPerChunk is the job record's writes per chunk (its KV
	// stream's sequence), JournalWritesPerChunk the journal's.
	JobWritesPerChunk     float64 `json:"job_writes_per_chunk"`
	JournalWritesPerChunk float64 `json:"journal_writes_per_chunk"`
	Status                string  `json:"job_status"`
	// Journal is how the journal rows were written (--fleet-journal).
	Journal string `json:"journal_writes"`
	// Floor is the same shape of fleet doing the same calls with none of
	// Salvage (see baselineStream).
	Baseline *baselineResult `json:"baseline,omitempty"`
}

// fleetVerdict holds the rows to the bars of issue 35: CPU per chunk at
// the largest fleet within 1.3x the smallest's, and messages delivered
// per chunk within 10% across them.
func fleetVerdict(rows []fleetRow) string {
	if len(rows) < 2 {
		return "-"
	}
	first, last := rows[0], rows[len(rows)-1]
	lo, hi := first.DeliveredPerChunk, first.DeliveredPerChunk
	for _, r := range rows {
		lo, hi = min(lo, r.DeliveredPerChunk), max(hi, r.DeliveredPerChunk)
	}
	cpu := last.CPUPerChunkMS / first.CPUPerChunkMS
	spread := (hi - lo) / lo
	out := fmt.Sprintf("cpu/chunk %.2fx (<= 1.3x) %s; delivered/chunk spread %.0f%% (<= 10%%) %s",
		cpu, verdict(cpu <= 1.3), 100*spread, verdict(spread <= 0.10))
	if first.Baseline != nil && last.Baseline != nil && first.Baseline.CPUPerChunkMS > 0 && last.Baseline.CPUPerChunkMS > 0 {
		out += fmt.Sprintf("\n  the bare loop's cpu/chunk %.2fx; Salvage over the loop %.2fx at %d x %d, %.2fx at %d x %d",
			last.Baseline.CPUPerChunkMS/first.Baseline.CPUPerChunkMS,
			first.CPUPerChunkMS/first.Baseline.CPUPerChunkMS, first.Processes, first.Concurrency,
			last.CPUPerChunkMS/last.Baseline.CPUPerChunkMS, last.Processes, last.Concurrency)
	}
	return out
}

// fleetServerConf is the fleet rows' nats-server: one node, the server's
// default sync_interval, a monitoring port for the connections' counts.
const fleetServerConf = `server_name: bench-fleet
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
max_payload: 1MB
jetstream { store_dir: %q }
`

// fleetServer is what every fleet row and its baseline run on: a fresh
// nats-server process and the simulated model behind HTTP, in this
// process.
type fleetServer struct {
	srv          *exec.Cmd
	url, monitor string
	simURL       string
	stop         func()
}

// startFleetServer starts a fleet row's nats-server (fleetServerConf) and
// simulated model (its latency a call), with quotas on its models.
func startFleetServer(binary string, quotas map[string]sim.Quota, latency time.Duration) (*fleetServer, error) {
	dir, err := os.MkdirTemp("", "salvage-bench-fleet-")
	if err != nil {
		return nil, err
	}
	var undo []func()
	stop := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	undo = append(undo, func() { _ = os.RemoveAll(dir) })
	ports, err := natsconf.FreePorts(2)
	if err != nil {
		stop()
		return nil, err
	}
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, fleetServerConf, ports[0], ports[1], filepath.Join(dir, "store")), 0o600); err != nil {
		stop()
		return nil, err
	}
	srv := exec.Command(binary, "-c", conf)
	demo.DieWithParent(srv)
	if err := srv.Start(); err != nil {
		stop()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	undo = append(undo, func() { _ = srv.Process.Signal(syscall.SIGTERM); _ = srv.Wait() })
	model, err := simmodel.New(simmodel.Config{Seed: 1, Latency: latency})
	if err != nil {
		stop()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stop()
		return nil, err
	}
	hs := &http.Server{Handler: sim.Handler(sim.NewState(sim.Config{Quotas: quotas}), model), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	undo = append(undo, func() { _ = hs.Close() })
	return &fleetServer{
		srv:     srv,
		url:     "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		monitor: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		simURL:  "http://" + ln.Addr().String(),
		stop:    stop,
	}, nil
}

// fleet runs the fleet rows: for each size in b.o.fleet, a fresh
// nats-server process, the dead-letter role in this process, and that
// many `salvage up --role worker` processes sharing b.o.fleetConc slots,
// then one contract-review job of b.o.fleetChunks chunks.
func (b *bench) fleet(ctx context.Context, binary string) ([]fleetRow, error) {
	var rows []fleetRow
	for _, procs := range b.o.fleet {
		row, err := b.fleetRow(ctx, binary, procs)
		if err != nil {
			return rows, fmt.Errorf("%d processes: %w", procs, err)
		}
		calls := max(int(math.Round(row.JournalWritesPerChunk)), 1)
		fl, err := b.baseline(ctx, binary, row.Processes, row.Concurrency, row.Chunks, calls)
		if err != nil {
			return rows, fmt.Errorf("%d processes, the baseline: %w", procs, err)
		}
		row.Baseline = &fl
		rows = append(rows, row)
	}
	return rows, nil
}

func (b *bench) fleetRow(ctx context.Context, binary string, procs int) (row fleetRow, err error) {
	conc := max(b.o.fleetConc/procs, 1)
	row = fleetRow{Processes: procs, Concurrency: conc, Chunks: b.o.fleetChunks, Journal: b.o.fleetJournal}
	fs, err := startFleetServer(binary, nil, fleetLatency)
	if err != nil {
		return row, err
	}
	defer fs.stop()
	url, monitor, srv := fs.url, fs.monitor, fs.srv

	o := b.fleetOpts(fs.simURL, conc)
	client, js, stopClient, err := b.startDeadLetter(ctx, o, url)
	if err != nil {
		return row, err
	}
	defer stopClient()

	b.log.Info().Int("processes", procs).Int("concurrency", conc).Msg("fleet: starting worker processes")
	var workers []*demo.Worker
	defer func() { demo.StopWorkers(workers) }()
	for i := range procs {
		w, err := b.e.StartWorker(ctx, o, url, fmt.Sprintf("fleet-w%d", i+1))
		if w != nil {
			workers = append(workers, w)
		}
		if err != nil {
			return row, err
		}
	}

	cpu := func() (fleet, server, control float64) {
		for _, pid := range workersOf(workers) {
			fleet += procCPU(pid)
		}
		return fleet, procCPU(srv.Process.Pid), selfCPU()
	}
	before, err := deliveredTo(ctx, monitor, "salvage up")
	if err != nil {
		return row, err
	}
	w0, s0, c0 := cpu()
	writes0, err := writesTaken(ctx, js)
	if err != nil {
		return row, err
	}
	start := time.Now()
	id, err := client.JobSubmit(ctx, contractreview.Name, contractreview.Input{Text: contractreview.Contract(b.o.fleetChunks, 1)}, nil)
	if err != nil {
		return row, err
	}
	job, err := client.JobWait(ctx, id)
	if err != nil {
		return row, err
	}
	row.WallSecs = time.Since(start).Seconds()
	w1, s1, c1 := cpu()
	after, err := deliveredTo(ctx, monitor, "salvage up")
	if err != nil {
		return row, err
	}
	row.Status = string(job.Status)
	row.Chunks = job.Chunks
	row.WorkersCPU, row.ServerCPU, row.ControlCPU = w1-w0, s1-s0, c1-c0
	row.CPUPerChunkMS = 1000 * (row.WorkersCPU + row.ServerCPU) / float64(max(row.Chunks, 1))
	row.DeliveredPerChunk = float64(after-before) / float64(max(row.Chunks, 1))
	writes1, err := writesTaken(ctx, js)
	if err != nil {
		return row, err
	}
	row.JobWritesPerChunk = float64(writes1[0]-writes0[0]) / float64(max(row.Chunks, 1))
	row.JournalWritesPerChunk = float64(writes1[1]-writes0[1]) / float64(max(row.Chunks, 1))
	return row, nil
}

// fleetOpts are the worker processes' settings: conc slots each against
// the simulated model at simURL, the job's window open to every slot of
// the fleet.
func (b *bench) fleetOpts(simURL string, conc int) demo.Opts {
	var o demo.Opts
	o.Run.DemoPipelines = true
	o.Run.Register(pflag.NewFlagSet("bench", pflag.ContinueOnError), simmodel.Config{Seed: 1, Latency: fleetLatency})
	o.Run.SimURL = simURL
	o.Run.Concurrency = conc
	o.Run.MaxChunks = max(o.Run.MaxChunks, b.o.fleetChunks)
	o.Run.ChunkWindow = max(o.Run.ChunkWindow, 2*b.o.fleetConc)
	o.Run.JournalWrites = b.o.fleetJournal
	return o
}

// startDeadLetter starts the bench's own client on the server at url:
// the dead-letter role with o's settings. stop stops it and closes its
// connection.
func (b *bench) startDeadLetter(ctx context.Context, o demo.Opts, url string) (*salvage.Client, jetstream.JetStream, func(), error) {
	nc, err := natsconf.Connect(natsconf.ConnectConfig{URL: url, Name: "salvage bench", Wait: true})
	if err != nil {
		return nil, nil, nil, err
	}
	roles := []salvage.Role{salvage.RoleDeadLetter}
	mcp, closeMCP := operator.MCPFor(roles)
	fail := func(err error) (*salvage.Client, jetstream.JetStream, func(), error) {
		closeMCP()
		nc.Close()
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	cfg, err := o.Run.Config(roles, mcp, b.log)
	if err != nil {
		return fail(err)
	}
	client, err := salvage.NewClient(js, cfg)
	if err != nil {
		return fail(err)
	}
	if err := client.Start(ctx); err != nil {
		return fail(err)
	}
	return client, js, func() {
		_ = client.Stop(context.WithoutCancel(ctx))
		closeMCP()
		nc.Close()
	}, nil
}

// workersOf are the pids of the worker processes still running.
func workersOf(ws []*demo.Worker) []int {
	var out []int
	for _, w := range ws {
		if w.Cmd.ProcessState == nil {
			out = append(out, w.Cmd.Process.Pid)
		}
	}
	return out
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times (100 on every Linux Go supports).
const clockTicks = 100

// procCPU reads a process's user + system CPU seconds from /proc; 0 where
// /proc is not there.
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing parenthesis (utime and stime are fields 14
	// and 15 of the line, 12 and 13 after it).
	rest := string(data[strings.LastIndexByte(string(data), ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / clockTicks
}

// selfCPU is this process's user + system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// deliveredTo sums the messages the server delivered to the connections
// named name (its /connz out_msgs), open or closed.
func deliveredTo(ctx context.Context, monitor, name string) (int64, error) {
	var connz struct {
		Conns []struct {
			Name    string `json:"name"`
			OutMsgs int64  `json:"out_msgs"`
		} `json:"connections"`
	}
	if err := demo.GetJSON(ctx, monitor+"/connz?state=all&limit=100000", &connz); err != nil {
		return 0, fmt.Errorf("read %s/connz: %w", monitor, err)
	}
	var n int64
	for _, c := range connz.Conns {
		if c.Name == name {
			n += c.OutMsgs
		}
	}
	return n, nil
}

// writesTaken is the writes the job and journal buckets have taken so
// far: their streams' last sequences, which only grow.
func writesTaken(ctx context.Context, js jetstream.JetStream) ([2]uint64, error) {
	var out [2]uint64
	for i, name := range []string{"KV_salvage_jobs", "KV_salvage_journal"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return out, fmt.Errorf("read %s: %w", name, err)
		}
		out[i] = s.CachedInfo().State.LastSeq
	}
	return out, nil
}
