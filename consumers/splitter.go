package consumers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/streams"
)

// MaxPayloadDefault is the largest job message Salvage accepts (512 KiB),
// below the server's 1 MiB max_payload.
const MaxPayloadDefault = 512 << 10

// SplitterConfig configures a Splitter.
type SplitterConfig struct {
	// Registry knows the pipelines. Required.
	Registry *recovery.Registry
	// MaxPayload bounds a job message, checked before parsing. Default
	// MaxPayloadDefault.
	MaxPayload int
	// Logger receives splitter logs. Default zerolog.Nop().
	Logger *zerolog.Logger
}

// Splitter validates submitted jobs, creates their records and publishes
// their chunks. Bad input is rejected with an event on
// salvage.events.rejected.<reason> and removed; nothing else happens.
type Splitter struct {
	js      jetstream.JetStream
	stores  *kv.Stores
	cfg     SplitterConfig
	log     zerolog.Logger
	tracker tracker
	// afterCreate, when set by tests, runs right after a job record is
	// created: the place where a crash hurts most.
	afterCreate func()
}

// NewSplitter returns a splitter; it does not start it.
func NewSplitter(js jetstream.JetStream, stores *kv.Stores, cfg SplitterConfig) (*Splitter, error) {
	if cfg.Registry == nil {
		return nil, fmt.Errorf("%w: SplitterConfig.Registry is nil", ErrInvalidConfig)
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = MaxPayloadDefault
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	return &Splitter{js: js, stores: stores, cfg: cfg, log: log.With().Str("role", "splitter").Logger(), tracker: tracker{js: js, stores: stores}}, nil
}

// Run consumes SALVAGE_JOBS until ctx ends. It blocks and returns nil on
// cancellation.
func (s *Splitter) Run(ctx context.Context) error {
	cons, err := bindConsumer(ctx, s.js, streams.Jobs, streams.SplitterConsumer)
	if err != nil || cons == nil {
		return err
	}
	fetchLoop(ctx, cons, 8, s.log, func(m jetstream.Msg) {
		if err := s.handle(ctx, m); err != nil {
			// Infrastructure trouble: let JetStream redeliver; the job id
			// is stable, so nothing is created twice.
			s.log.Error().Err(err).Str("subject", m.Subject()).Msg("split failed; will retry")
			_ = m.NakWithDelay(time.Second)
		}
	})
	return nil
}

// rejectError carries a rejection reason.
type rejectError struct {
	reason string
	err    error
}

func (e *rejectError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *rejectError) Unwrap() error { return e.err }

func reject(reason string, err error) error { return &rejectError{reason: reason, err: err} }

// parsed is a validated job message.
type parsed struct {
	pipeline *recovery.Pipeline
	msg      streams.JobMsg
	chunks   []json.RawMessage
	jobID    string
	traceID  string
}

func (s *Splitter) handle(ctx context.Context, m jetstream.Msg) error {
	meta, err := m.Metadata()
	if err != nil {
		return err
	}
	p, err := s.parse(m, meta)
	var rej *rejectError
	if errors.As(err, &rej) {
		return s.reject(ctx, m, meta.Sequence.Stream, rej)
	}
	if err != nil {
		return err
	}
	log := s.log.With().Str("job_id", p.jobID).Str("trace_id", p.traceID).Str("pipeline", p.pipeline.Name).Logger()
	job := kv.Job{
		ID: p.jobID, Pipeline: p.pipeline.Name, Status: kv.JobRunning, Chunks: len(p.chunks),
		TraceID: p.traceID, Metadata: p.msg.Metadata, SourceSeq: meta.Sequence.Stream,
	}
	if b := p.msg.Budget; b != nil {
		job.Budget = &kv.Budget{Tokens: b.Tokens, Cost: b.Cost}
	}
	err = s.stores.Jobs.Create(ctx, job)
	if errors.Is(err, kv.ErrJobExists) {
		old, gerr := s.stores.Jobs.Get(ctx, p.jobID)
		if gerr != nil {
			return gerr
		}
		if old.SourceSeq != meta.Sequence.Stream {
			return s.reject(ctx, m, meta.Sequence.Stream, &rejectError{streams.RejectDuplicateJob,
				fmt.Errorf("job %s already exists (submitted as message %d)", p.jobID, old.SourceSeq)})
		}
		// The same message again: a splitter died after creating the
		// record. Finish publishing; dedup ids make the repeats harmless.
		log.Info().Msg("job message redelivered; resuming the split")
	} else if err != nil {
		return err
	} else if s.afterCreate != nil {
		s.afterCreate()
	}
	if err := s.publishChunks(ctx, m, p); err != nil {
		return err
	}
	h := nats.Header{}
	h.Set(streams.HeaderMsgID, p.jobID+".accepted")
	ev := streams.JobEvent{Job: p.jobID, Kind: streams.EventAccepted, Pipeline: p.pipeline.Name, Status: kv.JobRunning, Chunks: len(p.chunks), TraceID: p.traceID, At: time.Now().UTC()}
	if err := publishJSON(ctx, s.js, streams.EventSubject(p.jobID, streams.EventAccepted), ev, h); err != nil {
		return err
	}
	if err := m.DoubleAck(ctx); err != nil {
		log.Warn().Err(err).Msg("ack job message")
	}
	log.Info().Int("chunks", len(p.chunks)).Msg("job accepted")
	return nil
}

// publishChunks publishes every chunk of the job, pipelined: a split costs
// about one round trip, not one per chunk. Dedup ids make a repeat after a
// crash harmless. The job message is kept in progress meanwhile.
func (s *Splitter) publishChunks(ctx context.Context, m jetstream.Msg, p parsed) error {
	const window = 256
	futures := make([]jetstream.PubAckFuture, 0, window)
	wait := func() error {
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("consumers: publish %s: %w", f.Msg().Subject, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		futures = futures[:0]
		return nil
	}
	for i, input := range p.chunks {
		n := i + 1
		data, err := json.Marshal(streams.ChunkMsg{Job: p.jobID, Chunk: n, Pipeline: p.pipeline.Name, TraceID: p.traceID, Input: input})
		if err != nil {
			return err
		}
		cm := nats.NewMsg(streams.ChunkSubject(p.pipeline.Name, p.jobID, n))
		cm.Data = data
		cm.Header.Set(streams.HeaderMsgID, fmt.Sprintf("%s.%d.split", p.jobID, n))
		cm.Header.Set(streams.HeaderJob, p.jobID)
		cm.Header.Set(streams.HeaderChunk, strconv.Itoa(n))
		cm.Header.Set(streams.HeaderTraceParent, streams.TraceParent(p.traceID, streams.DeriveSpanID(fmt.Sprintf("%s.%d", p.jobID, n))))
		f, err := s.js.PublishMsgAsync(cm)
		if err != nil {
			return fmt.Errorf("consumers: publish %s: %w", cm.Subject, err)
		}
		futures = append(futures, f)
		if len(futures) == window {
			if err := wait(); err != nil {
				return err
			}
			_ = m.InProgress()
		}
	}
	return wait()
}

func (s *Splitter) parse(m jetstream.Msg, meta *jetstream.MsgMetadata) (parsed, error) {
	var p parsed
	data := m.Data()
	if len(data) > s.cfg.MaxPayload {
		return p, reject(streams.RejectOversized, fmt.Errorf("payload is %d bytes, the limit is %d", len(data), s.cfg.MaxPayload))
	}
	name, err := streams.ParseJobSubject(m.Subject())
	if errors.Is(err, streams.ErrBadToken) {
		return p, reject(streams.RejectBadToken, err)
	}
	if err != nil {
		return p, reject(streams.RejectBadSubject, err)
	}
	if p.pipeline, err = s.cfg.Registry.Get(name); err != nil {
		return p, reject(streams.RejectUnknownPipeline, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&p.msg); err != nil {
		return p, reject(streams.RejectMalformedJSON, fmt.Errorf("job message: %w", err))
	}
	if dec.More() {
		return p, reject(streams.RejectMalformedJSON, errors.New("job message: trailing data after the JSON object"))
	}
	if len(p.msg.Input) == 0 || string(p.msg.Input) == "null" {
		return p, reject(streams.RejectBadInput, errors.New(`job message has no "input"`))
	}
	switch {
	case p.msg.JobID != nil:
		if err := streams.ValidateJobID(*p.msg.JobID); err != nil {
			return p, reject(streams.RejectBadToken, err)
		}
		p.jobID = *p.msg.JobID
	default:
		p.jobID = jobIDFor(m.Headers().Get(streams.HeaderMsgID), meta)
	}
	if p.chunks, err = p.pipeline.Split(p.msg.Input); err != nil {
		return p, reject(streams.RejectBadInput, err)
	}
	if len(p.chunks) == 0 {
		return p, reject(streams.RejectBadInput, errors.New("input split into no chunks"))
	}
	p.traceID, _ = streams.ParseTraceParent(m.Headers().Get(streams.HeaderTraceParent))
	if p.traceID == "" {
		p.traceID = streams.DeriveTraceID(p.jobID)
	}
	return p, nil
}

// jobIDFor applies the identity rule: a valid ULID in Nats-Msg-Id, else a
// ULID derived from the stream sequence and timestamp — the same on every
// redelivery, never fresh randomness.
func jobIDFor(msgID string, meta *jetstream.MsgMetadata) string {
	if id, err := ulid.ParseStrict(msgID); err == nil {
		return id.String()
	}
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(meta.Timestamp))
	h := sha256.Sum256([]byte(meta.Stream + "/" + strconv.FormatUint(meta.Sequence.Stream, 10) + "/" + meta.Timestamp.UTC().Format(time.RFC3339Nano)))
	_ = id.SetEntropy(h[:10])
	return id.String()
}

func (s *Splitter) reject(ctx context.Context, m jetstream.Msg, seq uint64, rej *rejectError) error {
	ev := streams.Rejection{Reason: rej.reason, Error: rej.err.Error(), Subject: m.Subject(), StreamSeq: seq, Size: len(m.Data()), At: time.Now().UTC()}
	if rej.reason != streams.RejectOversized {
		ev.Data = string(m.Data())
	}
	h := nats.Header{}
	h.Set(streams.HeaderReason, rej.reason)
	h.Set(streams.HeaderMsgID, fmt.Sprintf("rejected.%d", seq))
	if err := publishJSON(ctx, s.js, streams.RejectedSubject(rej.reason), ev, h); err != nil {
		return err
	}
	s.log.Warn().Str("reason", rej.reason).Str("subject", m.Subject()).Uint64("stream_seq", seq).Err(rej.err).Msg("job rejected")
	if err := m.TermWithReason(rej.reason); err != nil {
		s.log.Warn().Err(err).Msg("term rejected job message")
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
