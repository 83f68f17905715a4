package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Tracker keeps each job's record current as its chunks reach outcomes,
// and publishes progress and finished events.
type Tracker struct {
	JS     jetstream.JetStream
	Stores *kv.Stores
	// Counts, when set, coalesces the count writes of concurrent chunks.
	Counts *Counts
	// Tracer exports the span of a job this tracker finishes; nil takes
	// the global provider's.
	Tracer trace.Tracer
	// Hooks, when set, are the worker's test hooks (AfterFinish).
	Hooks *Hooks
}

// Apply records one chunk's transition in its job's counts — one CAS on
// the job record, no checkpoint read — and publishes a progress event.
// When the counts say every chunk is over, it settles the job against its
// checkpoints: once per job, not per chunk. An empty delta does nothing.
func (t Tracker) Apply(ctx context.Context, jobID string, chunk int, status salvagetype.ChunkStatus, d kv.Delta) (kv.Job, error) {
	if d.Empty() {
		return kv.Job{}, nil
	}
	var job kv.Job
	var settle bool
	var err error
	if t.Counts != nil {
		job, settle, err = t.Counts.apply(ctx, jobID, d)
	} else {
		job, settle, err = t.Stores.Jobs.Apply(ctx, jobID, d)
	}
	if err != nil {
		return job, err
	}
	if job.BudgetExceededAt == nil && job.Budget.Exceeded(job.Summary) {
		if j, err := t.stopForBudget(ctx, job); err != nil {
			return job, err
		} else if j.ID != "" {
			job = j
		}
	}
	if d.From == d.To {
		// Only retry counts moved: no outcome to announce.
		return job, nil
	}
	if err := t.publishProgress(ctx, job, chunk, status); err != nil {
		return job, err
	}
	if settle {
		return t.settle(ctx, jobID)
	}
	return job, nil
}

// settle rewrites a job's counts and status from every checkpoint: the
// repair path, for a job whose counts say it is over and for any place
// that sees signs of a crash between a chunk's checkpoint and its count.
// The call that finished the job announces the finish.
func (t Tracker) settle(ctx context.Context, jobID string) (kv.Job, error) {
	job, err := t.Stores.Jobs.Get(ctx, jobID)
	if err != nil {
		return job, err
	}
	return t.settleRecord(ctx, job)
}

// settleRecord is settle for a job record its caller has just read.
func (t Tracker) settleRecord(ctx context.Context, job kv.Job) (kv.Job, error) {
	part, err := t.Stores.PartOf(ctx, job)
	if err != nil {
		return job, err
	}
	d, err := part.Checkpoints.Derive(ctx, job.ID, job.Chunks)
	if err != nil {
		return job, err
	}
	return t.SettleDerived(ctx, job, d)
}

// SettleDerived is settleRecord from a derivation of the job's checkpoints.
func (t Tracker) SettleDerived(ctx context.Context, job kv.Job, d *kv.Derivation) (kv.Job, error) {
	job, finished, err := t.Stores.Jobs.SettleDerived(ctx, job.ID, d)
	if err != nil || !finished {
		return job, err
	}
	if t.Hooks != nil && t.Hooks.AfterFinish != nil {
		t.Hooks.AfterFinish()
	}
	return t.announce(ctx, job)
}

// announce makes the announcement job's finish is owed (kv.Job's
// Unannounced): what is left of its backlog cleared, the finished event
// retention works from, then the debt cleared by compare-and-swap, and the
// job's span exported by the one call that cleared it. Made by the call
// that finished the job, or after a crash in between by a repair sweep;
// announcers at once publish one event (its message id is the finish's)
// and one span. A crash between the clearing and the span loses the span,
// never the event.
func (t Tracker) announce(ctx context.Context, job kv.Job) (kv.Job, error) {
	if job.Window > 0 {
		if err := PurgeSubject(ctx, t.JS, streams.Backlog, job.Ref().Backlog()); err != nil {
			return job, err
		}
	}
	ev := salvagetype.JobEvent{
		Job: job.ID, Kind: streams.EventFinished, Pipeline: job.Pipeline, Status: job.Status,
		Chunks: job.Chunks, Done: job.Summary.Done, Failed: job.Summary.DeadLettered, Cancelled: job.Summary.Cancelled,
		TraceID: job.TraceID, At: time.Now().UTC(),
	}
	h := nats.Header{}
	h.Set(salvagetype.HeaderMsgID, fmt.Sprintf("%s.finished.%d.%d.%d", job.ID, job.Summary.Done, job.Summary.DeadLettered, job.Summary.Cancelled))
	if err := PublishJSON(ctx, t.JS, job.Ref().Event(ev.Kind), ev, h); err != nil {
		return job, err
	}
	after, cleared, err := t.Stores.Jobs.MarkAnnounced(ctx, job.ID, job.Unannounced)
	if cleared {
		tracer := t.Tracer
		if tracer == nil {
			tracer = TracerOf(nil)
		}
		exportJobSpan(tracer, job)
	}
	return after, err
}

