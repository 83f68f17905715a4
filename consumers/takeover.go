package consumers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/streams"
)

// takeoverEvery is how often a worker looks for a chunk whose holder's
// lease lapsed; takeoverSlotWait how long it waits for a free slot for
// one (the pool's fetch holds the free slots while it waits for work, and
// gives them back at least every second).
const (
	takeoverEvery    = 250 * time.Millisecond
	takeoverSlotWait = 1500 * time.Millisecond
)

// takeovers follows salvage_claims and takes over, into a free slot of
// its pool, a running chunk whose holder stopped renewing its lease (its
// process died): the message is read from SALVAGE_CHUNKS by sequence and
// acknowledged through the dead delivery's reply subject, kept in progress
// meanwhile, so the chunk resumes a lease after the crash instead of an
// AckWait. Acks are keyed by stream sequence, so the dead delivery's are
// the message's. A chunk is taken over at most MaxDeliver-1 times in all;
// after that its redeliveries count towards the DLQ as before.
type takeovers struct {
	w  *Worker
	mu sync.Mutex
	// claims are the claims as last watched, by key.
	claims map[string]kv.Lease
	// trying are the keys being taken over by this process.
	trying map[string]bool
	str    jetstream.Stream
}

func newTakeovers(w *Worker) *takeovers {
	return &takeovers{w: w, claims: map[string]kv.Lease{}, trying: map[string]bool{}}
}

// update applies one watched claim change.
func (t *takeovers) update(e jetstream.KeyValueEntry) {
	if e == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(t.claims, e.Key())
		return
	}
	l := kv.LeaseOf(e)
	if l.Unreadable != "" || l.Reply == "" {
		delete(t.claims, e.Key())
		return
	}
	t.claims[e.Key()] = l
}

// run follows the claims and takes over lapsed ones until ctx ends; the
// chunks it starts run in workCtx and join wg, each holding a slot of its
// pipeline's.
func (t *takeovers) run(ctx, workCtx context.Context, slots map[string]chan struct{}, wg *sync.WaitGroup) {
	go kv.Follow(ctx, t.w.js, kv.BucketClaims, t.update, nil)
	tick := time.NewTicker(takeoverEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, l := range t.lapsed(time.Now(), slots) {
			t.try(ctx, workCtx, l, slots[l.Pipeline], wg)
		}
	}
}

// lapsed are the watched claims of pipelines this worker runs whose lease
// passed, held by another process, not yet taken over as often as the
// chunk may be delivered.
func (t *takeovers) lapsed(now time.Time, slots map[string]chan struct{}) []kv.Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []kv.Lease
	for key, l := range t.claims {
		if _, ok := slots[l.Pipeline]; !ok || t.trying[key] || l.ClaimedBy == t.w.cfg.ID || l.Believed(now, now, t.w.poolFor(l.Pipeline).lease()) {
			continue
		}
		if int(l.Delivery)+l.Takeovers >= t.w.poolFor(l.Pipeline).maxDeliver {
			continue
		}
		out = append(out, l)
	}
	return out
}

// try takes l over if a slot of its pool is free and its chunk is still
// running; the chunk then runs as any delivery does.
func (t *takeovers) try(ctx, workCtx context.Context, l kv.Lease, slots chan struct{}, wg *sync.WaitGroup) {
	wait := time.NewTimer(takeoverSlotWait)
	defer wait.Stop()
	select {
	case slots <- struct{}{}:
	case <-wait.C:
		return // every slot busy: another survivor, or a later tick
	case <-ctx.Done():
		return
	}
	freed := false
	free := func() {
		if !freed {
			freed = true
			<-slots
		}
	}
	m, err := t.take(ctx, l)
	if err != nil || m == nil {
		free()
		if err != nil && ctx.Err() == nil {
			t.w.log.Debug().Err(err).Str("claim", l.Key).Msg("take over a lapsed claim")
		}
		return
	}
	t.mu.Lock()
	t.trying[l.Key] = true
	t.mu.Unlock()
	t.w.log.Info().Str("claim", l.Key).Str("holder", l.ClaimedBy).Uint64("stream_seq", l.Seq).
		Dur("lapsed_ms", time.Since(l.ExpiresAt)).Msg("holder's lease lapsed; chunk taken over")
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			t.mu.Lock()
			delete(t.trying, l.Key)
			t.mu.Unlock()
		}()
		t.w.handle(workCtx, m, free)
	}()
}

// take steals l and reads its message; nil without an error when the
// chunk is no longer running (finished, waiting for a retry, held) or its
// message is gone.
func (t *takeovers) take(ctx context.Context, l kv.Lease) (jetstream.Msg, error) {
	job, chunk, ok := kv.ParseChunkKey(l.Key)
	if !ok {
		return nil, nil
	}
	cp, _, err := t.w.stores.Checkpoints.Get(ctx, job, chunk)
	if err != nil || cp.Status != kv.StatusRunning {
		return nil, nil
	}
	lease, err := t.w.stores.Claims.TakeOver(ctx, l, t.w.cfg.ID, t.w.poolFor(l.Pipeline).lease())
	if err != nil {
		return nil, err
	}
	if t.str == nil {
		if t.str, err = t.w.js.Stream(ctx, streams.Chunks); err != nil {
			return nil, err
		}
	}
	raw, err := t.str.GetMsg(ctx, l.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// Acknowledged since: nothing to run.
		_ = t.w.stores.Claims.Release(ctx, lease)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &takenMsg{nc: t.w.js.Conn(), raw: raw, reply: l.Reply, from: l.ClaimedBy, meta: jetstream.MsgMetadata{
		Sequence: jetstream.SequencePair{Stream: l.Seq}, NumDelivered: l.Delivery, Timestamp: raw.Time,
		Stream: streams.Chunks, Consumer: streams.WorkersConsumer(l.Pipeline),
	}}, nil
}

// takenMsg is a chunk message taken over from a dead delivery: read from
// the stream, acknowledged through that delivery's reply subject.
type takenMsg struct {
	nc    *nats.Conn
	raw   *jetstream.RawStreamMsg
	reply string
	meta  jetstream.MsgMetadata
	// from is the dead holder.
	from string
}

func (m *takenMsg) Metadata() (*jetstream.MsgMetadata, error) { meta := m.meta; return &meta, nil }
func (m *takenMsg) Data() []byte                              { return m.raw.Data }
func (m *takenMsg) Headers() nats.Header                      { return m.raw.Header }
func (m *takenMsg) Subject() string                           { return m.raw.Subject }
func (m *takenMsg) Reply() string                             { return m.reply }
func (m *takenMsg) Ack() error                                { return m.nc.Publish(m.reply, []byte("+ACK")) }
func (m *takenMsg) Nak() error                                { return m.nc.Publish(m.reply, []byte("-NAK")) }
func (m *takenMsg) InProgress() error                         { return m.nc.Publish(m.reply, []byte("+WPI")) }
func (m *takenMsg) Term() error                               { return m.nc.Publish(m.reply, []byte("+TERM")) }

func (m *takenMsg) DoubleAck(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	_, err := m.nc.RequestWithContext(ctx, m.reply, []byte("+ACK"))
	return err
}

func (m *takenMsg) NakWithDelay(d time.Duration) error {
	return m.nc.Publish(m.reply, fmt.Appendf(nil, `-NAK {"delay": %d}`, d.Nanoseconds()))
}

func (m *takenMsg) TermWithReason(reason string) error {
	return m.nc.Publish(m.reply, []byte("+TERM "+reason))
}
