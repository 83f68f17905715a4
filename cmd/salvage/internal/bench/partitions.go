package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
)

// partitionsJobs is how many jobs a partitions row runs: enough for three
// partitions to get work each (a job's partition is a hash of its id).
const partitionsJobs = 24

// partitionsRow is one partition count on the bench cluster: the
// reference job shape, each node's share of the servers' CPU, and which
// node leads each partition's chunk stream.
type partitionsRow struct {
	Partitions    int     `json:"partitions"`
	Servers       string  `json:"servers"`
	Jobs          int     `json:"jobs"`
	Chunks        int     `json:"chunks_per_job"`
	CallsPerChunk int     `json:"calls_per_chunk"`
	Concurrency   int     `json:"concurrency"`
	CallsPerSec   float64 `json:"calls_per_sec"`
	// JobsPerPartition counts the jobs each partition got.
	JobsPerPartition []int `json:"jobs_per_partition"`
	// NodeCPU is each nats-server process's CPU seconds over the run,
	// NodeShare its share of their sum.
	NodeCPU   []float64 `json:"node_cpu_seconds"`
	NodeShare []float64 `json:"node_cpu_share"`
	// Leaders are the servers leading each partition's chunk stream.
	Leaders []string `json:"leaders"`
	// LeaderShare is the share of the node leading partition 0.
	LeaderShare float64 `json:"leader_cpu_share"`
	// ConnectedTo is the server the workers' connection is on: where it
	// leads a partition's streams, that partition's writes take no route.
	ConnectedTo string `json:"connected_to"`
}

// maxShare is the largest node's share.
func (p partitionsRow) maxShare() float64 { return slices.Max(append([]float64{0}, p.NodeShare...)) }

// partitionsVerdict holds the rows to the bars of issue 35: with three
// partitions no node carries more than 45% of the servers' CPU, and
// calls/s is at least one partition's on the same machine.
func partitionsVerdict(rows []partitionsRow) string {
	if len(rows) < 2 {
		return "-"
	}
	one, many := rows[0], rows[len(rows)-1]
	ok := many.maxShare() <= 0.45 && many.CallsPerSec >= one.CallsPerSec
	return fmt.Sprintf("%d partitions: busiest node %.0f%% of the servers' CPU (bar 45%%; one partition's leader %.0f%%), %s calls/s vs %s with one (bar: at least as many): %s",
		many.Partitions, 100*many.maxShare(), 100*one.LeaderShare, operator.Thousands(int(many.CallsPerSec)), operator.Thousands(int(one.CallsPerSec)), verdict(ok))
}

// partitions runs the reference job shape (partitionsJobs jobs of
// --chunks chunks, --concurrency at once, pipelined journal writes) on a
// fresh three-node cluster of binary for each partition count.
func (b *bench) partitions(ctx context.Context, binary string, counts []int) ([]partitionsRow, error) {
	var rows []partitionsRow
	for _, n := range counts {
		row, err := b.partitionRow(ctx, binary, n)
		if err != nil {
			return rows, fmt.Errorf("%d partitions: %w", n, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (b *bench) partitionRow(ctx context.Context, binary string, n int) (partitionsRow, error) {
	row := partitionsRow{Partitions: n, Jobs: partitionsJobs, Chunks: b.o.chunks, CallsPerChunk: contractreview.CallsPerChunk,
		Concurrency: b.o.concurrency, JobsPerPartition: make([]int, n)}
	s, err := startBenchCluster(ctx, binary)
	if err != nil {
		return row, err
	}
	defer s.close()
	row.Servers = s.servers
	c, stop, err := b.startReference(ctx, s, salvage.JournalPipelined, n)
	if err != nil {
		return row, err
	}
	defer stop()
	// The client asked the leaders to spread at its start; an election
	// takes a moment.
	leaders := func() []string {
		out := make([]string, n)
		names := s.js.StreamNames(ctx)
		for name := range names.Name() {
			// A partition's chunk stream, not its buckets' (KV_...).
			k, ok := salvage.StorePartition(name)
			if !ok || k >= n || strings.HasPrefix(name, "KV_") {
				continue
			}
			if st, err := s.js.Stream(ctx, name); err == nil && st.CachedInfo().Cluster != nil {
				out[k] = st.CachedInfo().Cluster.Leader
			}
		}
		return out
	}
	// The leaders that were seen spread are the row's: a second read
	// could land in an election.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		row.Leaders = leaders()
		if (!slices.Contains(row.Leaders, "") && len(slices.Compact(slices.Sorted(slices.Values(row.Leaders)))) == min(n, benchClusterNodes)) ||
			time.Now().After(deadline) {
			break
		}
	}
	row.ConnectedTo = s.nc.ConnectedServerName()
	b.log.Info().Int("partitions", n).Strs("leaders", row.Leaders).Msg("partitions: running the reference job shape")
	cpu0 := make([]float64, len(s.procs))
	for i, p := range s.procs {
		cpu0[i] = procCPU(p.Process.Pid)
	}
	jobs, secs, err := referenceJobs(ctx, c, row.Jobs, row.Chunks)
	if err != nil {
		return row, err
	}
	for _, j := range jobs {
		row.JobsPerPartition[j.Partition]++
	}
	total := 0.0
	for i, p := range s.procs {
		row.NodeCPU = append(row.NodeCPU, procCPU(p.Process.Pid)-cpu0[i])
		total += row.NodeCPU[i]
	}
	for i := range row.NodeCPU {
		row.NodeShare = append(row.NodeShare, row.NodeCPU[i]/max(total, 1e-9))
		if strings.HasSuffix(row.Leaders[0], fmt.Sprintf("-%d", i+1)) {
			row.LeaderShare = row.NodeShare[i]
		}
	}
	row.CallsPerSec = float64(row.Jobs*row.Chunks*row.CallsPerChunk) / secs
	return row, nil
}
