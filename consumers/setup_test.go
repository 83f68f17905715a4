package consumers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/consumers/deadletter"
	"github.com/salvagehq/salvage/consumers/splitter"
	"github.com/salvagehq/salvage/consumers/worker"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(childWorkerEnv); url != "" {
		os.Exit(runChildWorker(url))
	}
	salvagetest.VerifyNoLeaks(m)
}

// Test pipeline "test": the job input is {"chunks": [<mode>, ...]} and each
// chunk runs three one-agent stages whose behaviour its mode decides.
const (
	modeOK           = "ok"
	modePermanent    = "permanent"      // stage 2 fails with a 400
	modeAlwaysFails  = "always-fails"   // stage 2 fails transiently forever
	modeFailOnce     = "fail-once"      // stage 2 fails transiently once per delivery's first call
	modeWaitCancel   = "wait-cancel"    // stage 2 blocks until its context ends
	modeBlockInChild = "block-in-child" // stage 2 blocks forever in a child worker process
	modeGate         = "gate"           // stage 2 waits for the test to open the gate
	// modeSiblingFails: in stage 2, agent2b fails with a 400 while agent2
	// is mid-call; agent2 must be recorded cancelled, not failed.
	modeSiblingFails = "sibling-fails"
	// modeFailsInParent: stage 2 fails with a 400 in this process and
	// works in a child worker process, as if fixed between runs.
	modeFailsInParent = "fails-in-parent"
	// modeAgentPanics and modeToolPanics panic in stage 2, in the agent
	// and in the tool it calls.
	modeAgentPanics = "agent-panics"
	modeToolPanics  = "tool-panics"
	// modeFailThenGate: stage 2 fails transiently on its first three
	// calls (one delivery's tier 1), then waits for the gate.
	modeFailThenGate = "fail-then-gate"
	// modeUsage: each stage's agent makes usageCalls model calls of one
	// completion token each; in a child worker process stage 2 blocks
	// forever at its call usageBlockAt, to be SIGKILLed there.
	modeUsage = "usage"
)

const (
	usageCalls   = 25
	usageBlockAt = 10
)

// calls counts agent calls per "job/chunk/stage".
var calls sync.Map

