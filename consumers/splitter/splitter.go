package splitter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Splitter defaults.
const (

	// buildBeat is how many chunk messages the splitter builds between two
	// reports of progress.
	buildBeat = 256
)

// Config configures a Splitter.
type Config struct {
	// Registry knows the pipelines. Required.
	Registry *recovery.Registry
	// MaxPayload bounds a job message, checked before parsing, and each
	// chunk message built from it. Default MaxPayloadDefault.
	MaxPayload int
	// MaxChunks bounds the chunks of one job for pipelines that set no
	// MaxChunks of their own. Default MaxChunksDefault.
	MaxChunks int
	// ChunkWindow is how many chunks of a job are queued at once (see
	// ChunkWindowDefault). Default ChunkWindowDefault.
	ChunkWindow int
	// MaxDeliver must match the splitter consumer's MaxDeliver: on the
	// last delivery a job message that still cannot be split is reported
	// as split-failed. Default streams.SplitterMaxDeliverDefault.
	MaxDeliver int
	// Retention is what a job records as its retention when its pipeline
	// sets none (fields it leaves zero). Zero fields are left to whoever
	// applies retention (deadletter.Config.Retention).
	Retention salvagetype.Retention
	// Logger receives splitter logs. Default zerolog.Nop().
	Logger *zerolog.Logger
}

// Splitter validates submitted jobs, publishes their chunks and then
// creates their records. A job is split all or nothing: every chunk
// message is built and size-checked first, and a job record exists only
// once all its chunks are published. Bad input is rejected with a bounded
// event on salvage.events.rejected.<reason> and removed; nothing else
// happens.
type Splitter struct {
	js      jetstream.JetStream
	stores  *kv.Stores
	cfg     Config
	log     zerolog.Logger
	tracker flow.Tracker
	hooks   flow.Hooks
}

// New returns a splitter; it does not start it.
func New(js jetstream.JetStream, stores *kv.Stores, cfg Config) (*Splitter, error) {
	if cfg.Registry == nil {
		return nil, fmt.Errorf("%w: Config.Registry is nil", flow.ErrInvalidConfig)
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = salvagetype.MaxPayloadDefault
	}
	if cfg.MaxChunks <= 0 {
		cfg.MaxChunks = salvagetype.MaxChunksDefault
	}
	if cfg.ChunkWindow <= 0 {
		cfg.ChunkWindow = salvagetype.ChunkWindowDefault
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = streams.SplitterMaxDeliverDefault
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	return &Splitter{js: js, stores: stores, cfg: cfg, log: log.With().Str("role", "splitter").Logger(), tracker: flow.Tracker{JS: js, Stores: stores}}, nil
}

// Run consumes the job messages of its pipelines (one consumer each,
// streams.Pipeline.Splitter) until ctx ends: a splitter never receives a
// job of a pipeline it does not run. It blocks and returns nil on
// cancellation.
func (s *Splitter) Run(ctx context.Context) error {
	names := s.cfg.Registry.Names()
	pools, err := flow.BindPools(ctx, s.js, streams.Jobs, names, streams.Pipeline.Splitter)
	if err != nil || pools == nil {
		return err
	}
	for _, name := range names {
		// A registered pipeline's jobs wait for a splitter instead of
		// being rejected as unknown (SweepIntake).
		if err := s.stores.Pipelines.Register(ctx, name); err != nil {
			s.log.Warn().Err(err).Str("pipeline", name).Msg("record the pipeline")
		}
	}
	var wg sync.WaitGroup
	for _, cons := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.pull(ctx, cons)
		}()
	}
	wg.Wait()
	return nil
}

