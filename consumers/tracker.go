package consumers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/streams"
)

// tracker derives a job's status from its chunks after each chunk outcome
// and publishes progress and finished events.
type tracker struct {
	js     jetstream.JetStream
	stores *kv.Stores
}

// refresh re-derives job's status; it publishes a progress event and, from
// the one caller that moved the job to a finished status, a finished event.
func (t tracker) refresh(ctx context.Context, jobID string) (kv.Job, error) {
	job, err := t.stores.Jobs.Get(ctx, jobID)
	if err != nil {
		return job, err
	}
	cps, err := t.stores.Checkpoints.ForJob(ctx, jobID, job.Chunks)
	if err != nil {
		return job, err
	}
	job, finished, err := t.stores.Jobs.Refresh(ctx, jobID, cps)
	if err != nil {
		return job, err
	}
	ev := streams.JobEvent{
		Job: job.ID, Kind: streams.EventProgress, Pipeline: job.Pipeline, Status: job.Status,
		Chunks: job.Chunks, Done: job.Summary.Done, Failed: job.Summary.DeadLettered,
		TraceID: job.TraceID, At: time.Now().UTC(),
	}
	if err := publishJSON(ctx, t.js, streams.EventSubject(job.ID, ev.Kind), ev, nil); err != nil {
		return job, err
	}
	if finished {
		ev.Kind = streams.EventFinished
		h := nats.Header{}
		h.Set(streams.HeaderMsgID, fmt.Sprintf("%s.finished.%d.%d", job.ID, job.Summary.Done, job.Summary.DeadLettered))
		if err := publishJSON(ctx, t.js, streams.EventSubject(job.ID, ev.Kind), ev, h); err != nil {
			return job, err
		}
	}
	return job, nil
}

// publishJSON publishes v to subject and waits for the stream's ack,
// retrying infrastructure errors.
func publishJSON(ctx context.Context, js jetstream.JetStream, subject string, v any, h nats.Header) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("consumers: encode %s: %w", subject, err)
	}
	_, err = publish(ctx, js, &nats.Msg{Subject: subject, Data: data, Header: h})
	return err
}

// publish publishes m and waits for the stream's ack, retrying
// infrastructure errors.
func publish(ctx context.Context, js jetstream.JetStream, m *nats.Msg) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := natsconf.Retry(ctx, func(ctx context.Context) error {
		var err error
		ack, err = js.PublishMsg(ctx, m)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("consumers: publish %s: %w", m.Subject, err)
	}
	return ack, nil
}

// bindConsumer binds a durable consumer, waiting out infrastructure
// errors. It returns a nil consumer and no error when ctx ends first.
func bindConsumer(ctx context.Context, js jetstream.JetStream, stream, name string) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := natsconf.Retry(ctx, func(ctx context.Context) error {
		var err error
		cons, err = js.Consumer(ctx, stream, name)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("consumers: bind consumer %s on %s: %w", name, stream, err)
	}
	return cons, nil
}

// fetchLoop fetches up to n messages at a time from cons and hands each to
// handle, in order, until ctx ends. Fetch errors (a server restarting, a
// leader moving) are waited out, never returned.
func fetchLoop(ctx context.Context, cons jetstream.Consumer, n int, log zerolog.Logger, handle func(jetstream.Msg)) {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(time.Second))
		if err == nil {
			for m := range batch.Messages() {
				handle(m)
			}
			err = batch.Error()
		}
		if err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			log.Debug().Err(err).Msg("fetch")
			sleepCtx(ctx, 500*time.Millisecond)
		}
	}
}
