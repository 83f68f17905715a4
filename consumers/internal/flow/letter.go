package flow

import (
	"context"
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
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Letter describes a chunk message that cannot finish.
type Letter struct {
	// Seq, Subject and Data are the original chunk message.
	Seq     uint64
	Subject string
	Data    []byte
	// Chunk is the parsed chunk; Job and Chunk may come from the subject
	// when the body is malformed.
	Chunk      salvagetype.ChunkMsg
	Deliveries uint64
	Failure    recovery.Failure
	Err        string
	// FailedAgent, FailedTool and FailedCall name the failing agent and
	// call; empty ones are taken from the journal's last FAILED row.
	FailedAgent, FailedTool, FailedCall string
	// DeleteOriginal removes the original from its chunk stream once the
	// envelope is stored; the worker's permanent path terms it instead.
	DeleteOriginal bool
	// Human marks an envelope a person caused (a rejected approval): it
	// never counts as recovered automatically.
	Human bool
	// Stopped, when set (salvagetype.StoppedCancelled), makes the envelope the
	// settlement of a chunk its job's cancel stopped at Stage while
	// effects of Epoch may stand: guarded once per chunk epoch (there may
	// be no message), recorded Stopped, and the checkpoint ends
	// cancelled-at-stage-Stage, not dead-lettered.
	Stopped string
	Stage   int
	Epoch   int
	// tally is what the chunk's calls came to by its journal, set by send
	// for finish.
	tally *recovery.Tally
}

// ErrStaleMessage: the letter's chunk message is older than the one the
// chunk last ran from (its checkpoint's MsgSeq). A newer message — a
// recovery's, a replay's — took the chunk over, so this one's failure is
// not the chunk's: it gets no envelope, and the chunk's own envelope is
// not superseded by one recovery already settled (which would leave the
// effects the newer envelope must compensate standing).
var ErrStaleMessage = errors.New("an older message of the chunk: a newer one has run it since")

// stale reports whether l's message is older than the one cp last ran
// from (see olderMessage). A settlement of a cancel (Stopped) and a
// letter without a message are never stale.
func (d Letterer) stale(ctx context.Context, l Letter, cp kv.Checkpoint) (bool, error) {
	if l.Stopped != "" {
		return false, nil
	}
	return OlderMessage(ctx, d.JS, l.Chunk.Partition, l.Seq, cp)
}

// OlderMessage reports whether the message at seq of partition k's chunk
// stream is older than the one cp last ran from: cp.MsgSeq is higher. Sequences only grow
// in a stream, unless it was deleted and made again: a cp.MsgSeq past the
// stream's last sequence says so, and nothing is called older then. Only
// a message that looks older costs a read of the stream's state.
func OlderMessage(ctx context.Context, js jetstream.JetStream, k int, seq uint64, cp kv.Checkpoint) (bool, error) {
	if seq == 0 || cp.MsgSeq <= seq {
		return false, nil
	}
	var last uint64
	err := streams.Retry(ctx, func(ctx context.Context) error {
		s, err := js.Stream(ctx, streams.ChunksStream(k))
		if err != nil {
			return err
		}
		last = s.CachedInfo().State.LastSeq
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("consumers: read %s: %w", streams.ChunksStream(k), err)
	}
	return cp.MsgSeq <= last, nil
}

// guardKey is the key that makes l's envelope the only one.
func (l Letter) guardKey() string {
	if l.Stopped != "" {
		return kv.StopGuardKey(l.Chunk.Job, l.Chunk.Chunk, l.Epoch)
	}
	return kv.GuardKey(l.Chunk.Partition, l.Seq)
}

// Letterer writes failure envelopes (invariant 6): one guard key per chunk
// message, the envelope stored before the original is removed.
type Letterer struct {
	JS      jetstream.JetStream
	Stores  *kv.Stores
	Tracker Tracker
	Log     zerolog.Logger
	// Limits escalate a chunk past its recoveries from the start.
	Limits recovery.Limits
	// Prices price the usage of the chunk's calls, counted from its
	// journal when it is dead-lettered (nil: its cost stays as counted).
	Prices recovery.Prices
}

// Send dead-letters l and returns the envelope id. It is idempotent per
// chunk message: a second call for the same Seq finishes the first call's
// envelope instead of writing another.
func (d Letterer) Send(ctx context.Context, l Letter) (string, error) {
	id := ulid.Make().String()
	g, err := d.Stores.Envelopes.GuardKeyed(ctx, l.guardKey(), id)
	switch {
	case errors.Is(err, kv.ErrGuardExists):
		id = g.Envelope
	case err != nil:
		return "", err
	}
	if _, _, err := d.Stores.Envelopes.Get(ctx, id); err == nil {
		// Published and recorded by an earlier attempt, which may have
		// died before finishing.
		return id, d.finish(ctx, l, id, nil)
	} else if !errors.Is(err, kv.ErrNotFound) {
		return "", err
	}

	part, err := d.Stores.Part(ctx, l.Chunk.Partition)
	if err != nil {
		return "", err
	}
	cp, _, err := part.Checkpoints.Get(ctx, l.Chunk.Job, l.Chunk.Chunk)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return "", err
	}
	if stale, err := d.stale(ctx, l, cp); err != nil || stale {
		if err != nil {
			return "", err
		}
		return "", d.dropStale(ctx, l, cp)
	}
	rows, err := part.Journal.Load(ctx, l.Chunk.Job, l.Chunk.Chunk, cp.Epoch)
	if err != nil {
		return "", err
	}
	if l.Stopped != "" && cp.Epoch != l.Epoch {
		// The chunk moved to another epoch since: load the one stopped.
		if rows, err = part.Journal.Load(ctx, l.Chunk.Job, l.Chunk.Chunk, l.Epoch); err != nil {
			return "", err
		}
		cp.Epoch = l.Epoch
	}
	env := d.envelope(id, &l, cp, rows)
	ack, err := publishEnvelope(ctx, d.JS, d.Stores, env)
	if err != nil {
		return "", err
	}
	rec := kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: id, Job: env.Job, Chunk: env.Chunk, Category: env.Category, Strategy: env.Strategy, Status: salvagetype.EnvelopeOpen, StreamSeq: l.Seq, Subject: l.Subject, DLQSeq: ack.Sequence, TraceID: env.TraceID, Human: l.Human, Stopped: l.Stopped, Rejected: l.Failure.Rejected}}
	if err := d.Stores.Envelopes.Put(ctx, rec); err != nil {
		return "", err
	}
	// Its calls count from its journal: a worker that died mid-stage
	// never counted the ones it made in that stage.
	tally, err := PastTally(ctx, part, l.Chunk.Job, l.Chunk.Chunk, cp.Epoch, d.Prices)
	if err != nil {
		return "", err
	}
	all := tally.Plus(recovery.Rows(rows).Tally(d.Prices))
	l.tally = &all
	msg := "chunk dead-lettered"
	if l.Stopped != "" {
		msg = "cancelled chunk's effects sent to be settled"
	}
	d.Log.Warn().Str("envelope_id", id).Str("job_id", env.Job).Int("chunk", env.Chunk).
		Str("trace_id", env.TraceID).Int("stage", env.FailedStage).Str("category", string(env.Category)).
		Uint64("deliveries", l.Deliveries).Str("error", l.Err).Msg(msg)
	return id, d.finish(ctx, l, id, &cp)
}

