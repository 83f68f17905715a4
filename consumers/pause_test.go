package consumers_test

import (
	"context"
	"testing"
	"time"

	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// pauseShop pauses (or resumes) the shop pipeline and waits until the
// worker's holder has acted on it: the shop's chunk pool and the hold
// consumer of its parked chunks are paused, or no longer paused.
func (b *bundle) pauseShop(t *testing.T, paused bool) {
	t.Helper()
	if _, _, err := b.stores.Pipelines.SetPaused(b.ctx, shopPipeline, paused, "ann", "maintenance"); err != nil {
		t.Fatal(err)
	}
	for stream, name := range map[string]string{streams.Hold: streams.System(streams.Pipeline(shopPipeline).PausedSystem()).HoldConsumer(), streams.Chunks: streams.Pipeline(shopPipeline).Workers()} {
		b.waitPaused(t, stream, name, paused)
	}
}

// waitPaused waits until consumer name on stream exists and is paused, or
// is not, as paused says.
func (b *bundle) waitPaused(t *testing.T, stream, name string, paused bool) {
	t.Helper()
	salvagetest.Eventually(t, time.Minute, func() bool {
		c, err := b.JS.Consumer(b.ctx, stream, name)
		if err != nil {
			return false
		}
		info, err := c.Info(b.ctx)
		return err == nil && info.Paused == paused
	}, "consumer %s on %s paused=%v", name, stream, paused)
}

// A paused pipeline's chunk pool is paused with JetStream's consumer
// pause: its queued chunks are not delivered at all — no call, no spent
// delivery, nothing parked — while other pipelines run on; the resume
// runs each once.
func TestPausedPipelineDeliversNothingUntilResumed(t *testing.T) {
	t.Parallel()
	b, s := setupShop(t)
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, err := b.stores.Pipelines.Get(b.ctx, shopPipeline)
		return err == nil
	}, "the worker to record the shop pipeline")
	b.pauseShop(t, true)

	job := b.submitOrders(t, shopOrder{ID: "p-1"}, shopOrder{ID: "p-2"}, shopOrder{ID: "p-3"})
	other := b.submit(t, modeOK, modeOK)
	b.waitJob(t, other, salvagetype.JobDone)
	if n := s.count("reserve") + s.count("charge") + s.count("ship"); n != 0 {
		t.Fatalf("%d shop requests from a paused pipeline", n)
	}
	if n := b.streamMsgs(t, streams.Chunks); n != 3 {
		t.Fatalf("%d messages on SALVAGE_CHUNKS; want the 3 queued chunks, undelivered", n)
	}
	c, err := b.JS.Consumer(b.ctx, streams.Chunks, streams.Pipeline(shopPipeline).Workers())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(b.ctx); err != nil || info.NumPending != 3 || info.Delivered.Consumer != 0 {
		t.Fatalf("the shop's pool while paused: %+v, %v", info, err)
	}
	if j, _ := b.stores.Jobs.Get(b.ctx, job); j.Status != salvagetype.JobRunning {
		t.Fatalf("job %s while its pipeline is paused; want running", j.Status)
	}

	b.pauseShop(t, false)
	b.waitJob(t, job, salvagetype.JobDone)
	for _, tool := range []string{"reserve", "charge", "ship"} {
		if n := s.count(tool); n != 3 {
			t.Fatalf("%d %s requests; want one per order", n, tool)
		}
	}
	for chunk := 1; chunk <= 3; chunk++ {
		if cp := b.checkpoint(t, job, chunk); cp.Deliveries != 1 || cp.Redeliveries != 0 {
			t.Fatalf("chunk %d: deliveries %d, redeliveries %d; a pause spends none", chunk, cp.Deliveries, cp.Redeliveries)
		}
	}
	if n := b.streamMsgs(t, streams.Hold); n != 0 {
		t.Fatalf("%d messages left on SALVAGE_HOLD", n)
	}
}

// A pause reaches a running chunk at its next stage: the stage it is in
// finishes, the chunk parks before the next one and goes on from there
// after the resume, without repeating the first stage's effects.
func TestPauseStopsARunningChunkAtTheNextStage(t *testing.T) {
	t.Parallel()
	s := newShop()
	p := s.pipeline(t)
	inStage := make(chan struct{})
	release := make(chan struct{})
	pay := p.Stages[0].Agents[0].Run
	p.Stages[0].Agents[0].Run = func(ctx context.Context, turn *salvagetype.Turn) (any, error) {
		out, err := pay(ctx, turn)
		close(inStage)
		<-release
		return out, err
	}
	b := setup(t, setupOpts{pipelines: []*recovery.Plan{p}})
	b.startWorker(t, "w1")
	job := b.submitOrders(t, shopOrder{ID: "m-1"})
	<-inStage
	b.pauseShop(t, true)
	close(release)
	if cp := b.waitStatus(t, job, 1, salvagetype.ChunkPaused); cp.Stage != 2 {
		t.Fatalf("parked at stage %d; want 2, after the stage it was in", cp.Stage)
	}
	if s.count("ship") != 0 {
		t.Fatal("shipped while paused")
	}
	b.pauseShop(t, false)
	b.waitJob(t, job, salvagetype.JobDone)
	if s.count("reserve") != 1 || s.count("charge") != 1 || s.count("ship") != 1 {
		t.Fatalf("requests reserve %d, charge %d, ship %d; want one each", s.count("reserve"), s.count("charge"), s.count("ship"))
	}
	c, err := b.JS.Consumer(b.ctx, streams.Hold, streams.System(streams.Pipeline(shopPipeline).PausedSystem()).HoldConsumer())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(b.ctx); err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("hold consumer after the resume: %+v, %v", info, err)
	}
}
