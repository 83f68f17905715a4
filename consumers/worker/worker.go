package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Worker defaults.
const (

	// nakDelayDefault is the upper bound of the jittered delay before a
	// chunk whose tier-1 retries ran out is redelivered.
	nakDelayDefault = 2 * time.Second
)

// Config configures a Worker.
type Config struct {
	// ID names this worker in claims and checkpoints. Default host-pid-ULID.
	ID string
	// Registry knows the pipelines. Required.
	Registry *recovery.Registry
	// Concurrency is how many chunks of each pipeline run at once (a
	// pipeline may set its own). Default ConcurrencyDefault.
	Concurrency int
	// AckWait must match the workers consumer's AckWait; the claim lease
	// equals it. Default salvagetype.AckWaitDefault.
	AckWait time.Duration
	// Heartbeat is how often a running chunk reports in-progress and renews
	// its claim. Default AckWait/3.
	Heartbeat time.Duration
	// MaxDeliver must match the consumer's MaxDeliver. Default
	// salvagetype.MaxDeliverDefault.
	MaxDeliver int
	// Retry is the tier-1 policy. Zero fields take recovery's defaults.
	Retry recovery.RetryPolicy
	// NakDelay bounds the jittered redelivery delay after tier 1 gives up.
	// Default nakDelayDefault.
	NakDelay time.Duration
	// DrainTimeout bounds the drain on shutdown. Default DrainTimeoutDefault.
	DrainTimeout time.Duration
	// Alive, when set, says whether the process that holds a claim lives
	// (salvage_workers has its record): a claim of a holder that does not
	// is not believed, however recently it was written. The root package's
	// client sets it (its processes write their record before they claim
	// anything). Default nil: every holder is believed for its lease.
	Alive func(ctx context.Context, holder string) bool
	// JobWait is how long a chunk whose job has no record yet is held
	// (in progress) waiting for it: the splitter creates the record after
	// publishing every chunk. Default JobWaitDefault.
	JobWait time.Duration
	// Breakers are the circuit breakers' policies, per external system.
	Breakers BreakerPolicies
	// Prices price the model usage charged against job budgets.
	Prices recovery.Prices
	// Logger receives worker logs. Default zerolog.Nop().
	Logger *zerolog.Logger
	// TracerProvider receives the spans of chunks, stages, agent turns,
	// calls and finished jobs. Default the global provider.
	TracerProvider trace.TracerProvider
}

func (c *Config) setDefaults() error {
	if c.Registry == nil {
		return fmt.Errorf("%w: Config.Registry is nil", flow.ErrInvalidConfig)
	}
	if c.ID == "" {
		c.ID = flow.ProcessID()
	}
	if err := salvagetype.ValidateToken("worker id", c.ID); err != nil {
		return fmt.Errorf("%w: Config.ID: %w", flow.ErrInvalidConfig, err)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = salvagetype.ConcurrencyDefault
	}
	if c.AckWait <= 0 {
		c.AckWait = salvagetype.AckWaitDefault
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = c.AckWait / 3
	}
	if c.Heartbeat >= c.AckWait {
		return fmt.Errorf("%w: Config.Heartbeat %s must be shorter than AckWait %s", flow.ErrInvalidConfig, c.Heartbeat, c.AckWait)
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = salvagetype.MaxDeliverDefault
	}
	if c.NakDelay <= 0 {
		c.NakDelay = nakDelayDefault
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = salvagetype.DrainTimeoutDefault
	}
	if c.JobWait <= 0 {
		c.JobWait = salvagetype.JobWaitDefault
	}
	if err := c.Prices.Validate(); err != nil {
		return fmt.Errorf("%w: Config.Prices: %w", flow.ErrInvalidConfig, err)
	}
	if err := c.Breakers.Validate(); err != nil {
		return fmt.Errorf("%w: Config.Breakers: %w", flow.ErrInvalidConfig, err)
	}
	return nil
}