// AnnounceOwed announces job id's finish if its record, read now, still
// owes it: a repair sweep's index can lag the record (announced since,
// or running again after a replay).
func (t Tracker) AnnounceOwed(ctx context.Context, id string) (kv.Job, bool, error) {
	job, err := t.Stores.Jobs.Get(ctx, id)
	if err != nil || !job.AnnouncementOwed() {
		return job, false, err
	}
	job, err = t.announce(ctx, job)
	return job, err == nil, err
}

// publishProgress announces one chunk's new outcome with its job's counts.
func (t Tracker) publishProgress(ctx context.Context, job kv.Job, chunk int, status salvagetype.ChunkStatus) error {
	ev := salvagetype.JobEvent{
		Job: job.ID, Kind: streams.EventProgress, Pipeline: job.Pipeline, Status: job.Status,
		Chunks: job.Chunks, Done: job.Summary.Done, Failed: job.Summary.DeadLettered, Cancelled: job.Summary.Cancelled,
		Chunk: chunk, ChunkStatus: status, TraceID: job.TraceID, At: time.Now().UTC(),
	}
	return PublishJSON(ctx, t.JS, job.Ref().Event(ev.Kind), ev, nil)
}

// PurgeSubject removes every message on subject from stream.
func PurgeSubject(ctx context.Context, js jetstream.JetStream, stream, subject string) error {
	err := streams.Retry(ctx, func(ctx context.Context) error {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		return s.Purge(ctx, jetstream.WithPurgeSubject(subject))
	})
	if err != nil {
		return fmt.Errorf("consumers: purge %s from %s: %w", subject, stream, err)
	}
	return nil
}

// PublishJSON publishes v to subject and waits for the stream's ack,
// retrying infrastructure errors. HTML characters are not escaped: an
// event quoting input full of '<' stays the size of that input.
func PublishJSON(ctx context.Context, js jetstream.JetStream, subject string, v any, h nats.Header) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("consumers: encode %s: %w", subject, err)
	}
	_, err := Publish(ctx, js, &nats.Msg{Subject: subject, Data: bytes.TrimSuffix(buf.Bytes(), []byte("\n")), Header: h})
	return err
}

// Publish publishes m and waits for the stream's ack, retrying
// infrastructure errors.
func Publish(ctx context.Context, js jetstream.JetStream, m *nats.Msg) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := streams.Retry(ctx, func(ctx context.Context) error {
		var err error
		ack, err = js.PublishMsg(ctx, m)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("consumers: publish %s: %w", m.Subject, err)
	}
	return ack, nil
}

// BindConsumer binds a durable consumer, waiting out infrastructure
// errors. It returns a nil consumer and no error when ctx ends first.
func BindConsumer(ctx context.Context, js jetstream.JetStream, stream, name string) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := streams.Retry(ctx, func(ctx context.Context) error {
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

// BindPools binds, for each of pipelines in order, its consumer name(p)
// on stream. It returns nil, nil when ctx ends first.
func BindPools(ctx context.Context, js jetstream.JetStream, stream string, pipelines []string, name func(streams.Pipeline) string) ([]jetstream.Consumer, error) {
	pools := make([]jetstream.Consumer, 0, len(pipelines))
	for _, p := range pipelines {
		cons, err := BindConsumer(ctx, js, stream, name(streams.Pipeline(p)))
		if err != nil || cons == nil {
			return nil, err
		}
		pools = append(pools, cons)
	}
	return pools, nil
}

// FetchLoop fetches up to n messages at a time from cons and hands each to
// handle, in order, until ctx ends. Fetch errors (a server restarting, a
// leader moving) are waited out, never returned.
func FetchLoop(ctx context.Context, cons jetstream.Consumer, n int, log zerolog.Logger, handle func(jetstream.Msg)) {
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
			SleepCtx(ctx, 500*time.Millisecond)
		}
	}
}