// envelope is the failure envelope id of l, the chunk at checkpoint cp
// with journal rows: classified, with its calls' entries and where it
// broke. A letter that names no failed call takes the journal's.
func (d Letterer) envelope(id string, l *Letter, cp kv.Checkpoint, rows map[string]kv.StoredRow) salvagetype.Envelope {
	f := l.Failure
	f.FromJournal(rows)
	f.Recoveries = cp.Recoveries
	category, strategy := f.Classify(d.Limits)
	completed, inFlight, pending, failed := recovery.Rows(rows).Entries()
	completed, inFlight, pending, dropped := envelopeEntries(completed, inFlight, pending)
	if l.FailedAgent == "" && l.FailedTool == "" && l.FailedCall == "" {
		l.FailedAgent, l.FailedTool, l.FailedCall = failed.Agent, failed.Tool, failed.Key
	}
	return salvagetype.Envelope{
		ID: id, Job: l.Chunk.Job, Chunk: l.Chunk.Chunk, Pipeline: l.Chunk.Pipeline,
		TraceID: l.Chunk.TraceID, Category: category, Strategy: strategy,
		Error: streams.Clip(l.Err, salvagetype.ErrorTextMax), ErrorClass: f.Class.String(), FailedTool: l.FailedTool, FailedAgent: l.FailedAgent, FailedCall: l.FailedCall, FailedStage: max(cp.Stage, 1),
		Deliveries: l.Deliveries, Tier1Attempts: cp.Tier1Retries, Recoveries: cp.Recoveries,
		CompletedEntries: completed, InFlightEntries: inFlight, PendingCompensations: pending, EntriesDropped: dropped,
		Checkpoint: salvagetype.EnvelopeCheckpoint{Stage: max(cp.Stage, 1), Status: cp.Status, Epoch: cp.Epoch},
		Original:   salvagetype.OriginalMessage{Stream: streams.ChunksStream(l.Chunk.Partition), Seq: l.Seq, Subject: l.Subject, Data: rawJSON(l.Data)},
		CreatedAt:  time.Now().UTC(),
	}
}