// Worker runs chunks from the pools of its pipelines (one consumer per
// pipeline, streams.Pipeline.Workers): claim, fence, stages, results, ack.
// Any number of workers, in any number of processes, may run against one
// deployment; each only ever receives the chunks of the pipelines it has.
type Worker struct {
	js      jetstream.JetStream
	stores  *kv.Stores
	cfg     Config
	log     zerolog.Logger
	exec    *recovery.Executor
	tracker flow.Tracker
	letter  flow.Letterer
	cancels *cancelRegistry
	tracer  trace.Tracer
	// gate is this process's view of the circuit breakers; holder parks
	// and releases the chunks they hold.
	gate   *gate
	holder *holder
	// limiter paces the requests to what rate limits are declared on.
	limiter *limiter
	// pauses is this process's view of the paused pipelines.
	pauses *pauses
	// waitRoom bounds the chunks waiting for their tenant's turn without
	// a slot (tenantTurn).
	waitRoom chan struct{}
	// tails bounds the finished chunks still doing their bookkeeping
	// after giving their slot to the next chunk.
	tails chan struct{}
	// journal is where a chunk's journal rows go, given its partition's
	// inFlight counts the chunks being handled now.
	inFlight atomic.Int64
	// pools are each pipeline's settings (the worker's, or the
	// pipeline's own).
	pools map[string]pool
	hooks flow.Hooks
}

// New returns a worker; it does not start it. It fails on a setting
// out of range.
func New(js jetstream.JetStream, stores *kv.Stores, cfg Config) (*Worker, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	log = log.With().Str("role", "worker").Str("worker", cfg.ID).Logger()
	exec, err := recovery.NewExecutor(cfg.Retry, log)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", flow.ErrInvalidConfig, err)
	}
	tracer := flow.TracerOf(cfg.TracerProvider)
	tr := flow.Tracker{JS: js, Stores: stores, Counts: flow.NewCounts(stores), Tracer: tracer}
	g := newGate(js, stores, cfg.Breakers, cfg.ID, log)
	ps := newPauses(js, log)
	pools, slots := map[string]pool{}, 0
	for _, name := range cfg.Registry.Names() {
		p, _ := cfg.Registry.Get(name)
		pl, err := cfg.poolOf(p)
		if err != nil {
			return nil, err
		}
		pools[name], slots = pl, slots+pl.concurrency
	}
	w := &Worker{
		gate: g, pauses: ps, holder: newHolder(js, g, ps, cfg.ID, cfg.Registry.Names(), stores.Partitions, log),
		limiter: newLimiter(js, stores, cfg.ID, log),
		js:      js, stores: stores, cfg: cfg, log: log, exec: exec, tracker: tr, tracer: tracer,
		letter:   flow.Letterer{JS: js, Stores: stores, Tracker: tr, Log: log, Prices: cfg.Prices},
		cancels:  newCancelRegistry(),
		tails:    make(chan struct{}, max(slots, 1)),
		waitRoom: make(chan struct{}, max(slots, waitRoomMin)),
		pools:    pools,
	}
	w.tracker.Hooks = &w.hooks
	return w, nil
}

// pool is how a worker runs one pipeline's chunks: at most concurrency
// at once, each kept in progress every heartbeat and held by a claim
// lease (lease) renewed three times a lease, the last of maxDeliver
// deliveries handed to the DLQ at once.
type pool struct {
	concurrency, maxDeliver int
	ackWait, heartbeat      time.Duration
}

// leaseFloor keeps a claim lease above the time a renewal can take on a
// loaded machine.
const leaseFloor = 2 * time.Second

// lease is how long a claim lasts unrenewed: two fifths of AckWait (at
// least leaseFloor, at most AckWait), so a survivor takes a dead holder's
// chunk over well before the server would redeliver it, even twice.
func (p pool) lease() time.Duration { return min(max(2*p.ackWait/5, leaseFloor), p.ackWait) }

// renew is how often a held claim is renewed.
func (p pool) renew() time.Duration { return p.lease() / 3 }