// pull splits the job messages of one consumer until ctx ends.
func (s *Splitter) pull(ctx context.Context, cons jetstream.Consumer) {
	// One job message may stall a bounded time: infrastructure errors
	// are retried inside it, but a split that makes no progress for
	// three AckWaits counts a delivery, so it cannot hold the splitter
	// forever. Progress (each window of chunks built or published, which
	// the splitter reports to JetStream as in progress) starts the bound
	// again: a big job on a slow machine is slower, not failed — a
	// deadline for the whole split failed a 5,000-chunk job on a loaded
	// machine, split after split.
	timeout := 3 * streams.SplitterAckWaitDefault
	if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		timeout = 3 * info.Config.AckWait
	}
	flow.FetchLoop(ctx, cons, 8, s.log, func(m jetstream.Msg) {
		hctx, cancel := context.WithCancelCause(ctx)
		stall := time.AfterFunc(timeout, func() { cancel(flow.ErrSplitStalled) })
		err := s.handle(hctx, progressMsg{Msg: m, progress: func() { stall.Reset(timeout) }})
		stall.Stop()
		cancel(nil)
		if err == nil || ctx.Err() != nil {
			return
		}
		meta, merr := m.Metadata()
		if merr != nil || meta.NumDelivered < uint64(s.cfg.MaxDeliver) {
			// Infrastructure trouble: let JetStream redeliver; the job id
			// is stable, so nothing is created twice.
			s.log.Error().Err(err).Str("subject", m.Subject()).Msg("split failed; will retry")
			_ = m.NakWithDelay(flow.RetryDelay(meta))
			return
		}
		// The last delivery: report it. The message stays in SALVAGE_JOBS
		// (the consumer will not deliver it again), so nothing is lost.
		rej := &flow.RejectError{Reason: salvagetype.RejectSplitFailed, Err: fmt.Errorf("after %d deliveries: %w", meta.NumDelivered, err)}
		if rerr := flow.PublishRejection(ctx, s.js, m.Subject(), m.Data(), meta.Sequence.Stream, "", rej); rerr != nil {
			s.log.Error().Err(errors.Join(err, rerr)).Uint64("stream_seq", meta.Sequence.Stream).Msg("split failed for good and could not be reported")
		}
	})
}

// progressMsg is a job message whose InProgress also tells the
// splitter's stall bound that the split moved.
type progressMsg struct {
	jetstream.Msg
	progress func()
}

// InProgress reports progress to JetStream and to the stall bound.
func (m progressMsg) InProgress() error {
	m.progress()
	return m.Msg.InProgress()
}

func reject(reason salvagetype.RejectReason, err error) error {
	return &flow.RejectError{Reason: reason, Err: err}
}

// parsed is a validated job message with every chunk message built.
type parsed struct {
	pipeline *recovery.Plan
	msg      salvagetype.JobMsg
	// hash is what the job id stands for (streams.InputHash).
	hash string
	// inputs are the chunks' inputs; each chunk's message is built from
	// its input when it is published (message builds it).
	inputs    []json.RawMessage
	sourceSeq uint64
	jobID     string
	traceID   string
	window    int
	// tenant is whose job it is (kv.Job.Tenant).
	tenant string
	// partition holds the job's chunks: PartitionOf its id among the
	// partitions this process knows, written in its record.
	partition int
	// tree binds each chunk to the job (streams.VerifyChunk).
	tree *streams.ChunkTree
}

