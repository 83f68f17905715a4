package consumers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/consumers/worker"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// extSystem is an external system a test can take down: while down it
// answers every request with a 503 after a moment, as a failing service
// behind a load balancer does. It counts every request it gets.
type extSystem struct {
	down     atomic.Bool
	requests atomic.Int64
	mu       sync.Mutex
	at       []time.Time
}

// since counts the requests made from t to t+d.
func (s *extSystem) within(t time.Time, d time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.at {
		if !a.Before(t) && a.Before(t.Add(d)) {
			n++
		}
	}
	return n
}

func (s *extSystem) call(ctx context.Context) error {
	s.requests.Add(1)
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
	if !s.down.Load() {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Millisecond):
	}
	return salvagetype.Transient(503, errors.New("service unavailable"))
}

// outagePipeline: each chunk reads from crm in stage "fetch" (required)
// and from extra in stage "enrich" (optional).
func outagePipeline(t *testing.T, crm, extra *extSystem) *recovery.Plan {
	t.Helper()
	read := func(name, system string, s *extSystem) salvagetype.Tool {
		return salvagetype.Tool{Name: name, System: system, Call: func(ctx context.Context, c salvagetype.ToolCall) (salvagetype.ToolResult, error) {
			return salvagetype.ToolResult{Output: json.RawMessage(`"ok"`)}, s.call(ctx)
		}}
	}
	tools, err := recovery.NewTools(read("crm-read", "crm", crm), read("extra-read", "extra", extra))
	if err != nil {
		t.Fatal(err)
	}
	agent := func(name, tool string) salvagetype.Agent {
		return salvagetype.Agent{Name: name, Run: func(ctx context.Context, t *salvagetype.Turn) (any, error) {
			return t.Tool(ctx, tool, map[string]any{"chunk": t.Chunk})
		}}
	}
	return &recovery.Plan{
		Name: "outage",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var v struct{ N int }
			if err := json.Unmarshal(in, &v); err != nil || v.N < 1 {
				return nil, fmt.Errorf("%w: want {\"n\": N}", salvagetype.ErrBadInput)
			}
			out := make([]json.RawMessage, v.N)
			for i := range out {
				out[i] = json.RawMessage(fmt.Sprint(i + 1))
			}
			return out, nil
		},
		Tools: tools,
		Stages: []salvagetype.Stage{
			{Name: "fetch", Agents: []salvagetype.Agent{agent("reader", "crm-read")}},
			{Name: "enrich", Agents: []salvagetype.Agent{agent("enricher", "extra-read")}, Optional: true},
		},
	}
}

func submitOutage(t *testing.T, b *bundle, n int) string {
	t.Helper()
	id := ulid.Make().String()
	body, _ := json.Marshal(map[string]any{"job_id": id, "input": map[string]int{"n": n}})
	if _, err := b.JS.Publish(b.ctx, streams.Pipeline("outage").Subject(), body); err != nil {
		t.Fatal(err)
	}
	return id
}

func (b *bundle) breaker(t *testing.T, system string) kv.Breaker {
	t.Helper()
	br, _, err := b.stores.Breakers.Get(b.ctx, system)
	if errors.Is(err, kv.ErrNotFound) {
		return kv.Breaker{System: system, State: salvagetype.BreakerClosed}
	}
	if err != nil {
		t.Fatal(err)
	}
	return br
}

