package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/natsconf"
)

// Floor measurements: what JetStream stores per second on the same server
// with nothing of Salvage in the way.
const (
	floorMsgs       = 60_000
	floorPayload    = 512
	floorBatch      = 100
	floorPublishers = 4
	// floorRowPayload is a journal row's size (0.97 KiB a row in the
	// storage table of docs/benchmarks.md).
	floorRowPayload = 1000
)

// throughputRow is one sync_interval's throughput and floors.
type throughputRow struct {
	// Servers says what ran it: one embedded server, or a cluster of
	// nats-server processes with replicated streams.
	Servers          string  `json:"servers"`
	SyncInterval     string  `json:"sync_interval"`
	Journal          string  `json:"journal_writes"`
	Jobs             int     `json:"jobs"`
	Chunks           int     `json:"chunks_per_job"`
	CallsPerChunk    int     `json:"calls_per_chunk"`
	Concurrency      int     `json:"concurrency"`
	CallsPerSec      float64 `json:"calls_per_sec"`
	ChunksPerSec     float64 `json:"chunks_per_sec"`
	RowsPerFlush     float64 `json:"rows_per_flush"`
	FloorBatchPerSec float64 `json:"floor_atomic_batch_msgs_per_sec"`
	FloorAsyncPerSec float64 `json:"floor_async_msgs_per_sec"`
	// FloorRowsPerSec is what one call's row costs JetStream by itself:
	// async publishes of a row's size, each to a key of its own with the
	// expected-last-sequence check a row's write carries. Shown beside the
	// async floor, not taken as the target's.
	FloorRowsPerSec float64 `json:"floor_kv_rows_per_sec"`
	// FloorKind names the floor the ratio is taken against: atomic
	// batches under always, async publishes under the default.
	FloorKind  string  `json:"floor_kind"`
	FloorRatio float64 `json:"calls_per_floor_msg"`
	Target     float64 `json:"target_calls_per_sec"`
}

func (t throughputRow) verdict() string {
	if t.Target == 0 {
		return "none: shown beside the single node"
	}
	return fmt.Sprintf("≥ %s calls/s, ≥ %.1f of the floor: %s", operator.Thousands(int(t.Target)), targetFloorRatio,
		verdict(t.CallsPerSec >= t.Target && t.FloorRatio >= targetFloorRatio))
}

// throughput runs the reference job shape on a fresh server with sync
// interval si — or, with cluster naming a nats-server binary, on three
// such processes with R3 streams and the server's default interval —
// then measures the floors on the same servers.
func (b *bench) throughput(ctx context.Context, si time.Duration, cluster string) (throughputRow, error) {
	row := throughputRow{SyncInterval: natsconf.SyncIntervalString(si), Jobs: b.o.jobs, Chunks: b.o.chunks,
		CallsPerChunk: contractreview.CallsPerChunk, Concurrency: b.o.concurrency, FloorKind: "async", Target: targetDefaultCalls}
	mode := salvage.JournalPipelined
	if si == natsconf.SyncAlways {
		mode, row.FloorKind, row.Target = salvage.JournalAtomic, "batches", targetAlwaysCalls
	}
	row.Journal = string(mode)
	var s *benchServer
	var err error
	if cluster != "" {
		s, err = startBenchCluster(ctx, cluster)
	} else {
		s, err = startBenchServer(si)
	}
	if err != nil {
		return row, err
	}
	defer s.close()
	row.Servers = s.servers
	if cluster != "" {
		// The targets are the single node's; a cluster row is context.
		row.Target = 0
	}
	c, stop, err := b.startReference(ctx, s, mode, 1)
	if err != nil {
		return row, err
	}
	defer stop()
	b.log.Info().Str("sync_interval", row.SyncInterval).Msg("throughput: running the reference job shape")
	jobs, secs, err := referenceJobs(ctx, c, b.o.jobs, b.o.chunks)
	if err != nil {
		return row, err
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	calls := 0
	for _, id := range ids {
		st, err := c.ChunkList(ctx, id, &salvage.Page{Limit: b.o.chunks})
		if err != nil {
			return row, err
		}
		for _, ch := range st.Chunks {
			calls += ch.Calls
		}
	}
	if want := b.o.jobs * b.o.chunks * contractreview.CallsPerChunk; calls != want {
		return row, fmt.Errorf("%d calls journaled, want %d", calls, want)
	}
	row.CallsPerSec = float64(calls) / secs
	row.ChunksPerSec = float64(b.o.jobs*b.o.chunks) / secs
	flushes, rows := c.JournalStats()
	row.RowsPerFlush = float64(rows) / float64(max(flushes, 1))

	b.log.Info().Str("sync_interval", row.SyncInterval).Msg("throughput: measuring the JetStream floors")
	if row.FloorBatchPerSec, err = floorBatches(ctx, s.js, s.replicas); err != nil {
		return row, fmt.Errorf("atomic batch floor: %w", err)
	}
	if row.FloorAsyncPerSec, err = floorAsync(ctx, s.js, s.replicas); err != nil {
		return row, fmt.Errorf("async floor: %w", err)
	}
	if row.FloorRowsPerSec, err = floorRows(ctx, s.js, s.replicas); err != nil {
		return row, fmt.Errorf("row floor: %w", err)
	}
	floor := row.FloorAsyncPerSec
	if row.FloorKind == "batches" {
		floor = row.FloorBatchPerSec
	}
	row.FloorRatio = row.CallsPerSec / floor
	return row, nil
}

// startReference starts a client on s that runs the reference job shape
// (contract review against the zero-latency simulated model, no tier-1
// retries, --concurrency chunks at once) with the worker and dead-letter
// roles, journal writes mode and partitions partitions.
func (b *bench) startReference(ctx context.Context, s *benchServer, mode salvage.JournalMode, partitions int) (*salvage.Client, func(), error) {
	model, err := simmodel.New(simmodel.Config{Seed: 1})
	if err != nil {
		return nil, nil, err
	}
	return b.startClient(ctx, s, &salvage.Config{
		Pipelines:   []*salvage.Pipeline{contractreview.New(model.Tool(contractreview.ModelTool))},
		Roles:       []salvage.Role{salvage.RoleWorker, salvage.RoleDeadLetter},
		Concurrency: b.o.concurrency, Retries: -1, JournalWrites: mode, Partitions: partitions,
	})
}

// referenceJobs submits n contract-review jobs of chunks chunks at once,
// waits for each to finish done, and returns them with the seconds from
// the first submission to the last finish.
func referenceJobs(ctx context.Context, c *salvage.Client, n, chunks int) ([]*salvage.Job, float64, error) {
	input := contractreview.Input{Text: contractreview.Contract(chunks, 1)}
	start := time.Now()
	ids := make([]string, n)
	for i := range ids {
		var err error
		if ids[i], err = c.JobSubmit(ctx, contractreview.Name, input, nil); err != nil {
			return nil, 0, err
		}
	}
	jobs := make([]*salvage.Job, 0, n)
	for _, id := range ids {
		j, err := c.JobWait(ctx, id)
		if err != nil {
			return nil, 0, err
		}
		if j.Status != salvage.JobDone {
			return nil, 0, fmt.Errorf("job %s ended %s", id, j.Status)
		}
		jobs = append(jobs, j)
	}
	return jobs, time.Since(start).Seconds(), nil
}

// floorConfig is the stream of one floor measurement.
func floorConfig(name string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, AllowAtomicPublish: true, Replicas: replicas}
}

