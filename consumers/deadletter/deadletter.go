package deadletter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Config configures a DeadLetterer.
type Config struct {
	// SweepInterval is the sweeper's period. Default SweepIntervalDefault;
	// negative disables the sweeper.
	SweepInterval time.Duration
	// Prices price the usage of a dead-lettered chunk's calls, counted
	// from its journal. Default none: its cost stays as its worker
	// counted it.
	Prices recovery.Prices
	// Limits are the recovery limits an envelope is classified against;
	// zero fields take recovery's defaults.
	Limits recovery.Limits
	// UnknownPipelineWait is how long a job for a pipeline no process has
	// ever run waits before the sweeper rejects it. Default
	// UnknownPipelineWaitDefault.
	UnknownPipelineWait time.Duration
	// Retention applies to finished jobs whose record names none (fields
	// they leave zero). Zero fields take kv's defaults.
	Retention salvagetype.Retention
	// Logger receives dead-letter logs. Default zerolog.Nop().
	Logger *zerolog.Logger
	// TracerProvider receives the span of a job whose last chunk the
	// dead-letterer settles. Default the global provider.
	TracerProvider trace.TracerProvider
}

// DeadLetterer turns exhausted chunks into failure envelopes. It reads the
// max-deliveries advisories captured in SALVAGE_ADVISORIES and, because an
// advisory is sent only to whoever listens at that instant, also sweeps
// SALVAGE_CHUNKS for messages at or below the workers' ack floor. Each
// sweep also repairs what a killed process left half-written: a job or an
// envelope whose chunks all ended settles within one sweep interval of
// going quiet. And it reaps dead processes: when a worker process's lease
// in salvage_workers lapses, the chunks it held go back to their pools at
// once (see reaper). Several copies may run at once: the guard key makes
// each envelope happen once, every repair is repeat-safe, and a claim is
// handed back by CAS.
type DeadLetterer struct {
	js     jetstream.JetStream
	stores *kv.Stores
	cfg    Config
	log    zerolog.Logger
	letter flow.Letterer
	repair *repairer
	retain *retainer
	hooks  flow.Hooks
}

// New returns a dead-letterer; it does not start it.
func New(js jetstream.JetStream, stores *kv.Stores, cfg Config) (*DeadLetterer, error) {
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = salvagetype.SweepIntervalDefault
	}
	if cfg.UnknownPipelineWait <= 0 {
		cfg.UnknownPipelineWait = salvagetype.UnknownPipelineWaitDefault
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	log = log.With().Str("role", "dead-letter").Logger()
	d := &DeadLetterer{
		js: js, stores: stores, cfg: cfg, log: log,
		letter: flow.Letterer{JS: js, Stores: stores, Tracker: flow.Tracker{JS: js, Stores: stores, Tracer: flow.TracerOf(cfg.TracerProvider)}, Log: log, Limits: cfg.Limits, Prices: cfg.Prices},
		repair: newRepairer(js, stores, max(cfg.SweepInterval, time.Second), log),
		retain: &retainer{js: js, stores: stores, defaults: cfg.Retention.WithDefaults(), log: log, now: time.Now},
	}
	d.hooks.Exhausted = d.exhausted
	return d, nil
}

// Hooks are the points where the consumers' tests reach into the
// dead-letterer (Exhausted); the type is internal to consumers.
func (d *DeadLetterer) Hooks() *flow.Hooks { return &d.hooks }

// Run consumes advisories and sweeps until ctx ends. It blocks; it returns
// nil on cancellation and an error only if the consumer cannot be bound.
func (d *DeadLetterer) Run(ctx context.Context) error {
	cons, err := flow.BindConsumer(ctx, d.js, streams.Advisories, streams.DeadLetterConsumer)
	if err != nil || cons == nil {
		return err
	}
	if d.cfg.SweepInterval > 0 {
		go d.repair.follow(ctx)
		go d.sweepLoop(ctx)
	}
	var wg sync.WaitGroup
	wg.Go(func() { newReaper(d.js, d.stores, d.log).run(ctx) })
	wg.Go(func() { d.retain.run(ctx) })
	wg.Go(func() { d.buildIndex(ctx) })
	defer wg.Wait()
	flow.FetchLoop(ctx, cons, 16, d.log, func(m jetstream.Msg) { d.handleAdvisory(ctx, m) })
	return nil
}

// buildIndex gives the records written before SALVAGE_INDEX existed their
// entries (once per deployment; a failure is tried again at the next
// start).
func (d *DeadLetterer) buildIndex(ctx context.Context) {
	n, err := d.stores.BuildIndex(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		d.log.Error().Err(err).Msg("build the listing index from the records written before it; listings miss them until the next start")
	case n > 0:
		d.log.Info().Int("records", n).Msg("built the listing index from the records written before it")
	}
}