func callCount(job string, chunk, stage int) int64 {
	v, ok := calls.Load(fmt.Sprintf("%s/%d/%d", job, chunk, stage))
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// gates hold modeGate chunks in stage 2 until closed.
var gates sync.Map

func gate(job string, chunk int) chan struct{} {
	g, _ := gates.LoadOrStore(fmt.Sprintf("%s/%d", job, chunk), make(chan struct{}))
	return g.(chan struct{})
}

// failedOnce remembers the idempotency keys modeFailOnce already failed.
var failedOnce sync.Map

type toolInput struct {
	Mode  string `json:"mode"`
	Stage int    `json:"stage"`
	N     int    `json:"n,omitempty"`
}

func testPipeline(inChild bool) *recovery.Plan {
	tool := salvagetype.Tool{Name: "tool", System: "test", Call: func(ctx context.Context, c salvagetype.ToolCall) (salvagetype.ToolResult, error) {
		var in toolInput
		if err := json.Unmarshal(c.Input, &in); err != nil {
			return salvagetype.ToolResult{}, salvagetype.Permanent(400, err)
		}
		job, chunk := jobChunk(ctx)
		cnt, _ := calls.LoadOrStore(fmt.Sprintf("%s/%d/%d", job, chunk, in.Stage), new(atomic.Int64))
		cnt.(*atomic.Int64).Add(1)
		ok := salvagetype.ToolResult{Output: json.RawMessage(`"ok"`)}
		if in.Mode == modeUsage {
			if inChild && in.Stage == 2 && in.N == usageBlockAt {
				select {}
			}
			ok.Usage = &salvagetype.Usage{Model: "m", CompletionTokens: 1}
			return ok, nil
		}
		if in.Stage != 2 {
			return ok, nil
		}
		switch in.Mode {
		case modePermanent:
			return ok, salvagetype.Permanent(400, errors.New("bad request"))
		case modeAlwaysFails:
			return ok, salvagetype.Transient(503, errors.New("unavailable"))
		case modeFailOnce:
			if _, failed := failedOnce.LoadOrStore(c.IdempotencyKey, true); !failed {
				return ok, salvagetype.RateLimited(time.Millisecond, errors.New("slow down"))
			}
		case modeWaitCancel:
			<-ctx.Done()
			return ok, ctx.Err()
		case modeBlockInChild:
			if inChild {
				select {}
			}
		case modeToolPanics:
			panic("the tool fell over")
		case modeFailsInParent:
			if !inChild {
				return ok, salvagetype.Permanent(400, errors.New("bad request until fixed"))
			}
		case modeFailThenGate:
			if cnt.(*atomic.Int64).Load() <= 3 {
				return ok, salvagetype.Transient(503, errors.New("unavailable for a moment"))
			}
			select {
			case <-gate(job, chunk):
			case <-ctx.Done():
				return ok, ctx.Err()
			}
		case modeGate:
			select {
			case <-gate(job, chunk):
			case <-ctx.Done():
				return ok, ctx.Err()
			}
		case modeSiblingFails:
			close(gate(job, chunk)) // agent2 is mid-call: let agent2b fail
			<-ctx.Done()
			return ok, ctx.Err()
		case modeSiblingFails + "-b":
			<-gate(job, chunk)
			return ok, salvagetype.Permanent(400, errors.New("clause too long for the model"))
		}
		return ok, nil
	}}
	tools, err := recovery.NewTools(tool)
	if err != nil {
		panic(err)
	}
	// Stage 3's agent is stage 1's agent again: it needs the memory it
	// wrote in stage 1, which only its snapshot carries across a crash.
	agent := func(stage int) salvagetype.Agent {
		name := fmt.Sprintf("agent%d", stage)
		if stage == 3 {
			name = "agent1"
		}
		return salvagetype.Agent{Name: name, Run: func(ctx context.Context, t *salvagetype.Turn) (any, error) {
			var mode string
			if err := json.Unmarshal(t.Input, &mode); err != nil {
				return nil, salvagetype.Permanent(400, err)
			}
			if stage == 2 && mode == modeAgentPanics {
				var agents []string
				_ = agents[len(mode)] // out of range: the agent panics
			}
			st := t.State()
			switch stage {
			case 1:
				st.Memory = map[string]json.RawMessage{"mode": json.RawMessage(strconv.Quote(mode))}
			case 3:
				if string(st.Memory["mode"]) != strconv.Quote(mode) {
					return nil, salvagetype.Permanent(0, fmt.Errorf("agent1 lost its stage-1 memory: %v", st.Memory))
				}
			}
			if mode == modeUsage {
				if stage == 3 {
					return map[string]any{"stage": stage, "mode": mode}, nil
				}
				for n := range usageCalls {
					if _, err := t.Tool(withJobChunk(ctx, t.Job, t.Chunk), "tool", toolInput{Mode: mode, Stage: stage, N: n}); err != nil {
						return nil, err
					}
				}
				return map[string]any{"stage": stage, "mode": mode}, nil
			}
			_, err := t.Tool(withJobChunk(ctx, t.Job, t.Chunk), "tool", toolInput{Mode: mode, Stage: stage})
			return map[string]any{"stage": stage, "mode": mode}, err
		}}
	}
	return &recovery.Plan{
		Name: "test",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var v struct {
				Chunks []json.RawMessage `json:"chunks"`
				Panic  bool              `json:"panic"`
			}
			if err := json.Unmarshal(in, &v); err != nil {
				return nil, fmt.Errorf("%w: %w", salvagetype.ErrBadInput, err)
			}
			if v.Panic {
				panic("split cannot cope")
			}
			return v.Chunks, nil
		},
		Tools: tools,
		Stages: []salvagetype.Stage{
			{Name: "one", Agents: []salvagetype.Agent{agent(1)}},
			{Name: "two", Agents: []salvagetype.Agent{agent(2), {Name: "agent2b", Run: func(ctx context.Context, t *salvagetype.Turn) (any, error) {
				// Only modeSiblingFails gives stage 2 a second, failing agent.
				var mode string
				if err := json.Unmarshal(t.Input, &mode); err != nil || mode != modeSiblingFails {
					return nil, err
				}
				_, err := t.Tool(withJobChunk(ctx, t.Job, t.Chunk), "tool", toolInput{Mode: modeSiblingFails + "-b", Stage: 2})
				return nil, err
			}}}},
			{Name: "three", Agents: []salvagetype.Agent{agent(3)}},
		},
	}
}