// finish marks the checkpoint dead-lettered (counting it in its job),
// supersedes the chunk's earlier envelope, and removes the original. When
// the checkpoint was marked already, an earlier attempt died part-way:
// the job is settled against its checkpoints in case its count was lost.
// seen is the checkpoint send already read and found not stale (nil: read
// it here, for an earlier attempt's envelope).
func (d Letterer) finish(ctx context.Context, l Letter, id string, seen *kv.Checkpoint) error {
	var previous string
	var delta kv.Delta
	marked := false
	part, err := d.Stores.Part(ctx, l.Chunk.Partition)
	if err != nil {
		return err
	}
	var current kv.Checkpoint
	if seen != nil {
		current = *seen
	} else {
		var err error
		if current, _, err = part.Checkpoints.Get(ctx, l.Chunk.Job, l.Chunk.Chunk); err != nil && !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		if stale, err := d.stale(ctx, l, current); err != nil || stale {
			// An earlier attempt stored id for this message and died
			// before this step; a newer message has run the chunk since.
			if err != nil {
				return err
			}
			return d.dropStale(ctx, l, current)
		}
	}
	cp, err := part.Checkpoints.Mutate(ctx, l.Chunk.Job, l.Chunk.Chunk, func(cp *kv.Checkpoint) error {
		previous, delta, marked = "", kv.Delta{}, false
		if l.Stopped == "" && l.Seq != 0 && cp.MsgSeq > current.MsgSeq && cp.MsgSeq > l.Seq {
			// A newer message took the chunk since the look above.
			return ErrStaleMessage
		}
		if cp.Status == salvagetype.ChunkDone || cp.Envelope == id && (cp.Status == salvagetype.ChunkDeadLettered || l.Stopped != "" && cp.Status.IsCancelled()) {
			marked = true
			return kv.ErrNoChange
		}
		if cp.Envelope != id {
			previous = cp.Envelope
		}
		delta = l.mark(cp, id)
		return nil
	})
	if errors.Is(err, ErrStaleMessage) {
		return d.dropStale(ctx, l, cp)
	}
	if err != nil {
		return err
	}
	if previous != "" {
		// The chunk a recovery or replay requeued failed again: the new
		// envelope carries its fate.
		if err := Supersede(ctx, d.Stores, previous, id); err != nil {
			return err
		}
	}
	if l.DeleteOriginal {
		if err := DeleteMsg(ctx, d.JS, streams.ChunksStream(l.Chunk.Partition), l.Seq); err != nil {
			return err
		}
	}
	return d.count(ctx, l, cp, marked, delta)
}

// mark writes what dead-lettering (or, for a stopped chunk, cancelling)
// under envelope id says into cp, and returns how its job's counts move.
func (l Letter) mark(cp *kv.Checkpoint, id string) kv.Delta {
	status, kind := salvagetype.ChunkDeadLettered, salvagetype.EventDeadLettered
	if l.Stopped != "" {
		status, kind = salvagetype.CancelledAtStage(l.Stage), salvagetype.EventCancelled
		cp.Stage = l.Stage
	}
	cp.Status, cp.Envelope, cp.ClaimedBy = status, id, ""
	cp.Record(salvagetype.ChunkEvent{Kind: kind, Stage: cp.Stage, Delivery: l.Deliveries, Detail: id})
	cp.Reason = streams.Clip(l.Err, salvagetype.ErrorTextMax)
	if l.tally != nil {
		SetTally(cp, *l.tally)
	}
	if l.Deliveries > cp.Deliveries {
		cp.Redeliveries += int(l.Deliveries - max(cp.Deliveries, 1))
		cp.Deliveries = l.Deliveries
	}
	return cp.Recount()
}

