package consumers_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/consumers/deadletter"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// publishChunk publishes chunk 1 of job, mode "ok", on pipeline's
// subject, linked to envelope link (Salvage-Recovery-Of) when set, and
// returns its sequence.
func publishChunk(t *testing.T, b *bundle, pipeline, job, link string) uint64 {
	t.Helper()
	m := nats.NewMsg(streams.ChunkRef{Pipeline: pipeline, Job: job, Chunk: 1}.Subject())
	m.Data, _ = json.Marshal(salvagetype.ChunkMsg{Job: job, Chunk: 1, Pipeline: "test", Input: json.RawMessage(`"ok"`)})
	if link != "" {
		m.Header.Set(salvagetype.HeaderRecoveryOf, link)
	}
	ack, err := b.JS.PublishMsg(b.ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// waitGone waits for message seq to leave SALVAGE_CHUNKS.
func waitGone(t *testing.T, b *bundle, seq uint64) {
	t.Helper()
	s, err := b.JS.Stream(b.ctx, streams.Chunks)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, err := s.GetMsg(b.ctx, seq)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}, "message %d to leave %s", seq, streams.Chunks)
}

// staleChunk makes the state chaos once left: a job of one chunk with two
// messages on SALVAGE_CHUNKS, an old one (its first run died after storing
// its envelope, which recovery has since settled and which a later failure
// superseded) and a newer one a recovery published for the chunk's
// current envelope, which is open and whose strategy has not run; the
// chunk last ran from that newer message. It returns the job, the old
// message's sequence and the two envelope ids.
func staleChunk(t *testing.T, b *bundle) (job string, oldSeq uint64, current, settled string) {
	t.Helper()
	job, current, settled = ulid.Make().String(), ulid.Make().String(), ulid.Make().String()
	if err := b.stores.Jobs.Create(b.ctx, kv.Job{Job: salvagetype.Job{ID: job, Pipeline: "test", Chunks: 1}}); err != nil {
		t.Fatal(err)
	}
	oldSeq = publishChunk(t, b, "test", job, "")
	// The old message's envelope: stored, settled, superseded since.
	if _, err := b.stores.Envelopes.GuardKeyed(b.ctx, kv.GuardKey(0, oldSeq), settled); err != nil {
		t.Fatal(err)
	}
	for _, r := range []kv.EnvelopeRecord{
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: settled, Job: job, Chunk: 1, Status: salvagetype.EnvelopeSuperseded, SupersededBy: "someone-else", StreamSeq: oldSeq, CreatedAt: time.Now()}},
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: current, Job: job, Chunk: 1, Status: salvagetype.EnvelopeRecovering, Requeued: true, CreatedAt: time.Now()}},
	} {
		if err := b.stores.Envelopes.Put(b.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	newSeq := publishChunk(t, b, "test", job, current)
	// The chunk ran from the newer message; it failed, and its envelope
	// is the current one.
	if _, err := b.stores.Parts()[0].Checkpoints.Mutate(b.ctx, job, 1, func(cp *kv.Checkpoint) error {
		cp.Status, cp.Envelope, cp.MsgSeq, cp.Deliveries = salvagetype.ChunkDeadLettered, current, newSeq, 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return job, oldSeq, current, settled
}

// TestAnOlderMessageOfAChunkNeitherRunsNorSupersedes: a chunk message
// older than the one its chunk last ran from is dropped unrun by a worker,
// and, exhausted, gets no envelope from the dead-letterer — above all it
// does not hand the chunk to its old, settled envelope, superseding the
// current one before its strategy ran (chaos once saw that leave a
// replayed order's effects standing, compensated by no one).
func TestAnOlderMessageOfAChunkNeitherRunsNorSupersedes(t *testing.T) {
	t.Parallel()
	t.Run("dead-letterer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noDeadLetter: true})
		job, oldSeq, current, settled := staleChunk(t, b)
		dl, err := deadletter.New(b.JS, b.stores, deadletter.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := dl.Hooks().Exhausted(b.ctx, 0, oldSeq, 3); err != nil {
			t.Fatal(err)
		}
		cp := b.checkpoint(t, job, 1)
		if cp.Envelope != current {
			t.Fatalf("the chunk names envelope %s; want %s, the current one (the old message's %s took it over)", cp.Envelope, current, settled)
		}
		if rec, _, err := b.stores.Envelopes.Get(b.ctx, current); err != nil || rec.Status != salvagetype.EnvelopeRecovering {
			t.Fatalf("current envelope = %+v, %v; want it still recovering, not superseded", rec, err)
		}
		if rec, _, err := b.stores.Envelopes.Get(b.ctx, settled); err != nil || rec.SupersededBy != "someone-else" {
			t.Fatalf("settled envelope = %+v, %v; want it untouched", rec, err)
		}
		s, err := b.JS.Stream(b.ctx, streams.Chunks)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetMsg(b.ctx, oldSeq); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("the old message is still on %s: %v", streams.Chunks, err)
		}
	})
	t.Run("worker", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		job, current := ulid.Make().String(), ulid.Make().String()
		if err := b.stores.Jobs.Create(b.ctx, kv.Job{Job: salvagetype.Job{ID: job, Pipeline: "test", Chunks: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := b.stores.Envelopes.Put(b.ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: current, Job: job, Chunk: 1, Status: salvagetype.EnvelopeRecovering, Requeued: true, CreatedAt: time.Now()}}); err != nil {
			t.Fatal(err)
		}
		oldSeq := publishChunk(t, b, "test", job, "")
		// The chunk last ran from a newer message (here one of a pipeline
		// nobody runs stands in for it), and a recovery requeued it.
		newer := publishChunk(t, b, "idle", job, "")
		if _, err := b.stores.Parts()[0].Checkpoints.Mutate(b.ctx, job, 1, func(cp *kv.Checkpoint) error {
			cp.Status, cp.Envelope, cp.MsgSeq, cp.Deliveries = salvagetype.ChunkPending, current, newer, 1
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		b.startWorker(t, "w1")
		waitGone(t, b, oldSeq)
		if n := callCount(job, 1, 1); n != 0 {
			t.Fatalf("the old message ran the chunk (stage 1 called %d times)", n)
		}
		if cp := b.checkpoint(t, job, 1); cp.Status != salvagetype.ChunkPending || cp.MsgSeq != newer {
			t.Fatalf("checkpoint after the old message = %s from message %d; want pending, from %d", cp.Status, cp.MsgSeq, newer)
		}
		// The recovery's message runs it, once.
		newSeq := publishChunk(t, b, "test", job, current)
		b.waitJob(t, job, salvagetype.JobDone)
		if n := callCount(job, 1, 2); n != 1 {
			t.Fatalf("stage 2 ran %d times; want once", n)
		}
		if cp := b.checkpoint(t, job, 1); cp.MsgSeq != newSeq {
			t.Fatalf("the chunk ran from message %d; want %d", cp.MsgSeq, newSeq)
		}
		salvagetest.Eventually(t, time.Minute, func() bool {
			rec, _, err := b.stores.Envelopes.Get(b.ctx, current)
			return err == nil && rec.Status == salvagetype.EnvelopeResolved
		}, "the current envelope resolved by its chunk")
	})
}

// TestAMessageWhoseRunWasDeadLetteredDoesNotRunAgain: the message a chunk
// last ran from, whose run ended in the DLQ, comes back (its worker was
// killed before its term left, or a server restart lost it) and is
// removed unrun: the chunk's envelope decides what runs next. Chaos once
// saw the redelivered replay of an envelope superseded since run the
// chunk fresh in a new epoch after the order had been compensated and
// abandoned: a reservation, an invoice and a charge no envelope accounted
// for.
func TestAMessageWhoseRunWasDeadLetteredDoesNotRunAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// replay publishes the message as a replay of the first envelope,
		// superseded since by the current one, which compensated the
		// epoch and abandoned the chunk; else as the chunk's own message,
		// whose envelope is open.
		replay bool
	}{{"its own envelope open", false}, {"a replay of an envelope superseded since", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{noDeadLetter: true})
			job, first, current := ulid.Make().String(), ulid.Make().String(), ulid.Make().String()
			if err := b.stores.Jobs.Create(b.ctx, kv.Job{Job: salvagetype.Job{ID: job, Pipeline: "test", Chunks: 1}}); err != nil {
				t.Fatal(err)
			}
			m := nats.NewMsg(streams.ChunkRef{Pipeline: "test", Job: job, Chunk: 1}.Subject())
			m.Data, _ = json.Marshal(salvagetype.ChunkMsg{Job: job, Chunk: 1, Pipeline: "test", Epoch: 1, Input: json.RawMessage(`"ok"`)})
			envs := []kv.EnvelopeRecord{{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: current, Job: job, Chunk: 1, Status: salvagetype.EnvelopeOpen, CreatedAt: time.Now()}}}
			if tc.replay {
				m.Header.Set(salvagetype.HeaderReplayOf, first)
				envs = []kv.EnvelopeRecord{
					{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: first, Job: job, Chunk: 1, Status: salvagetype.EnvelopeSuperseded, SupersededBy: current, CreatedAt: time.Now()}},
					{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: current, Job: job, Chunk: 1, Status: salvagetype.EnvelopeAbandoned, CreatedAt: time.Now()}},
				}
			}
			for _, r := range envs {
				if err := b.stores.Envelopes.Put(b.ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			ack, err := b.JS.PublishMsg(b.ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			// The chunk ran from this message, in epoch 1, and was
			// dead-lettered under the current envelope.
			if _, err := b.stores.Parts()[0].Checkpoints.Mutate(b.ctx, job, 1, func(cp *kv.Checkpoint) error {
				cp.Status, cp.Envelope, cp.MsgSeq, cp.Deliveries, cp.Epoch = salvagetype.ChunkDeadLettered, current, ack.Sequence, 1, 1
				cp.Compensated = tc.replay
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			b.startWorker(t, "w1")
			waitGone(t, b, ack.Sequence)
			if n := callCount(job, 1, 1); n != 0 {
				t.Fatalf("the message ran the chunk again (stage 1 called %d times)", n)
			}
			cp := b.checkpoint(t, job, 1)
			if cp.Status != salvagetype.ChunkDeadLettered || cp.Envelope != current || cp.Epoch != 1 || cp.MsgSeq != ack.Sequence {
				t.Fatalf("checkpoint = %s under %s in epoch %d from message %d; want it as it was: dead-lettered under %s in epoch 1 from %d",
					cp.Status, cp.Envelope, cp.Epoch, cp.MsgSeq, current, ack.Sequence)
			}
		})
	}
}

// TestAReplayByHandOfASupersededEnvelopeIsRefused: a chunk message
// published by hand with Salvage-Replay-Of naming an envelope that a later
// failure superseded runs nothing — the superseding envelope carries the
// chunk, its recovery perhaps running — and the old envelope says why, as
// Operator.Replay refuses it with ErrSuperseded.
func TestAReplayByHandOfASupersededEnvelopeIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noDeadLetter: true})
	job, first, current := ulid.Make().String(), ulid.Make().String(), ulid.Make().String()
	if err := b.stores.Jobs.Create(b.ctx, kv.Job{Job: salvagetype.Job{ID: job, Pipeline: "test", Chunks: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []kv.EnvelopeRecord{
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: first, Job: job, Chunk: 1, Status: salvagetype.EnvelopeSuperseded, SupersededBy: current, CreatedAt: time.Now()}},
		{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: current, Job: job, Chunk: 1, Status: salvagetype.EnvelopeOpen, CreatedAt: time.Now()}},
	} {
		if err := b.stores.Envelopes.Put(b.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// The chunk last ran from an earlier message (one of a pipeline
	// nobody runs stands in for it), dead-lettered under current.
	earlier := publishChunk(t, b, "idle", job, "")
	if _, err := b.stores.Parts()[0].Checkpoints.Mutate(b.ctx, job, 1, func(cp *kv.Checkpoint) error {
		cp.Status, cp.Envelope, cp.MsgSeq, cp.Deliveries = salvagetype.ChunkDeadLettered, current, earlier, 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(streams.ChunkRef{Pipeline: "test", Job: job, Chunk: 1}.Subject())
	m.Data, _ = json.Marshal(salvagetype.ChunkMsg{Job: job, Chunk: 1, Pipeline: "test", Input: json.RawMessage(`"ok"`)})
	m.Header.Set(salvagetype.HeaderReplayOf, first)
	ack, err := b.JS.PublishMsg(b.ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	b.startWorker(t, "w1")
	var rec kv.EnvelopeRecord
	salvagetest.Eventually(t, time.Minute, func() bool {
		rec, _, err = b.stores.Envelopes.Get(b.ctx, first)
		return err == nil && len(rec.Notes) > 0
	}, "the superseded envelope to say why its replay was refused")
	if !strings.Contains(rec.Notes[0], "refused") || !strings.Contains(rec.Notes[0], "superseded by "+current) {
		t.Fatalf("notes = %q; want the refusal, naming %s", rec.Notes, current)
	}
	waitGone(t, b, ack.Sequence)
	if n := callCount(job, 1, 1); n != 0 {
		t.Fatalf("the replay ran the chunk (stage 1 called %d times)", n)
	}
	if cp := b.checkpoint(t, job, 1); cp.Status != salvagetype.ChunkDeadLettered || cp.Envelope != current {
		t.Fatalf("checkpoint = %s under %s; want dead-lettered under %s", cp.Status, cp.Envelope, current)
	}
}