// poolOf is p's pool: its own settings where it has them, else c's.
func (c *Config) poolOf(p *recovery.Plan) (pool, error) {
	pl := pool{concurrency: c.Concurrency, maxDeliver: c.MaxDeliver, ackWait: c.AckWait, heartbeat: c.Heartbeat}
	if p.Concurrency > 0 {
		pl.concurrency = p.Concurrency
	}
	if p.MaxDeliver > 0 {
		pl.maxDeliver = p.MaxDeliver
	}
	if p.AckWait > 0 {
		pl.ackWait, pl.heartbeat = p.AckWait, p.AckWait/3
	}
	if p.Concurrency < 0 || p.MaxDeliver < 0 || p.AckWait < 0 || pl.heartbeat <= 0 || pl.heartbeat >= pl.ackWait {
		return pl, fmt.Errorf("%w: pipeline %s: Concurrency, AckWait and MaxDeliver must not be negative (AckWait %s)", flow.ErrInvalidConfig, p.Name, pl.ackWait)
	}
	return pl, nil
}

// poolFor is pipeline's pool; a pipeline the worker does not run (a
// stray message) gets the worker's own settings.
func (w *Worker) poolFor(pipeline string) pool {
	if p, ok := w.pools[pipeline]; ok {
		return p
	}
	return pool{concurrency: w.cfg.Concurrency, maxDeliver: w.cfg.MaxDeliver, ackWait: w.cfg.AckWait, heartbeat: w.cfg.Heartbeat}
}

// Lease is the process lease this worker's process must keep in its
// salvage_workers record (three writes a lease): the shortest claim
// lease of its pools, at most kv.ProcessLeaseMax. Once it lapses, a
// reaper hands the chunks the process held back to their pools.
func (w *Worker) Lease() time.Duration {
	lease := kv.ProcessLeaseMax
	for _, p := range w.pools {
		lease = min(lease, p.lease())
	}
	return lease
}

// ID returns the worker's id as written in claims and checkpoints.
func (w *Worker) ID() string { return w.cfg.ID }

// InFlight returns how many chunks the worker is handling now.
func (w *Worker) InFlight() int { return int(w.inFlight.Load()) }

// Run fetches and runs chunks until ctx ends, then drains: it stops
// fetching, lets in-flight chunks finish for up to DrainTimeout, and
// releases the rest for another worker. It blocks until the drain is over
// and returns nil, or an error if the consumer cannot be bound.
func (w *Worker) Run(ctx context.Context) error {
	// One pool per pipeline in each partition: a worker never receives a
	// chunk of a pipeline it does not run (invariant 10).
	names := w.cfg.Registry.Names()
	type bound struct {
		pipeline string
		cons     jetstream.Consumer
	}
	var pools []bound
	bindPartition := func(k int) error {
		cons, err := flow.BindPools(ctx, w.js, streams.ChunksStream(k), names, streams.Pipeline.Workers)
		for i, c := range cons {
			pools = append(pools, bound{names[i], c})
		}
		return err
	}
	bound0 := w.stores.Partitions()
	for k := range bound0 {
		if err := bindPartition(k); err != nil || ctx.Err() != nil {
			return err
		}
	}
	w.takeOver(ctx, names)
	// Chunks outlive ctx so a drain can finish them.
	workCtx, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopWork(nil)
	limiterDone := w.follow(ctx, workCtx)
	defer func() { stopWork(nil); <-limiterDone }()

	var wg sync.WaitGroup
	var pulls sync.WaitGroup
	slots := make(map[string]chan struct{}, len(names))
	for _, name := range names {
		slots[name] = make(chan struct{}, w.poolFor(name).concurrency)
	}
	start := func(ps []bound) {
		for _, p := range ps {
			pulls.Add(1)
			go func() {
				defer pulls.Done()
				w.pull(ctx, workCtx, p.pipeline, p.cons, slots[p.pipeline], &wg)
			}()
		}
	}
	start(pools)
	// Partitions made while it runs (Stores.Grow finds them): their pools
	// too. Counted in pulls, so the pulls it starts are waited for.
	pulls.Add(1)
	go func() {
		defer pulls.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for next := bound0; ; {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for ; next < w.stores.Partitions() && ctx.Err() == nil; next++ {
				pools = pools[:0]
				if err := bindPartition(next); err != nil {
					w.log.Warn().Err(err).Int("partition", next).Msg("bind the pools of a partition made since the start; trying again")
					break
				}
				start(pools)
				w.log.Info().Int("partition", next).Msg("taking chunks from a partition made since the start")
			}
		}
	}()
	pulls.Wait()
	w.drain(&wg, stopWork)
	return nil
}