// testRetry keeps tier 1 fast in tests.
var testRetry = recovery.RetryPolicy{MaxRetries: 2, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, TotalCap: time.Second}

// testBreakers keeps the test pipeline's system from tripping its
// breaker: the tests of tier 2 and the DLQ fail it on purpose. The
// breaker tests use systems of their own.
var testBreakers = worker.BreakerPolicies{Systems: map[string]salvagetype.BreakerPolicy{"test": {Failures: 1 << 20}}}

func mustRegistry(t *testing.T, extra ...*recovery.Plan) *recovery.Registry {
	t.Helper()
	reg, err := recovery.NewRegistry(append([]*recovery.Plan{testPipeline(false)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

type bundle struct {
	*salvagetest.Server
	stores *kv.Stores
	reg    *recovery.Registry
	opts   streams.Options
	ctx    context.Context
	wg     *sync.WaitGroup
}

type setupOpts struct {
	ackWait      time.Duration
	noDeadLetter bool
	// maxPayload is the splitter's limit (4096 unless set, so oversized
	// input is cheap to make).
	maxPayload int
	// splitterMaxDeliver bounds a job message's deliveries (default).
	splitterMaxDeliver int
	// pipelines are registered besides the test pipeline.
	pipelines []*recovery.Plan
}

func setup(t *testing.T, so setupOpts) *bundle {
	t.Helper()
	nb := salvagetest.StartServer(t)
	if so.ackWait == 0 {
		so.ackWait = 2 * time.Second
	}
	opts := streams.Options{AckWait: so.ackWait, MaxDeliver: 3, SplitterAckWait: time.Second, SplitterMaxDeliver: so.splitterMaxDeliver}
	ctx, cancel := context.WithCancel(context.Background())
	if err := streams.Provision(ctx, nb.JS, opts); err != nil {
		t.Fatal(err)
	}
	stores, err := kv.Provision(ctx, nb.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := mustRegistry(t, so.pipelines...)
	if err := provisionPipelines(ctx, nb.JS, reg.Names(), opts); err != nil {
		t.Fatal(err)
	}
	b := &bundle{Server: nb, stores: stores, reg: reg, opts: opts, ctx: ctx, wg: &sync.WaitGroup{}}
	t.Cleanup(func() { cancel(); b.wg.Wait() })
	if so.maxPayload == 0 {
		so.maxPayload = 4096
	}
	sp, err := splitter.New(nb.JS, stores, splitter.Config{Registry: reg, MaxPayload: so.maxPayload, MaxDeliver: opts.SplitterMaxDeliver})
	if err != nil {
		t.Fatal(err)
	}
	b.goRun(sp.Run)
	if !so.noDeadLetter {
		b.startDeadLetterer(t)
	}
	return b
}

func (b *bundle) goRun(run func(context.Context) error) {
	b.wg.Add(1)
	go func() { defer b.wg.Done(); _ = run(b.ctx) }()
}

func (b *bundle) startDeadLetterer(t *testing.T) {
	t.Helper()
	dl, err := deadletter.New(b.JS, b.stores, deadletter.Config{SweepInterval: 250 * time.Millisecond, UnknownPipelineWait: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.goRun(dl.Run)
}

// startWorker runs a worker until the test ends; stop ends it early.
func (b *bundle) startWorker(t *testing.T, id string) (stop func()) {
	t.Helper()
	return b.startWorkerWith(t, id, nil)
}

// startWorkerWith is startWorker with tune applied to the configuration.
func (b *bundle) startWorkerWith(t *testing.T, id string, tune func(*worker.Config)) (stop func()) {
	t.Helper()
	cfg := worker.Config{
		ID: id, Registry: b.reg, AckWait: b.opts.AckWait, MaxDeliver: b.opts.MaxDeliver,
		Retry: testRetry, NakDelay: 50 * time.Millisecond, DrainTimeout: 2 * time.Second, Breakers: testBreakers,
	}
	if tune != nil {
		tune(&cfg)
	}
	w, err := worker.New(b.JS, b.stores, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(done)
		beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
		beaten := make(chan struct{})
		keepRecord(beatCtx, b.stores, w, beaten)
		_ = w.Run(ctx)
		stopBeat()
		<-beaten
	}()
	return func() { cancel(); <-done }
}

// keepRecord writes w's process record with its lease, as the root
// package's client does (a reaper hands back the chunks of a process whose
// lease lapsed): once now, then three times a lease until ctx ends, when
// it removes the record and closes done.
func keepRecord(ctx context.Context, stores *kv.Stores, w *worker.Worker, done chan<- struct{}) {
	state := kv.WorkerState{Worker: salvagetype.Worker{ID: w.ID(), Roles: []salvagetype.Role{salvagetype.RoleWorker}, LeaseMS: w.Lease().Milliseconds(), StartedAt: time.Now()}}
	_ = stores.Workers.Beat(ctx, state)
	go func() {
		defer close(done)
		t := time.NewTicker(w.Lease() / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				_ = stores.Workers.Gone(context.WithoutCancel(ctx), state.ID)
				return
			case <-t.C:
				_ = stores.Workers.Beat(ctx, state)
			}
		}
	}()
}

// submit publishes a job of the test pipeline and returns its id.
func (b *bundle) submit(t *testing.T, modes ...string) string {
	t.Helper()
	id := submitTo(t, b.ctx, b.JS, modes...)
	if id == "" {
		t.Fatal("submit failed")
	}
	return id
}

// submitTo publishes a job of the test pipeline; "" when the publish failed.
func submitTo(t *testing.T, ctx context.Context, js jetstream.JetStream, modes ...string) string {
	t.Helper()
	id := ulid.Make().String()
	in, _ := json.Marshal(map[string]any{"chunks": modes})
	body, _ := json.Marshal(map[string]any{"job_id": id, "input": json.RawMessage(in)})
	if _, err := js.Publish(ctx, streams.Pipeline("test").Subject(), body); err != nil {
		t.Logf("publish: %v", err)
		return ""
	}
	return id
}

func (b *bundle) waitJob(t *testing.T, id string, status salvagetype.JobStatus) kv.Job {
	t.Helper()
	var j kv.Job
	// A bound on the wait, not a speed: a loaded machine makes it slower.
	salvagetest.Eventually(t, 2*time.Minute, func() bool {
		var err error
		j, err = b.stores.Jobs.Get(b.ctx, id)
		return err == nil && j.Status == status
	}, "job %s to be %s (last: %+v)", id, status, &j)
	return j
}

func (b *bundle) checkpoint(t *testing.T, job string, chunk int) kv.Checkpoint {
	t.Helper()
	cp, _, err := b.stores.Parts()[0].Checkpoints.Get(b.ctx, job, chunk)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// dlq returns every envelope in SALVAGE_DLQ.
func (b *bundle) dlq(t *testing.T) []salvagetype.Envelope {
	t.Helper()
	s, err := b.JS.Stream(b.ctx, streams.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []salvagetype.Envelope
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(b.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var e salvagetype.Envelope
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func (b *bundle) streamMsgs(t *testing.T, name string) uint64 {
	t.Helper()
	s, err := b.JS.Stream(b.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// subscribe collects messages on subject for the rest of the test.
func (b *bundle) subscribe(t *testing.T, subject string) func() []*nats.Msg {
	t.Helper()
	var mu sync.Mutex
	var got []*nats.Msg
	sub, err := b.Conn.Subscribe(subject, func(m *nats.Msg) { mu.Lock(); got = append(got, m); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []*nats.Msg { mu.Lock(); defer mu.Unlock(); return append([]*nats.Msg(nil), got...) }
}

type jobChunkKey struct{}

// withJobChunk tells the test tool which chunk calls it, for its counters.
func withJobChunk(ctx context.Context, job string, chunk int) context.Context {
	return context.WithValue(ctx, jobChunkKey{}, fmt.Sprintf("%s/%d", job, chunk))
}

func jobChunk(ctx context.Context) (string, int) {
	v, _ := ctx.Value(jobChunkKey{}).(string)
	var job string
	var chunk int
	if i := strings.LastIndexByte(v, '/'); i > 0 {
		job = v[:i]
		chunk, _ = strconv.Atoi(v[i+1:])
	}
	return job, chunk
}

// provisionPipelines provisions the pools of each of pipelines.
func provisionPipelines(ctx context.Context, js jetstream.JetStream, pipelines []string, o streams.Options) error {
	for _, p := range pipelines {
		if err := streams.Pipeline(p).Provision(ctx, js, o); err != nil {
			return err
		}
	}
	return nil
}
