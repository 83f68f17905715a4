package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetype"
)

// The dashboard part's shape: 10,000 job records, then a dashboard
// process per envelope count, each started once the records exist.
const (
	dashboardJobs = 10_000
	// dashboardRSSBar is how much more the dashboard may hold at the
	// largest envelope count than at the smallest (issue 35: 25%).
	dashboardRSSBar = 1.25
	// dashboardSettle is how long after its pages the memory is sampled,
	// dashboardSamples times.
	dashboardSettle  = 3 * time.Second
	dashboardSamples = 6
)

// dashboardRow is one dashboard process: the records it watched and the
// memory it held once it had caught up and served its pages.
type dashboardRow struct {
	Envelopes int `json:"envelopes"`
	Jobs      int `json:"jobs"`
	// CatchUp is from the process's start to its summary counting every
	// record.
	CatchUp time.Duration `json:"catch_up_ns"`
	// RSS is the process's resident memory (VmRSS) once it served its
	// pages: the median of samples over dashboardSettle. Peak is its
	// high-water mark (VmHWM, or a sample's VmRSS past it), reached as it
	// caught up.
	RSS  int64 `json:"rss_bytes"`
	Peak int64 `json:"peak_rss_bytes"`
}

// dashboardVerdict holds the rows to the bar: resident memory at the most
// envelopes within dashboardRSSBar of that at the fewest.
func dashboardVerdict(rows []dashboardRow) string {
	if len(rows) < 2 || rows[0].RSS == 0 {
		return "needs two rows"
	}
	ratio := float64(rows[len(rows)-1].RSS) / float64(rows[0].RSS)
	return fmt.Sprintf("RSS %.2fx from %s to %s envelopes (<= %.2fx): %s", ratio, operator.Thousands(rows[0].Envelopes),
		operator.Thousands(rows[len(rows)-1].Envelopes), dashboardRSSBar, verdict(ratio <= dashboardRSSBar))
}

// dashboard writes dashboardJobs job records and, for each envelope count
// (ascending), the envelope records up to it; then it starts a
// `salvage up --role dashboard` process, waits for its summary to count
// every record, serves the summary, a page of envelopes and the metrics
// three times each, and reads the process's memory.
func (b *bench) dashboard(ctx context.Context) ([]dashboardRow, error) {
	s, _, stores, stop, err := b.startStores(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	statuses := []salvagetype.JobStatus{salvagetype.JobRunning, salvagetype.JobDone, salvagetype.JobDone, salvagetype.JobPartial}
	err = putAll(ctx, 0, dashboardJobs, func(i int) error {
		return stores.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: ulid.Make().String(), Pipeline: "contract-review", Chunks: 100, Status: statuses[i%len(statuses)]}})
	})
	if err != nil {
		return nil, err
	}
	var rows []dashboardRow
	written := 0
	for _, n := range b.o.dashboard {
		if err := putEnvelopes(ctx, stores, written, n); err != nil {
			return rows, err
		}
		written = max(written, n)
		row, err := b.dashboardRow(ctx, s.url, written)
		if err != nil {
			return rows, fmt.Errorf("%d envelopes: %w", written, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (b *bench) dashboardRow(ctx context.Context, url string, envelopes int) (dashboardRow, error) {
	row := dashboardRow{Envelopes: envelopes, Jobs: dashboardJobs}
	ports, err := natsconf.FreePorts(1)
	if err != nil {
		return row, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	start := time.Now()
	w, err := b.e.StartProcess(ctx, "bench-dashboard", []string{"up", "--role", operator.RoleDashboard, "--server", url, "--http", addr})
	if w != nil {
		defer demo.StopWorkers([]*demo.Worker{w})
	}
	if err != nil {
		return row, err
	}
	base := "http://" + addr
	for {
		var sum struct {
			Envelopes    int                       `json:"envelopes"`
			JobsByStatus map[string]map[string]int `json:"jobs_by_status"`
		}
		if err := demo.GetJSON(ctx, base+"/api/summary", &sum); err == nil {
			jobs := 0
			for _, m := range sum.JobsByStatus {
				for _, n := range m {
					jobs += n
				}
			}
			if sum.Envelopes >= envelopes && jobs >= dashboardJobs {
				break
			}
		}
		select {
		case <-ctx.Done():
			return row, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > 10*time.Minute {
			return row, fmt.Errorf("the dashboard did not count %d envelopes and %d jobs in 10 minutes", envelopes, dashboardJobs)
		}
	}
	row.CatchUp = time.Since(start)
	for range 3 {
		for _, path := range []string{"/api/summary", "/api/envelopes?limit=100", "/metrics"} {
			if err := demo.GetJSON(ctx, base+path, nil); err != nil {
				return row, err
			}
		}
	}
	// The process hands back what its catch-up read through once it has
	// caught up, and its heap breathes between collections: the median
	// of samples over a few seconds.
	var samples []int64
	for range dashboardSamples {
		select {
		case <-ctx.Done():
			return row, ctx.Err()
		case <-time.After(dashboardSettle / dashboardSamples):
		}
		// The kernel keeps the high-water mark lazily: one make test saw
		// a sample's VmRSS (82,571,264) pass the last sample's VmHWM
		// (82,530,304). The peak is the most either said.
		rss, peak := procMemory(w.Cmd.Process.Pid)
		samples, row.Peak = append(samples, rss), max(row.Peak, peak, rss)
	}
	slices.Sort(samples)
	row.RSS = samples[len(samples)/2]
	return row, nil
}

// procMemory reads a process's resident memory and its high-water mark
// from /proc, in bytes; zeros where /proc is not there.
func procMemory(pid int) (rss, peak int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}
