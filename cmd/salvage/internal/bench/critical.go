package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/natsconf"
)

// The reference job of the write-up: 22 clauses, 116 model calls each.
const (
	criticalChunks  = 22
	criticalLatency = 15 * time.Millisecond
)

// criticalRow compares the reference job's wall time with its critical
// path: the chunks run in waves of the worker's concurrency, and a chunk
// takes, per stage, as many call latencies as its longest agent makes
// calls one after another.
type criticalRow struct {
	SyncInterval  string        `json:"sync_interval"`
	Chunks        int           `json:"chunks"`
	CallsPerChunk int           `json:"calls_per_chunk"`
	Latency       time.Duration `json:"latency_ns"`
	Concurrency   int           `json:"concurrency"`
	StageDepths   []int         `json:"stage_depths"`
	// CriticalPath takes every call at the nominal latency; MeasuredPath
	// takes each as long as the model really took (its timer overshoots a
	// little under load), and is what the ratio is taken against.
	CriticalPath time.Duration `json:"critical_path_ns"`
	MeasuredPath time.Duration `json:"measured_critical_path_ns"`
	Wall         time.Duration `json:"wall_ns"`
	Ratio        float64       `json:"ratio"`
}

func (c criticalRow) verdict() string {
	return fmt.Sprintf("≤ %.2f: %s", targetCriticalRatio, verdict(c.Ratio <= targetCriticalRatio))
}

func (b *bench) critical(ctx context.Context) (criticalRow, error) {
	si := natsconf.DefaultServerConfig().SyncInterval
	row := criticalRow{SyncInterval: natsconf.SyncIntervalString(si), Chunks: criticalChunks,
		CallsPerChunk: contractreview.CallsPerChunk, Latency: criticalLatency, Concurrency: salvage.ConcurrencyDefault}
	s, err := startBenchServer(si)
	if err != nil {
		return row, err
	}
	defer s.close()
	// A spread this small makes every call take the latency itself, so
	// the critical path is exact.
	model, err := simmodel.New(simmodel.Config{Seed: 1, Latency: criticalLatency, Spread: 1e-9})
	if err != nil {
		return row, err
	}
	c, stop, err := b.startClient(ctx, s, &salvage.Config{
		Pipelines: []*salvage.Pipeline{contractreview.New(model.Tool(contractreview.ModelTool))},
		Roles:     []salvage.Role{salvage.RoleWorker, salvage.RoleDeadLetter},
	})
	if err != nil {
		return row, err
	}
	defer stop()
	b.log.Info().Msg("critical path: running the reference job")
	start := time.Now()
	id, err := c.JobSubmit(ctx, contractreview.Name, contractreview.Input{Text: contractreview.Contract(criticalChunks, 1)}, nil)
	if err != nil {
		return row, err
	}
	j, err := c.JobWait(ctx, id)
	if err != nil {
		return row, err
	}
	row.Wall = time.Since(start)
	if j.Status != salvage.JobDone {
		return row, fmt.Errorf("job %s ended %s", id, j.Status)
	}
	tr, err := c.JobTrace(ctx, id)
	if err != nil {
		return row, err
	}
	// Stage depth: the most calls one agent made in the stage, in any
	// chunk (an agent's calls are sequential; agents of a stage run in
	// parallel).
	for _, ch := range tr.Chunks {
		for _, call := range ch.Calls {
			for len(row.StageDepths) < call.Stage {
				row.StageDepths = append(row.StageDepths, 0)
			}
			row.StageDepths[call.Stage-1] = max(row.StageDepths[call.Stage-1], call.Seq)
		}
	}
	depth := 0
	for _, d := range row.StageDepths {
		depth += d
	}
	waves := (criticalChunks + row.Concurrency - 1) / row.Concurrency
	row.CriticalPath = time.Duration(waves*depth) * criticalLatency
	row.MeasuredPath = measuredPath(tr, row.Concurrency)
	row.Ratio = row.Wall.Seconds() / row.MeasuredPath.Seconds()
	return row, nil
}

// measuredPath is the job's critical path with the calls as long as they
// really took: per chunk, the sum over stages of its slowest agent's
// calls back to back; the chunks, in order, each on the first of
// concurrency slots to come free.
func measuredPath(tr *salvage.Trace, concurrency int) time.Duration {
	slots := make([]time.Duration, concurrency)
	chunks := slices.Clone(tr.Chunks)
	slices.SortFunc(chunks, func(a, b salvage.TraceChunk) int { return a.Chunk - b.Chunk })
	for _, ch := range chunks {
		type stageAgent struct {
			stage int
			agent string
		}
		agents := map[stageAgent]float64{}
		stages := map[int]float64{}
		for _, call := range ch.Calls {
			k := stageAgent{call.Stage, call.Agent}
			agents[k] += call.LatencyMS
			stages[call.Stage] = max(stages[call.Stage], agents[k])
		}
		path := 0.0
		for _, ms := range stages {
			path += ms
		}
		i := slices.Index(slots, slices.Min(slots))
		slots[i] += time.Duration(path * float64(time.Millisecond))
	}
	return slices.Max(slots)
}