// follow starts, for as long as workCtx lasts, what the chunks consult
// (cancellations, breakers, pauses, rate limits) and the holder, and
// returns once a chunk may start (or ctx ends): a chunk of a paused
// pipeline must not start before the worker knows, nor one whose job's
// cancellation it could miss, nor before the rate limits are known.
// limiterDone is closed once the limiter has handed its shares back.
func (w *Worker) follow(ctx, workCtx context.Context) (limiterDone <-chan struct{}) {
	cancelsReady := make(chan struct{})
	go w.followCancellations(workCtx, cancelsReady)
	go w.gate.follow(workCtx)
	go w.pauses.follow(workCtx)
	done := make(chan struct{})
	go func() { defer close(done); w.limiter.run(workCtx) }()
	go w.holder.run(workCtx)
	for _, ready := range []<-chan struct{}{w.pauses.ready, cancelsReady, w.limiter.ready} {
		select {
		case <-ready:
		case <-ctx.Done():
		}
	}
	return done
}

// takeOver records the pipelines the worker runs (a console pauses only
// those it knows) and hands back to the pools what a previous life of this
// worker id held, now, not when its lease would have lapsed (the reaper no
// longer can: this process's record is live).
func (w *Worker) takeOver(ctx context.Context, names []string) {
	for _, name := range names {
		if err := w.stores.Pipelines.Register(ctx, name); err != nil {
			// Pausing it from a console that does not know it fails.
			w.log.Warn().Err(err).Str("pipeline", name).Msg("record the pipeline")
		}
	}
	if n, err := flow.HandBack(ctx, w.js, w.stores, w.log, w.cfg.ID); err != nil {
		w.log.Warn().Err(err).Msg("hand back what a previous process of this id held")
	} else if n > 0 {
		w.log.Warn().Int("chunks", n).Msg("handed back the chunks a previous process of this id held")
	}
}

// drain lets the chunks in flight (wg) finish for up to DrainTimeout, then
// stops the rest (stopWork), which releases them for another worker.
func (w *Worker) drain(wg *sync.WaitGroup, stopWork context.CancelCauseFunc) {
	w.log.Info().Dur("timeout_ms", w.cfg.DrainTimeout).Msg("draining")
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.DrainTimeout):
		stopWork(flow.ErrDraining)
		<-done
	}
	w.log.Info().Msg("drained")
}

// pull fetches pipeline's chunks from its pool and runs each, at most
// Concurrency at once (a slot each, shared with the chunks taken over),
// until ctx ends; each run joins wg and outlives ctx (workCtx) so a drain
// can finish it.
func (w *Worker) pull(ctx, workCtx context.Context, pipeline string, cons jetstream.Consumer, slots chan struct{}, wg *sync.WaitGroup) {
	log := w.log.With().Str("pipeline", pipeline).Logger()
	take := func(runCtx context.Context) error {
		select {
		case slots <- struct{}{}:
			return nil
		case <-runCtx.Done():
			return context.Cause(runCtx)
		case <-ctx.Done():
			return flow.ErrDraining
		}
	}
	for ctx.Err() == nil {
		// Wait for a free slot, then ask for as many chunks as are free.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		free := 1
		for len(slots) < cap(slots) {
			slots <- struct{}{}
			free++
		}
		// Take what is there now; when nothing is, wait for one. A fetch
		// waiting for all it asked for would hold free slots idle while
		// chunks trickle in (a job's window admits one per chunk taken).
		got := 0
		run := func(batch jetstream.MessageBatch) error {
			for m := range batch.Messages() {
				got++
				wg.Add(1)
				go func() {
					defer wg.Done()
					w.handle(workCtx, m, slot{free: func() { <-slots }, take: take, stop: ctx.Done()})
				}()
			}
			return batch.Error()
		}
		batch, err := cons.FetchNoWait(free)
		if err == nil {
			err = run(batch)
		}
		if got == 0 && (err == nil || errors.Is(err, jetstream.ErrNoMessages)) {
			// Wait holding one slot: the pipeline's pulls of other
			// partitions may take the rest meanwhile.
			for range free - 1 {
				<-slots
			}
			free = 1
			if batch, err = cons.Fetch(1, jetstream.FetchMaxWait(time.Second)); err == nil {
				err = run(batch)
			}
		}
		for range free - got {
			<-slots
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			log.Debug().Err(err).Msg("fetch chunks")
			flow.SleepCtx(ctx, 250*time.Millisecond)
		}
	}
}