func (s *Splitter) handle(ctx context.Context, m jetstream.Msg) error {
	meta, err := m.Metadata()
	if err != nil {
		return err
	}
	p, err := s.parse(m.Subject(), m.Data(), m.Headers(), meta, func() { _ = m.InProgress() })
	var rej *flow.RejectError
	if errors.As(err, &rej) {
		return s.reject(ctx, m, meta.Sequence.Stream, p.jobID, rej)
	}
	if err != nil {
		return err
	}
	log := s.log.With().Str("job_id", p.jobID).Str("trace_id", p.traceID).Str("pipeline", p.pipeline.Name).Logger()
	old, err := s.stores.Jobs.Get(ctx, p.jobID)
	switch {
	case err == nil && old.SourceSeq != meta.Sequence.Stream && old.InputHash == p.hash:
		// The same job submitted again: a job id names one input, and
		// this is it. Nothing to do.
		log.Info().Uint64("stream_seq", meta.Sequence.Stream).Uint64("source_seq", old.SourceSeq).Msg("the same job submitted again; nothing to do")
		if err := m.DoubleAck(ctx); err != nil {
			log.Warn().Err(err).Msg("ack job message")
		}
		return nil
	case err == nil && old.SourceSeq != meta.Sequence.Stream:
		return s.reject(ctx, m, meta.Sequence.Stream, p.jobID, &flow.RejectError{Reason: salvagetype.RejectDuplicateJob, Err: fmt.Errorf("%w: job %s was submitted as message %d with another input", salvagetype.ErrJobExists, p.jobID, old.SourceSeq)})
	case err == nil:
		// The record exists, so every chunk was published: a splitter
		// died before it acked. Only the accepted event may be missing.
		log.Info().Msg("job message redelivered after its job was created")
		return s.accepted(ctx, m, p, log)
	case !errors.Is(err, kv.ErrNotFound):
		return err
	}
	if err := s.publishChunks(ctx, m, p); err != nil {
		return err
	}
	if s.hooks.AfterPublish != nil {
		s.hooks.AfterPublish()
	}
	job := kv.Job{Job: salvagetype.Job{ID: p.jobID, Pipeline: p.pipeline.Name, Status: salvagetype.JobRunning, Chunks: len(p.inputs), Window: p.window, TraceID: p.traceID, Metadata: p.msg.Metadata, Tenant: p.tenant, InputHash: p.hash, ChunksRoot: p.tree.Root(), Partition: p.partition}, SourceSeq: meta.Sequence.Stream}
	if b := p.msg.Budget; b != nil {
		job.Budget = &salvagetype.Budget{Tokens: b.Tokens, Cost: b.Cost}
	}
	if keep := p.pipeline.Retention.Or(s.cfg.Retention); keep != (salvagetype.Retention{}) {
		job.Retention = &keep
	}
	err = s.stores.Jobs.Create(ctx, job)
	if errors.Is(err, kv.ErrJobExists) {
		old, gerr := s.stores.Jobs.Get(ctx, p.jobID)
		if gerr != nil {
			return gerr
		}
		if old.SourceSeq != meta.Sequence.Stream {
			// Another message with this id won a race to create it: its
			// record names its own source, and workers drop this
			// message's chunks, which name ours. The same input is the
			// same job; another is refused.
			if old.InputHash == p.hash {
				return s.accepted(ctx, m, p, log)
			}
			return s.reject(ctx, m, meta.Sequence.Stream, p.jobID, &flow.RejectError{Reason: salvagetype.RejectDuplicateJob, Err: fmt.Errorf("%w: job %s was created from message %d with another input meanwhile", salvagetype.ErrJobExists, p.jobID, old.SourceSeq)})
		}
	} else if err != nil {
		return err
	}
	return s.accepted(ctx, m, p, log)
}

// accepted announces the job and acks its message.
func (s *Splitter) accepted(ctx context.Context, m jetstream.Msg, p parsed, log zerolog.Logger) error {
	h := nats.Header{}
	h.Set(salvagetype.HeaderMsgID, p.jobID+".accepted")
	ev := salvagetype.JobEvent{Job: p.jobID, Kind: streams.EventAccepted, Pipeline: p.pipeline.Name, Status: salvagetype.JobRunning, Chunks: len(p.inputs), TraceID: p.traceID, At: time.Now().UTC()}
	if err := flow.PublishJSON(ctx, s.js, streams.JobRef{Job: p.jobID}.Event(streams.EventAccepted), ev, h); err != nil {
		return err
	}
	if err := m.DoubleAck(ctx); err != nil {
		log.Warn().Err(err).Msg("ack job message")
	}
	log.Info().Int("chunks", len(p.inputs)).Int("window", p.window).Msg("job accepted")
	return nil
}