// count counts the marked chunk in its job (delta), or, marked by an
// earlier attempt, settles the job against its checkpoints.
func (d Letterer) count(ctx context.Context, l Letter, cp kv.Checkpoint, marked bool, delta kv.Delta) error {
	var err error
	if marked {
		_, err = d.Tracker.settle(ctx, l.Chunk.Job)
	} else {
		_, err = d.Tracker.Apply(ctx, l.Chunk.Job, l.Chunk.Chunk, cp.Status, delta)
	}
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return err
	}
	return nil
}

// dropStale removes a stale letter's message when the letter says so
// (the worker terms its own) and returns errStaleMessage.
func (d Letterer) dropStale(ctx context.Context, l Letter, cp kv.Checkpoint) error {
	d.Log.Info().Str("job_id", l.Chunk.Job).Int("chunk", l.Chunk.Chunk).Uint64("stream_seq", l.Seq).Uint64("current_seq", cp.MsgSeq).
		Msg("an older message of the chunk failed after a newer one ran it; no envelope")
	if l.DeleteOriginal {
		if err := DeleteMsg(ctx, d.JS, streams.ChunksStream(l.Chunk.Partition), l.Seq); err != nil {
			return err
		}
	}
	return ErrStaleMessage
}

// publishEnvelope stores env's body beside its record-to-be, then
// publishes it on salvage.dlq.<category>.<pipeline>.<job>.<chunk> under
// its id as Nats-Msg-Id, so publishing it again is deduplicated. The
// caller writes the record last: a record never exists without its body,
// from which an envelope whose DLQ message is gone is restored.
func publishEnvelope(ctx context.Context, js jetstream.JetStream, st *kv.Stores, env salvagetype.Envelope) (*jetstream.PubAck, error) {
	data, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	if err := st.Envelopes.PutBody(ctx, env.ID, data); err != nil {
		return nil, err
	}
	return PublishEnvelopeMsg(ctx, js, env, data, env.ID)
}

// PublishEnvelopeMsg publishes the envelope env, encoded as data, to
// SALVAGE_DLQ under msgID.
func PublishEnvelopeMsg(ctx context.Context, js jetstream.JetStream, env salvagetype.Envelope, data []byte, msgID string) (*jetstream.PubAck, error) {
	h := nats.Header{}
	h.Set(salvagetype.HeaderMsgID, msgID)
	h.Set(salvagetype.HeaderEnvelope, env.ID)
	h.Set(salvagetype.HeaderJob, env.Job)
	h.Set(salvagetype.HeaderChunk, strconv.Itoa(env.Chunk))
	if env.TraceID != "" {
		h.Set(salvagetype.HeaderTraceParent, streams.TraceParent(env.TraceID, streams.DeriveSpanID(env.ID)))
	}
	return Publish(ctx, js, &nats.Msg{Subject: streams.ChunkRef{Pipeline: env.Pipeline, Job: env.Job, Chunk: env.Chunk}.DLQ(env.Category), Data: data, Header: h})
}

// rawJSON keeps data verbatim when it is JSON, else wraps it as a string so
// the envelope stays valid JSON and the bytes are not lost.
func rawJSON(data []byte) json.RawMessage {
	if json.Valid(data) {
		return data
	}
	s, _ := json.Marshal(string(data))
	return s
}

// envelopeEntries bounds the lists of recovery.Rows.Entries for an envelope: each
// keeps its newest salvagetype.EnvelopeEntriesMax keys (completed and
// in-flight are oldest first, pending newest first); dropped counts the
// rest. Recovery reads the whole journal, never these lists.
func envelopeEntries(completed, inFlight, pending []string) (c, i, p []string, dropped int) {
	newest := func(keys []string, newestFirst bool) []string {
		n := len(keys) - salvagetype.EnvelopeEntriesMax
		switch {
		case n <= 0:
			return keys
		case newestFirst:
			dropped += n
			return keys[:salvagetype.EnvelopeEntriesMax]
		default:
			dropped += n
			return keys[n:]
		}
	}
	return newest(completed, false), newest(inFlight, false), newest(pending, true), dropped
}

// ClassFromCheckpoint is the error class cp recorded last (none when it
// recorded none, or one this version does not know).
func ClassFromCheckpoint(cp kv.Checkpoint) salvagetype.Class {
	c, _ := salvagetype.ParseClass(cp.LastErrorClass)
	return c
}