// nakDelay draws the tier-2 redelivery delay with full jitter.
func (w *Worker) nakDelay() time.Duration {
	return 100*time.Millisecond + rand.N(w.cfg.NakDelay)
}

// cancelledMemory is how long, at least, the registry remembers a cancelled job for
// chunks registering after the cancel: far longer than the moment between
// a chunk's read of its job record and its registration.
const cancelledMemory = time.Hour

// cancelledJob is when the watch saw a job cancelled, and why.
type cancelledJob struct {
	at     time.Time
	reason string
}

// cancelRegistry maps jobs to the cancel functions of their running
// chunks, and remembers the jobs the worker's watch saw cancelled: a chunk
// checks it at every stage boundary instead of reading its job record.
type cancelRegistry struct {
	mu        sync.Mutex
	jobs      map[string]map[int]context.CancelCauseFunc
	cancelled map[string]cancelledJob
	// pruned is when cancelled was last swept of old jobs: at most once
	// per cancelledMemory, so a watch replaying thousands of cancelled
	// jobs at start costs one pass, not one per job.
	pruned time.Time
}

func newCancelRegistry() *cancelRegistry {
	return &cancelRegistry{jobs: map[string]map[int]context.CancelCauseFunc{}, cancelled: map[string]cancelledJob{}, pruned: time.Now()}
}

// add registers a running chunk; one of a job already seen cancelled is
// cancelled at once.
func (r *cancelRegistry) add(job string, chunk int, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs[job] == nil {
		r.jobs[job] = map[int]context.CancelCauseFunc{}
	}
	r.jobs[job][chunk] = cancel
	if _, ok := r.cancelled[job]; ok {
		cancel(recovery.ErrJobCancelled)
	}
}

func (r *cancelRegistry) remove(job string, chunk int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs[job], chunk)
	if len(r.jobs[job]) == 0 {
		delete(r.jobs, job)
	}
}

// reason is why job was cancelled, as its record said.
func (r *cancelRegistry) reason(job string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.cancelled[job]; ok && c.reason != "" {
		return c.reason
	}
	return "job cancelled"
}

// cancelJob stops the job's running chunks and remembers the job and why.
func (r *cancelRegistry) cancelJob(job, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.pruned) > cancelledMemory {
		for j, c := range r.cancelled {
			if now.Sub(c.at) > cancelledMemory {
				delete(r.cancelled, j)
			}
		}
		r.pruned = now
	}
	if _, ok := r.cancelled[job]; !ok {
		r.cancelled[job] = cancelledJob{at: now, reason: reason}
	}
	for _, cancel := range r.jobs[job] {
		cancel(recovery.ErrJobCancelled)
	}
}

// slot is a delivery's place in its pool: free gives it back, take takes
// one again for a run that gave its own away while it waited (an error
// when ctx ends, errDraining when the pool stops taking chunks first),
// stop is closed when the pool stops taking chunks.
type slot struct {
	free func()
	take func(ctx context.Context) error
	stop <-chan struct{}
}

// Hooks are the points where the consumers' tests reach into the worker
// (AfterDone, AfterFinish, Journal); the type is internal to consumers.
func (w *Worker) Hooks() *flow.Hooks { return &w.hooks }

// journalOf is the journal a chunk's calls write to: its partition's, or
// a test's wrapper of it (Hooks.Journal).
func (w *Worker) journalOf(j recovery.JournalStore) recovery.JournalStore {
	if w.hooks.Journal != nil {
		return w.hooks.Journal(j)
	}
	return j
}