func (d *DeadLetterer) handleAdvisory(ctx context.Context, m jetstream.Msg) {
	var adv streams.Advisory
	if err := json.Unmarshal(m.Data(), &adv); err != nil || adv.StreamSeq == 0 {
		d.log.Error().Err(err).Str("subject", m.Subject()).Msg("unreadable advisory, dropped")
		_ = m.Term()
		return
	}
	k, ok := streams.PartitionOfStream(adv.Stream)
	if !ok {
		d.log.Error().Str("stream", adv.Stream).Str("subject", m.Subject()).Msg("advisory of a stream that holds no chunks, dropped")
		_ = m.Term()
		return
	}
	err := d.exhausted(ctx, k, adv.StreamSeq, adv.Deliveries)
	var held *heldError
	if errors.As(err, &held) {
		// The advisory can beat the expiry of a dead holder's lease by a
		// moment. Ask again once the lease has run out: by then the holder
		// either finished the chunk or is gone. Acking here would leave the
		// chunk to the sweeper, which cannot see it while the work queue
		// is busy (the ack floor stays below an exhausted message).
		_ = m.NakWithDelay(time.Until(held.until) + time.Second)
		return
	}
	if err != nil {
		meta, _ := m.Metadata()
		if meta != nil && meta.NumDelivered >= streams.DeadLetterMaxDeliverDefault {
			// The sweeper finds the exhausted chunk without its advisory.
			d.log.Error().Err(err).Uint64("stream_seq", adv.StreamSeq).Msg("dead-letter failed on every delivery of its advisory; left to the sweeper")
			_ = m.Term()
			return
		}
		d.log.Error().Err(err).Uint64("stream_seq", adv.StreamSeq).Msg("dead-letter failed; will retry")
		_ = m.NakWithDelay(flow.RetryDelay(meta))
		return
	}
	if err := m.Ack(); err != nil {
		d.log.Warn().Err(err).Msg("ack advisory")
	}
}

// exhausted dead-letters the chunk message at seq of partition k's chunk
// stream, which used up its deliveries. A message already gone or a chunk
// already done gets no envelope; one held by a live worker gets none yet:
// *heldError says until when (invariant 6).
func (d *DeadLetterer) exhausted(ctx context.Context, k int, seq, deliveries uint64) error {
	part, err := d.stores.Part(ctx, k)
	if err != nil {
		return err
	}
	var raw *jetstream.RawStreamMsg
	err = streams.Retry(ctx, func(ctx context.Context) error {
		s, err := d.js.Stream(ctx, streams.ChunksStream(k))
		if err != nil {
			return err
		}
		raw, err = s.GetMsg(ctx, seq)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumers: fetch chunk message %d: %w", seq, err)
	}
	l := flow.Letter{Seq: seq, Subject: raw.Subject, Data: raw.Data, Deliveries: deliveries, DeleteOriginal: true}
	err = json.Unmarshal(raw.Data, &l.Chunk)
	// The stream the message is in is its partition, whatever it says.
	l.Chunk.Partition = k
	if err != nil || l.Chunk.Job == "" {
		ref, perr := streams.ParseChunkSubject(raw.Subject)
		if perr != nil {
			// Neither body nor subject names a chunk: nothing to recover.
			d.log.Error().Uint64("stream_seq", seq).Str("subject", raw.Subject).Msg("unidentifiable chunk message")
			return nil
		}
		l.Chunk = salvagetype.ChunkMsg{Job: ref.Job, Chunk: ref.Chunk, Pipeline: ref.Pipeline, Partition: k}
		l.Failure = recovery.Failure{Class: salvagetype.ClassPermanent}
		l.Err = "malformed chunk message"
		_, err := d.letter.Send(ctx, l)
		return err
	}
	cp, _, err := part.Checkpoints.Get(ctx, l.Chunk.Job, l.Chunk.Chunk)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return err
	}
	if cp.Status == salvagetype.ChunkDone || cp.Status.IsCancelled() {
		// Finished, only its ack was lost — its worker died right after
		// the checkpoint: remove it, no envelope, and settle what that
		// worker did not.
		if err := flow.DeleteMsg(ctx, d.js, streams.ChunksStream(k), seq); err != nil {
			return err
		}
		return d.letter.Tracker.FinishedAgain(ctx, d.js, cp, "dead-letterer")
	}
	if lease, err := part.Claims.Get(ctx, l.Chunk.Job, l.Chunk.Chunk); err == nil && lease.Live(time.Now()) {
		d.log.Info().Str("job_id", l.Chunk.Job).Int("chunk", l.Chunk.Chunk).Str("holder", lease.ClaimedBy).
			Msg("exhausted chunk still held by a live worker; not dead-lettered")
		return &heldError{holder: lease.ClaimedBy, until: lease.ExpiresAt}
	}
	// A last delivery that ended without an error of its own died
	// mid-chunk: what it was calling may be in flight.
	died := cp.LastError == "" || cp.LastErrorOlder
	l.Failure = recovery.Failure{Class: flow.ClassFromCheckpoint(cp), Status: cp.LastErrorStatus, Exhausted: true, InFlight: died}
	l.Err = cp.LastError
	l.FailedAgent, l.FailedTool, l.FailedCall = cp.LastErrorAgent, cp.LastErrorTool, cp.LastErrorCall
	switch {
	case l.Err == "":
		l.Err = fmt.Sprintf("worker stopped without a result on each of %d deliveries", deliveries)
	case died:
		l.Err = "worker stopped without a result on its last delivery; before that: " + l.Err
	}
	_, err = d.letter.Send(ctx, l)
	if errors.Is(err, flow.ErrStaleMessage) {
		return nil // removed: a newer message runs the chunk
	}
	return err
}

