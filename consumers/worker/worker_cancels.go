package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// followCancellations cancels the running chunks of a job the moment its
// cancelled event arrives, so in-flight calls stop through their context.
// It follows only the cancellations of SALVAGE_EVENTS (what a worker
// receives grows with cancellations, not with the fleet's job writes),
// from cancelReplay ago, starting over from where it was after an
// interruption. ready is closed once the first follow was attempted.
func (w *Worker) followCancellations(ctx context.Context, ready chan<- struct{}) {
	readyOnce := sync.OnceFunc(func() { close(ready) })
	defer readyOnce()
	start := time.Now().Add(-flow.CancelReplay)
	var next atomic.Uint64 // the next stream sequence, once one was seen
	for ctx.Err() == nil {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{streams.CancelledEvents},
			DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start}
		if seq := next.Load(); seq > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, seq, nil
		}
		err := w.followCancellationsOnce(ctx, cfg, readyOnce, &next)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, flow.ErrFollowReconnected) {
			continue
		}
		w.log.Warn().Err(err).Msg("follow of cancellations ended; starting over (a running chunk of a job cancelled meanwhile stops when it next reads its job)")
		flow.SleepCtx(ctx, time.Second)
	}
}

func (w *Worker) followCancellationsOnce(ctx context.Context, cfg jetstream.OrderedConsumerConfig, ready func(), next *atomic.Uint64) error {
	nc := w.js.Conn()
	reconnects := nc.Stats().Reconnects
	cons, err := w.js.OrderedConsumer(ctx, streams.Events, cfg)
	ready()
	if err != nil {
		return err
	}
	stopped := make(chan error, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var ev salvagetype.JobEvent
		if json.Unmarshal(m.Data(), &ev) == nil && streams.ValidateJobID(ev.Job) == nil {
			// The event only says where to look: the job's record decides
			// (one read per cancelled job), so a message on the subject
			// that no cancel wrote stops nothing.
			if j, err := w.stores.Jobs.Get(ctx, ev.Job); err == nil && j.CancelledAt != nil {
				w.cancels.cancelJob(ev.Job, j.StopReason())
			}
		}
		if meta, err := m.Metadata(); err == nil {
			next.Store(meta.Sequence.Stream + 1)
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			select {
			case stopped <- err:
			default:
			}
		}
	}))
	if err != nil {
		return err
	}
	defer cc.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-stopped:
			return err
		case <-tick.C:
			if nc.Stats().Reconnects != reconnects && nc.IsConnected() {
				return flow.ErrFollowReconnected
			}
		}
	}
}