// An outage of a required system holds chunks instead of failing them:
// the breaker opens after its failures, at most one probe per cool-down
// reaches the system while it is down, nothing is dead-lettered, and
// every chunk finishes once the system is back, its held chunks returned
// at a ramped rate rather than all at once.
func TestBreakerHoldsChunksThroughAnOutage(t *testing.T) {
	t.Parallel()
	crm, extra := &extSystem{}, &extSystem{}
	b := setup(t, setupOpts{pipelines: []*recovery.Plan{outagePipeline(t, crm, extra)}})
	const workers, concurrency, chunks = 2, 4, 60
	policy := salvagetype.BreakerPolicy{Failures: 3, Window: 10 * time.Second, CoolDown: time.Second}
	for i := range workers {
		b.startWorkerWith(t, fmt.Sprintf("w%d", i+1), func(c *worker.Config) {
			c.Concurrency = concurrency
			c.Breakers = worker.BreakerPolicies{Systems: map[string]salvagetype.BreakerPolicy{"crm": policy}}
		})
	}
	crm.down.Store(true)
	job := submitOutage(t, b, chunks)

	salvagetest.Eventually(t, time.Minute, func() bool { return b.breaker(t, "crm").State != salvagetype.BreakerClosed }, "the crm breaker to open")
	atOpen := crm.requests.Load()
	// Three cool-downs: three probes may reach crm, each failing and
	// opening the breaker again.
	salvagetest.Eventually(t, time.Minute, func() bool { return b.breaker(t, "crm").Opens >= 4 }, "three failed probes")
	br := b.breaker(t, "crm")
	since := crm.requests.Load() - atOpen
	// Calls already in flight when it opened (at most one per slot), then
	// one probe per cool-down: Opens-1 failed ones and maybe one running.
	if bound := int64(workers*concurrency + br.Opens); since > bound {
		t.Fatalf("crm got %d requests after its breaker opened; want at most %d (in flight + one probe per cool-down)", since, bound)
	}
	t.Logf("crm: %d requests before the breaker opened, %d after it (opens: %d)", atOpen, since, br.Opens)

	if n := b.streamMsgs(t, streams.Hold); n == 0 {
		t.Fatal("no chunk is held on SALVAGE_HOLD during the outage")
	}
	info, err := b.JS.Consumer(b.ctx, streams.Hold, streams.System("crm").HoldConsumer())
	if err != nil {
		t.Fatal(err)
	}
	if ci, err := info.Info(b.ctx); err != nil || !ci.Paused {
		t.Fatalf("hold-crm consumer should be paused while the breaker is open: %+v, %v", ci, err)
	}
	held := 0
	for c := 1; c <= chunks; c++ {
		if cp, _, err := b.stores.Parts()[0].Checkpoints.Get(b.ctx, job, c); err == nil && cp.Status == salvagetype.ChunkHeld {
			held++
			if cp.HeldOn != "crm" || cp.Stage != 1 {
				t.Fatalf("chunk %d held on %q at stage %d; want crm, stage 1", c, cp.HeldOn, cp.Stage)
			}
		}
	}
	if held == 0 {
		t.Fatal("no checkpoint says held")
	}

	crm.down.Store(false)
	j := b.waitJob(t, job, salvagetype.JobDone)
	// The ramp: each worker's holder returns one chunk at the close, then
	// ReleaseRampStart a second, doubling every ReleaseRampDouble. Released at once,
	// every held chunk would call crm within the first second.
	closed := b.breaker(t, "crm").UpdatedAt
	first := crm.within(closed, time.Second)
	bound := workers*(1+int(math.Ceil(salvagetype.ReleaseRampStart*math.Exp2(float64(time.Second)/float64(salvagetype.ReleaseRampDouble))))) + 1
	if held <= bound {
		t.Fatalf("only %d chunks were held: too few to tell a ramp from a flood (bound %d)", held, bound)
	}
	if first > bound {
		t.Errorf("crm got %d requests in the first second after its breaker closed, with %d chunks held; want at most %d (the ramp)", first, held, bound)
	}
	t.Logf("crm after the close: %d requests in the first second, %d in the first five (%d chunks were held)", first, crm.within(closed, 5*time.Second), held)
	if j.Summary.Done != chunks || j.Summary.DeadLetters != 0 {
		t.Fatalf("job summary %+v; want %d done and no dead letters", j.Summary, chunks)
	}
	if envs := b.dlq(t); len(envs) != 0 {
		t.Fatalf("%d envelopes; the outage must not reach the DLQ: first %+v", len(envs), envs[0])
	}
	if br := b.breaker(t, "crm"); br.State != salvagetype.BreakerClosed {
		t.Fatalf("breaker %+v; want closed after the outage", br)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Hold) == 0 }, "SALVAGE_HOLD to be empty")
	ci, err := info.Info(b.ctx)
	if err != nil || ci.Paused {
		t.Fatalf("hold-crm consumer should run again once the breaker closed: %+v, %v", ci, err)
	}
}