// heldError says an exhausted chunk is still held by a live lease, so it
// gets no envelope yet (invariant 6).
type heldError struct {
	holder string
	until  time.Time
}

func (e *heldError) Error() string {
	return fmt.Sprintf("held by %s until %s", e.holder, e.until.Format(time.RFC3339Nano))
}

func (d *DeadLetterer) sweepLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.SweepInterval)
	defer t.Stop()
	for {
		if n, err := d.Sweep(ctx); err != nil {
			d.log.Warn().Err(err).Msg("sweep")
		} else if n > 0 {
			d.log.Info().Int("dead_lettered", n).Msg("sweep found exhausted chunks")
		}
		if n, err := d.repair.repair(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn().Err(err).Int("repaired", n).Msg("repair")
		}
		if _, err := d.SweepIntake(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn().Err(err).Msg("intake sweep")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep dead-letters every message left in a chunk stream that used up its
// deliveries yet got no envelope from an advisory, in every chunk pool of
// every partition.
// Such a message sits at or below its pool's ack floor — but the server
// (v2.15.2) moves the floor past an exhausted message only once a later
// message is acked, so when nothing at all is pending, every delivered
// message still in the stream counts as exhausted too. It returns how many
// it handled.
func (d *DeadLetterer) Sweep(ctx context.Context) (int, error) {
	n := 0
	for _, part := range d.stores.Parts() {
		k, err := d.sweepPartition(ctx, part.Index)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// sweepPartition sweeps the chunk pools of partition k (see Sweep).
func (d *DeadLetterer) sweepPartition(ctx context.Context, k int) (int, error) {
	s, err := d.js.Stream(ctx, streams.ChunksStream(k))
	if err != nil {
		return 0, fmt.Errorf("consumers: sweep: %w", err)
	}
	names := s.ConsumerNames(ctx)
	var pools []string
	for name := range names.Name() {
		if _, ok := streams.PoolPipeline(name); ok || name == streams.LegacyWorkersConsumer {
			pools = append(pools, name)
		}
	}
	if err := names.Err(); err != nil {
		return 0, fmt.Errorf("consumers: sweep: list the pools: %w", err)
	}
	n := 0
	for _, name := range pools {
		swept, err := d.sweepPool(ctx, k, s, name)
		n += swept
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// sweepPool sweeps one chunk pool (see Sweep).
func (d *DeadLetterer) sweepPool(ctx context.Context, k int, s jetstream.Stream, name string) (int, error) {
	cons, err := s.Consumer(ctx, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil // deleted meanwhile (a legacy consumer an upgrade removed)
	}
	if err != nil {
		return 0, fmt.Errorf("consumers: sweep %s: %w", name, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("consumers: sweep %s: %w", name, err)
	}
	floor := info.AckFloor.Stream
	if info.NumAckPending == 0 && info.Delivered.Stream > floor {
		floor = info.Delivered.Stream
	}
	filter := cmp.Or(info.Config.FilterSubject, streams.ChunksIn(k))
	n := 0
	for seq := uint64(1); seq <= floor; seq++ {
		raw, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("consumers: sweep %s at %d: %w", name, seq, err)
		}
		if raw.Sequence > floor {
			break
		}
		var held *heldError
		if err := d.exhausted(ctx, k, raw.Sequence, uint64(info.Config.MaxDeliver)); err != nil && !errors.As(err, &held) {
			return n, err
		}
		n++
		seq = raw.Sequence
	}
	return n, nil
}
