package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/chatmodel"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/natsconf"
)

// The baseline of a fleet row is the same work in a bare loop, with none
// of Salvage: each process pulls a chunk from a work queue, makes the
// chunk's calls one after another to the same simulated model over HTTP
// with the same client (chatmodel), publishes one row per call to a stream
// and waits for its acknowledgement, then acknowledges the chunk. No
// claims, checkpoints, counts, heartbeats, breakers, no calls in parallel
// inside a chunk and no batching, so its messages per chunk are the same at
// every fleet size. How its CPU per chunk grows from the smallest fleet to
// the largest is what the machine charges for spreading the same slots over
// more processes; a fleet row's CPU over its baseline's is what Salvage
// costs beside it. It is not a lower bound: Salvage batches journal rows,
// which the loop does not.
const (
	baselineStream       = "BENCH_BASELINE"
	baselineSubject      = "bench.baseline.chunks"
	baselineRowsStream   = "BENCH_BASELINE_ROWS"
	baselineRowsSubject  = "bench.baseline.rows"
	baselineConsumer     = "baseline"
	baselineWorkerPrefix = "salvage bench-baseline-worker"
	baselineSystemPrompt = "You review one clause of a contract. Answer with one integer from 0 to 10: how risky it is."
)

// baselineResult is one baseline run.
type baselineResult struct {
	WallSecs          float64 `json:"wall_seconds"`
	CPUPerChunkMS     float64 `json:"cpu_per_chunk_ms"`
	DeliveredPerChunk float64 `json:"delivered_to_workers_per_chunk"`
	CallsPerChunk     int     `json:"calls_per_chunk"`
}

// baseline runs the baseline of a fleet row: procs processes of conc slots,
// chunks chunks of calls calls each, on a fresh server and model.
func (b *bench) baseline(ctx context.Context, binary string, procs, conc, chunks, calls int) (res baselineResult, err error) {
	res.CallsPerChunk = calls
	fs, err := startFleetServer(binary, nil, fleetLatency)
	if err != nil {
		return res, err
	}
	defer fs.stop()
	nc, err := natsconf.Connect(natsconf.ConnectConfig{URL: fs.url, Name: "salvage bench", Wait: true})
	if err != nil {
		return res, err
	}
	defer nc.Close()
	js, cons, err := provisionBaseline(ctx, nc)
	if err != nil {
		return res, err
	}

	var workers []*demo.Worker
	defer func() { demo.StopWorkers(workers) }()
	for i := range procs {
		id := fmt.Sprintf("baseline-w%d", i+1)
		w, err := b.e.StartProcess(ctx, id, []string{"bench-baseline-worker", "--server", fs.url, "--model-url", fs.simURL,
			"--concurrency", strconv.Itoa(conc), "--calls", strconv.Itoa(calls)})
		if w != nil {
			workers = append(workers, w)
		}
		if err != nil {
			return res, err
		}
	}
	cpu := func() float64 {
		var t float64
		for _, pid := range workersOf(workers) {
			t += procCPU(pid)
		}
		return t + procCPU(fs.srv.Process.Pid)
	}
	before, err := deliveredTo(ctx, fs.monitor, baselineWorkerPrefix)
	if err != nil {
		return res, err
	}
	c0 := cpu()
	start := time.Now()
	for i := range chunks {
		if _, err := js.Publish(ctx, baselineSubject+"."+strconv.Itoa(i), []byte(strconv.Itoa(i))); err != nil {
			return res, err
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return res, err
		}
		if info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= uint64(chunks) {
			break
		}
		if len(workersOf(workers)) < procs {
			return res, errors.New("a baseline worker process exited")
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	res.WallSecs = time.Since(start).Seconds()
	c1 := cpu()
	after, err := deliveredTo(ctx, fs.monitor, baselineWorkerPrefix)
	if err != nil {
		return res, err
	}
	res.CPUPerChunkMS = 1000 * (c1 - c0) / float64(chunks)
	res.DeliveredPerChunk = float64(after-before) / float64(chunks)
	return res, nil
}

// provisionBaseline makes the baseline's work queue, the stream its rows
// go to, and the consumer its workers share.
func provisionBaseline(ctx context.Context, nc *nats.Conn) (jetstream.JetStream, jetstream.Consumer, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: baselineStream, Subjects: []string{baselineSubject + ".>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		return nil, nil, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: baselineRowsStream, Subjects: []string{baselineRowsSubject + ".>"}}); err != nil {
		return nil, nil, err
	}
	cons, err := js.CreateConsumer(ctx, baselineStream, jetstream.ConsumerConfig{
		Durable: baselineConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxAckPending: -1,
	})
	return js, cons, err
}

// BaselineWorkerCmd is a baseline worker process (see baselineStream).
// Hidden: only `salvage bench` starts it.
func (e *Env) BaselineWorkerCmd() *cobra.Command {
	var modelURL string
	var concurrency, calls int
	cmd := &cobra.Command{
		Use: "bench-baseline-worker", Hidden: true, Args: cobra.NoArgs,
		Short: "A worker process of the baseline `salvage bench` measures beside each fleet row",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			nc, js, err := e.Connect(baselineWorkerPrefix)
			if err != nil {
				return err
			}
			defer nc.Close()
			cons, err := js.Consumer(ctx, baselineStream, baselineConsumer)
			if err != nil {
				return err
			}
			model, err := chatmodel.New(contractreview.ModelTool, chatmodel.Config{
				BaseURL: strings.TrimSuffix(modelURL, "/") + "/v1", Model: simmodel.ModelName, APIKey: "baseline",
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "NATS_URL=%s\n", nc.ConnectedUrl())
			var wg sync.WaitGroup
			errs := make(chan error, concurrency)
			for range concurrency {
				wg.Go(func() {
					if err := baselineSlot(ctx, js, cons, model, calls); err != nil && ctx.Err() == nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			return <-errs
		},
	}
	cmd.Flags().StringVar(&modelURL, "model-url", "", "the simulated model's base URL")
	cmd.Flags().IntVar(&concurrency, "concurrency", 1, "chunks in flight")
	cmd.Flags().IntVar(&calls, "calls", 1, "model calls per chunk")
	return cmd
}

// baselineSlot runs one slot of a baseline worker until ctx ends: a chunk at a
// time, its calls one after another, each row published and acknowledged.
func baselineSlot(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, model salvage.Tool, calls int) error {
	clauses := make([]string, calls)
	for i := range clauses {
		clauses[i] = contractreview.Contract(1, int64(i))
	}
	for ctx.Err() == nil {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		for m := range batch.Messages() {
			chunk := string(m.Data())
			for i := range calls {
				in, err := json.Marshal(salvage.ChatRequest{Messages: []salvage.Message{
					{Role: "system", Content: baselineSystemPrompt},
					{Role: "user", Content: "Clause " + chunk + ": " + clauses[i]},
				}, MaxTokens: 8})
				if err != nil {
					return err
				}
				key := chunk + "." + strconv.Itoa(i)
				out, err := model.Call(ctx, salvage.ToolCall{IdempotencyKey: key, Input: in})
				if err != nil {
					return fmt.Errorf("model call %s: %w", key, err)
				}
				if _, err := js.Publish(ctx, baselineRowsSubject+"."+key, out.Output); err != nil {
					return fmt.Errorf("row %s: %w", key, err)
				}
			}
			if err := m.DoubleAck(ctx); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}