// An optional stage whose system's breaker is open is skipped at once:
// the job ends partial with the gap named, and the system gets no call
// after its breaker opened. The job has more chunks than its window: the
// ones the window lets in after the breaker opened go to the work queue,
// not onto the hold of a system no chunk parks on (they waited there for
// its cool-down, an hour, when every open breaker of the pipeline paced
// its admissions).
func TestOptionalStageSkippedWhileBreakerOpen(t *testing.T) {
	t.Parallel()
	crm, extra := &extSystem{}, &extSystem{}
	b := setup(t, setupOpts{pipelines: []*recovery.Plan{outagePipeline(t, crm, extra)}})
	const concurrency, chunks = 4, 60
	b.startWorkerWith(t, "w1", func(c *worker.Config) {
		c.Concurrency = concurrency
		c.Breakers = worker.BreakerPolicies{Default: salvagetype.BreakerPolicy{Failures: 2, CoolDown: time.Hour}}
	})
	extra.down.Store(true)
	job := submitOutage(t, b, chunks)
	j := b.waitJob(t, job, salvagetype.JobPartial)
	if j.Summary.Done != chunks || j.Summary.Degraded != chunks || j.Summary.DeadLetters != 0 {
		t.Fatalf("summary %+v; want every chunk done without its optional stage", j.Summary)
	}
	for c := 1; c <= chunks; c++ {
		if cp := b.checkpoint(t, job, c); len(cp.Gaps) != 1 || cp.Gaps[0] != "enrich" {
			t.Fatalf("chunk %d gaps %v; want [enrich]", c, cp.Gaps)
		}
	}
	// Retries of the first calls and the calls in flight when the breaker
	// opened; after that, none.
	if got, bound := extra.requests.Load(), int64(concurrency*(testRetry.MaxRetries+1)); got > bound {
		t.Fatalf("extra got %d requests; want at most %d", got, bound)
	}
	if br := b.breaker(t, "extra"); br.State != salvagetype.BreakerOpen {
		t.Fatalf("extra breaker %+v; want open", br)
	}
	if n := b.streamMsgs(t, streams.Hold); n != 0 {
		t.Fatalf("%d chunks held; an optional stage never holds its chunk", n)
	}
	if crm.requests.Load() != chunks {
		t.Fatalf("crm got %d requests; want one per chunk", crm.requests.Load())
	}
}

// Cancelling a job whose chunks are held ends them cancelled at the stage
// they were held in, and their parked messages leave SALVAGE_HOLD.
func TestCancelEndsHeldChunks(t *testing.T) {
	t.Parallel()
	crm, extra := &extSystem{}, &extSystem{}
	b := setup(t, setupOpts{pipelines: []*recovery.Plan{outagePipeline(t, crm, extra)}})
	b.startWorkerWith(t, "w1", func(c *worker.Config) {
		c.Breakers = worker.BreakerPolicies{Default: salvagetype.BreakerPolicy{Failures: 2, CoolDown: time.Hour}}
	})
	crm.down.Store(true)
	const chunks = 6
	job := submitOutage(t, b, chunks)
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Hold) == chunks }, "every chunk held")
	if _, err := operator.New(b.JS, b.stores).Cancel(b.ctx, job, "tester"); err != nil {
		t.Fatal(err)
	}
	j := b.waitJob(t, job, salvagetype.JobCancelled)
	if j.Summary.Cancelled != chunks {
		t.Fatalf("summary %+v; want %d cancelled", j.Summary, chunks)
	}
	for c := 1; c <= chunks; c++ {
		if cp := b.checkpoint(t, job, c); cp.Status != salvagetype.CancelledAtStage(1) {
			t.Fatalf("chunk %d is %s; want %s", c, cp.Status, salvagetype.CancelledAtStage(1))
		}
	}
	if n := b.streamMsgs(t, streams.Hold); n != 0 {
		t.Fatalf("%d held messages left after the cancel", n)
	}
}