// floorBatches stores floorMsgs messages as atomic batches of floorBatch
// from floorPublishers concurrent publishers, and returns messages/s.
func floorBatches(ctx context.Context, js jetstream.JetStream, replicas int) (float64, error) {
	const name = "FLOOR_BATCH"
	if _, err := js.CreateStream(ctx, floorConfig(name, replicas)); err != nil {
		return 0, err
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	payload := make([]byte, floorPayload)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	start := time.Now()
	for range floorPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(floorBatch)
				if n > floorMsgs {
					return
				}
				msgs := make([]*nats.Msg, floorBatch)
				for i := range msgs {
					msgs[i] = &nats.Msg{Subject: name + "." + strconv.FormatInt((n+int64(i))%64, 10), Data: payload, Header: nats.Header{}}
				}
				if _, err := jetstreamext.PublishMsgBatch(ctx, js, msgs); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	rate := float64(floorMsgs) / time.Since(start).Seconds()
	if firstErr != nil {
		return 0, firstErr
	}
	return rate, floorStored(ctx, js, name)
}

// floorStored checks a floor stream holds every message the floor
// counted: a publish whose ack reported an error must not count.
func floorStored(ctx context.Context, js jetstream.JetStream, name string) error {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs != floorMsgs {
		return fmt.Errorf("%s stored %d of %d messages", name, info.State.Msgs, floorMsgs)
	}
	return nil
}

// floorAsync stores floorMsgs messages with pipelined async publishes and
// returns messages/s.
func floorAsync(ctx context.Context, js jetstream.JetStream, replicas int) (float64, error) {
	const name = "FLOOR_ASYNC"
	payload := make([]byte, floorPayload)
	return floorPipelined(ctx, js, floorConfig(name, replicas), func(i int) *nats.Msg {
		return &nats.Msg{Subject: name + "." + strconv.Itoa(i%64), Data: payload}
	})
}

// floorRows stores floorMsgs journal-sized rows with pipelined async
// publishes, each under a key of its own in a stream kept like a KV
// bucket (a few messages a subject) and expecting the key to be new, as
// a call's row is written; it returns rows/s.
func floorRows(ctx context.Context, js jetstream.JetStream, replicas int) (float64, error) {
	const name = "FLOOR_ROWS"
	cfg := jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, MaxMsgsPerSubject: 5,
		Discard: jetstream.DiscardNew, AllowDirect: true, Replicas: replicas}
	payload := make([]byte, floorRowPayload)
	return floorPipelined(ctx, js, cfg, func(i int) *nats.Msg {
		m := nats.NewMsg(name + ".JOB." + strconv.Itoa(i/116) + ".0.2.agent." + strconv.Itoa(i%116))
		m.Data = payload
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		return m
	})
}

// floorPipelined creates the stream cfg describes, publishes msg(i) for
// each of floorMsgs messages without waiting between them, and returns
// messages/s once every one is stored; the stream is deleted after.
func floorPipelined(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, msg func(i int) *nats.Msg) (float64, error) {
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		return 0, err
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), cfg.Name) }()
	start := time.Now()
	for i := range floorMsgs {
		if _, err := js.PublishMsgAsync(msg(i), jetstream.WithStallWait(time.Minute)); err != nil {
			return 0, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return float64(floorMsgs) / time.Since(start).Seconds(), floorStored(ctx, js, cfg.Name)
}