// publishChunks publishes every chunk of the job, pipelined: a split costs
// about one round trip per window of 256, not one per chunk. The first
// p.window go to SALVAGE_CHUNKS, the rest to SALVAGE_BACKLOG. Dedup ids
// make a repeat after a crash harmless. The job message is kept in
// progress meanwhile.
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
	for i := range p.inputs {
		cm, err := p.message(i)
		if err != nil {
			return err
		}
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

// parse reads a job message (its subject, body and headers as delivered)
// into what the splitter publishes, or a *rejectError saying why not. It
// writes nothing; it calls progress (if set) after every buildBeat chunk
// messages it built.
func (s *Splitter) parse(subject string, data []byte, hdr nats.Header, meta *jetstream.MsgMetadata, progress func()) (parsed, error) {
	var p parsed
	name, err := s.decode(subject, data, &p.msg)
	if err != nil {
		return p, err
	}
	p.hash = streams.InputHash(name, p.msg.Input)
	switch {
	case p.msg.JobID != nil:
		if err := streams.ValidateJobID(*p.msg.JobID); err != nil {
			return p, reject(salvagetype.RejectBadToken, err)
		}
		p.jobID = *p.msg.JobID
	default:
		p.jobID = flow.JobIDFor(hdr.Get(salvagetype.HeaderMsgID), meta)
	}
	p.partition = streams.PartitionOf(p.jobID, s.stores.Partitions())
	// Looked up once the job id is known, so a waiter hears of it.
	if p.pipeline, err = s.cfg.Registry.Get(name); err != nil {
		return p, reject(salvagetype.RejectUnknownPipeline, err)
	}
	if p.tenant, err = tenantOf(p.msg, p.pipeline.TenantFrom); err != nil {
		return p, reject(salvagetype.RejectBadToken, err)
	}
	inputs, err := p.pipeline.SplitInput(p.msg.Input)
	if errors.Is(err, salvagetype.ErrPanic) {
		return p, reject(salvagetype.RejectPanic, err)
	}
	if err != nil {
		return p, reject(salvagetype.RejectBadInput, err)
	}
	if len(inputs) == 0 {
		return p, reject(salvagetype.RejectBadInput, errors.New("input split into no chunks"))
	}
	limit := s.cfg.MaxChunks
	if p.pipeline.MaxChunks > 0 {
		limit = p.pipeline.MaxChunks
	}
	if len(inputs) > limit {
		return p, reject(salvagetype.RejectTooManyChunks, fmt.Errorf("input split into %d chunks; %s allows %d", len(inputs), p.pipeline.Name, limit))
	}
	p.traceID, _ = streams.ParseTraceParent(hdr.Get(salvagetype.HeaderTraceParent))
	if p.traceID == "" {
		p.traceID = streams.DeriveTraceID(p.jobID)
	}
	p.window = 0
	if len(inputs) > s.cfg.ChunkWindow {
		p.window = s.cfg.ChunkWindow
	}
	p.inputs, p.sourceSeq = inputs, meta.Sequence.Stream
	p.tree = streams.NewChunkTree(p.jobID, p.pipeline.Name, inputs)
	return p, s.measure(p, progress)
}

// decode reads the job message data on subject into msg and returns its
// pipeline's name, or a *rejectError: too large, a bad subject, not one
// JSON object (or one naming a key twice), no input, a bad budget.
func (s *Splitter) decode(subject string, data []byte, msg *salvagetype.JobMsg) (string, error) {
	if len(data) > s.cfg.MaxPayload {
		return "", reject(salvagetype.RejectOversized, fmt.Errorf("payload is %d bytes, the limit is %d", len(data), s.cfg.MaxPayload))
	}
	name, err := streams.ParseJobSubject(subject)
	if errors.Is(err, salvagetype.ErrInvalidToken) {
		return "", reject(salvagetype.RejectBadToken, err)
	}
	if err != nil {
		return "", reject(salvagetype.RejectBadSubject, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(msg); err != nil {
		return "", reject(salvagetype.RejectMalformedJSON, fmt.Errorf("job message: %w", err))
	}
	if dec.More() {
		return "", reject(salvagetype.RejectMalformedJSON, errors.New("job message: trailing data after the JSON object"))
	}
	if err := streams.CheckDuplicateKeys(data); err != nil {
		return "", reject(salvagetype.RejectMalformedJSON, fmt.Errorf("job message: %w", err))
	}
	if len(msg.Input) == 0 || string(msg.Input) == "null" {
		return "", reject(salvagetype.RejectBadInput, errors.New(`job message has no "input"`))
	}
	if err := msg.Budget.Validate(); err != nil {
		return "", reject(salvagetype.RejectBadInput, err)
	}
	return name, nil
}

// measure builds and measures every chunk message of p before anything
// is written, so a job that cannot be split leaves no trace; each is
// dropped once measured and built again when it is published, so a job
// of 10,000 chunks never holds 10,000 messages at once. It calls
// progress (if set) after every buildBeat messages.
func (s *Splitter) measure(p parsed, progress func()) error {
	for i := range p.inputs {
		if progress != nil && i%buildBeat == buildBeat-1 {
			progress()
		}
		cm, err := p.message(i)
		if err != nil {
			return reject(salvagetype.RejectBadInput, fmt.Errorf("chunk %d: %w", i+1, err))
		}
		if n := len(cm.Data); n > s.cfg.MaxPayload {
			return reject(salvagetype.RejectOversizedChunk, fmt.Errorf("chunk %d is %d bytes as a message (JSON escaping included), the limit is %d", i+1, n, s.cfg.MaxPayload))
		}
	}
	return nil
}

// message builds the message of chunk i+1.
func (p parsed) message(i int) (*nats.Msg, error) {
	return chunkMessage(salvagetype.ChunkMsg{Job: p.jobID, Chunk: i + 1, Pipeline: p.pipeline.Name, TraceID: p.traceID,
		SourceSeq: p.sourceSeq, Input: p.inputs[i], Proof: p.tree.Proof(i + 1), Partition: p.partition}, p.window)
}

// chunkMessage is the message of one chunk: on its partition's chunk
// stream when it is within the job's window (or the job has none), else on SALVAGE_BACKLOG.
// Its Nats-Msg-Id names the job, chunk and source message, so a repeat is
// dropped and admitting it from the backlog later is one more repeat-safe
// publish.
func chunkMessage(c salvagetype.ChunkMsg, window int) (*nats.Msg, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	subject := flow.RefOf(c).Subject()
	if window > 0 && c.Chunk > window {
		subject = flow.RefOf(c).Backlog()
	}
	cm := nats.NewMsg(subject)
	cm.Data = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	cm.Header.Set(salvagetype.HeaderMsgID, chunkMsgID(c))
	cm.Header.Set(salvagetype.HeaderJob, c.Job)
	cm.Header.Set(salvagetype.HeaderChunk, strconv.Itoa(c.Chunk))
	cm.Header.Set(salvagetype.HeaderTraceParent, streams.TraceParent(c.TraceID, streams.DeriveSpanID(fmt.Sprintf("%s.%d", c.Job, c.Chunk))))
	return cm, nil
}

// chunkMsgID is the dedup id of a chunk's first message.
func chunkMsgID(c salvagetype.ChunkMsg) string {
	return fmt.Sprintf("%s.%d.split.%d", c.Job, c.Chunk, c.SourceSeq)
}

// reject reports a refused job message and terminates it. job is the job
// id when it is known: the event goes to the job's own subject too, where
// a submitter tells its own message's rejection by stream_seq.
func (s *Splitter) reject(ctx context.Context, m jetstream.Msg, seq uint64, job string, rej *flow.RejectError) error {
	if err := flow.PublishRejection(ctx, s.js, m.Subject(), m.Data(), seq, job, rej); err != nil {
		return err
	}
	s.log.Warn().Str("reason", string(rej.Reason)).Str("subject", m.Subject()).Uint64("stream_seq", seq).Err(rej.Err).Msg("job rejected")
	if err := m.TermWithReason(string(rej.Reason)); err != nil {
		s.log.Warn().Err(err).Msg("term rejected job message")
	}
	return nil
}

// tenantOf is whose job msg is: its tenant, else the string in the
// metadata field from names, else nobody's (""). A tenant that is no
// token is an error wrapping salvagetype.ErrInvalidToken.
func tenantOf(msg salvagetype.JobMsg, from string) (string, error) {
	t := msg.Tenant
	if t == "" && from != "" {
		v, ok := msg.Metadata[from]
		if !ok {
			return "", nil
		}
		if t, ok = v.(string); !ok {
			return "", fmt.Errorf("%w: metadata %q names the tenant and must be a string, not %T", salvagetype.ErrInvalidToken, from, v)
		}
	}
	if t == "" {
		return "", nil
	}
	return t, salvagetype.ValidateToken("tenant", t)
}

// Hooks are the points where the consumers' tests reach into the
// splitter (AfterPublish); the type is internal to consumers.
func (s *Splitter) Hooks() *flow.Hooks { return &s.hooks }
