package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// SettleEnvelope brings the envelope a chunk last ran for in line with how
// the chunk ended: resolved when it is done, resolved (a person's doing)
// when its job was cancelled. A final envelope, or a chunk still running,
// is left alone. A missing envelope is not an error.
func SettleEnvelope(ctx context.Context, st *kv.Stores, cp kv.Checkpoint, by string) error {
	if cp.Envelope == "" || (cp.Status != salvagetype.ChunkDone && !cp.Status.IsCancelled()) {
		return nil
	}
	_, err := st.Envelopes.Mutate(ctx, cp.Envelope, func(r *kv.EnvelopeRecord) error {
		if r.Final() && r.Status != salvagetype.EnvelopeEscalated {
			return kv.ErrNoChange
		}
		if r.Status == salvagetype.EnvelopeEscalated && cp.Status != salvagetype.ChunkDone {
			// A cancelled job leaves what was escalated to a person.
			return kv.ErrNoChange
		}
		if r.Stopped != "" {
			// It settles the chunk's effects after its cancel: only the
			// orchestrator (or a person) ends it.
			return kv.ErrNoChange
		}
		if r.Category == salvagetype.CategoryBudgetExceeded && cp.Status != salvagetype.ChunkDone {
			// The cancellation is what this envelope reports: it goes to
			// a person, not away with the chunks it stopped.
			return kv.ErrNoChange
		}
		r.Status, r.Requeued, r.RecoveringBy, r.LeaseUntil = salvagetype.EnvelopeResolved, false, "", time.Time{}
		if cp.Status == salvagetype.ChunkDone {
			r.ResolvedBy = "chunk"
			r.Notes = append(r.Notes, "chunk finished ("+by+")")
		} else {
			r.ResolvedBy, r.Human = "cancel", true
			r.Notes = append(r.Notes, "job cancelled; chunk "+string(cp.Status))
		}
		return nil
	})
	if errors.Is(err, kv.ErrNotFound) {
		return nil
	}
	return err
}

// Supersede marks old, an earlier envelope of the chunk whose new failure
// is envelope id, as superseded by it. A resolved or already superseded
// envelope keeps its status.
func Supersede(ctx context.Context, st *kv.Stores, old, id string) error {
	_, err := st.Envelopes.Mutate(ctx, old, func(r *kv.EnvelopeRecord) error {
		if r.Status == salvagetype.EnvelopeResolved || r.Status == salvagetype.EnvelopeSuperseded {
			return kv.ErrNoChange
		}
		r.Status, r.SupersededBy, r.Requeued, r.RecoveringBy, r.LeaseUntil = salvagetype.EnvelopeSuperseded, id, false, "", time.Time{}
		r.Notes = append(r.Notes, "superseded by envelope "+id+": the chunk failed again")
		return nil
	})
	if errors.Is(err, kv.ErrNotFound) {
		return nil
	}
	return err
}

// Requeue publishes the chunk of env again as its chunk message, at
// epoch, under msgID, with link (Salvage-Recovery-Of or Salvage-Replay-Of)
// naming the envelope: the message of every recovery, replay and repair.
// It returns the stream's ack (Duplicate when msgID was published before).
func Requeue(ctx context.Context, js jetstream.JetStream, env salvagetype.Envelope, epoch int, msgID, link string) (*jetstream.PubAck, error) {
	var chunk salvagetype.ChunkMsg
	if err := json.Unmarshal(env.Original.Data, &chunk); err != nil {
		return nil, fmt.Errorf("envelope %s: original chunk unreadable: %w", env.ID, err)
	}
	chunk.Epoch = epoch
	data, err := json.Marshal(chunk)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(env.Original.Subject)
	m.Data = data
	m.Header.Set(salvagetype.HeaderMsgID, msgID)
	m.Header.Set(link, env.ID)
	m.Header.Set(salvagetype.HeaderJob, env.Job)
	m.Header.Set(salvagetype.HeaderChunk, strconv.Itoa(env.Chunk))
	if env.TraceID != "" {
		m.Header.Set(salvagetype.HeaderTraceParent, streams.TraceParent(env.TraceID, streams.DeriveSpanID(msgID)))
	}
	return Publish(ctx, js, m)
}

// AdmitAfter admits the chunk that starting chunk lets in: chunk+Window of
// a job with a backlog. It is repeat-safe and cheap when there is nothing
// to admit.
func AdmitAfter(ctx context.Context, js jetstream.JetStream, job kv.Job, chunk int) error {
	return admitTo(ctx, js, job, chunk, func(n int) string {
		return job.Ref().Chunk(n).Subject()
	})
}

// AdmitOnHold admits the chunk that starting chunk lets in onto the hold
// of system, whose breaker is open or whose held chunks are coming back
// at the ramp's rate: the holder releases it with them, at that rate.
// Repeat-safe, as admitAfter.
func AdmitOnHold(ctx context.Context, js jetstream.JetStream, job kv.Job, chunk int, system string) error {
	return admitTo(ctx, js, job, chunk, func(n int) string { return job.Ref().Chunk(n).Hold(system) })
}

// admitTo moves chunk+Window of job, if it waits in the backlog, to the
// subject to names for it.
func admitTo(ctx context.Context, js jetstream.JetStream, job kv.Job, chunk int, to func(n int) string) error {
	if job.Window <= 0 || chunk+job.Window > job.Chunks {
		return nil
	}
	_, err := Admit(ctx, js, job, job.Ref().Chunk(chunk+job.Window).Backlog(), to)
	return err
}

// Admit moves the oldest message on subject (one chunk's, or a job's
// whole backlog filter) from SALVAGE_BACKLOG to to(chunk) — its subject
// in SALVAGE_CHUNKS, or on a hold — under the same Nats-Msg-Id, then
// deletes it from the backlog: a crash between the two makes the next
// admission publish a duplicate the stream drops. A message from a job
// message that lost the race for the job id is only deleted. It reports
// whether it admitted one.
func Admit(ctx context.Context, js jetstream.JetStream, job kv.Job, subject string, to func(n int) string) (bool, error) {
	for range 4 {
		var raw *jetstream.RawStreamMsg
		err := streams.Retry(ctx, func(ctx context.Context) error {
			s, err := StreamHandle(ctx, js, streams.Backlog)
			if err != nil {
				return err
			}
			raw, err = s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("consumers: read backlog %s: %w", subject, err)
		}
		var c salvagetype.ChunkMsg
		stray := json.Unmarshal(raw.Data, &c) == nil && c.SourceSeq != 0 && job.SourceSeq != 0 && c.SourceSeq != job.SourceSeq
		n, perr := strconv.Atoi(raw.Subject[strings.LastIndexByte(raw.Subject, '.')+1:])
		if perr != nil || n < 1 {
			stray = true
		}
		if !stray {
			m := nats.NewMsg(to(n))
			m.Data = raw.Data
			for k, v := range raw.Header {
				m.Header[k] = v
			}
			if _, err := Publish(ctx, js, m); err != nil {
				return false, err
			}
		}
		if err := DeleteMsg(ctx, js, streams.Backlog, raw.Sequence); err != nil {
			return false, err
		}
		if !stray {
			return true, nil
		}
	}
	return false, nil
}

// DeleteMsg removes a message; one already gone is not an error.
func DeleteMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) error {
	err := streams.Retry(ctx, func(ctx context.Context) error {
		s, err := StreamHandle(ctx, js, stream)
		if err != nil {
			return err
		}
		err = s.DeleteMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
			// The server answers a delete of a message already gone
			// with a failure, not a "not found": look.
			if _, gerr := s.GetMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
				return nil
			}
		}
		return err
	})
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("consumers: delete %s message %d: %w", stream, seq, err)
	}
	return nil
}

// FinishedAgain repairs what a crash may have left behind when a chunk
// that already finished turns up again (a redelivered message, an
// exhausted one the dead-letterer finds): the job's counts are settled
// against its checkpoints, the chunk's envelope follows its outcome, and
// the chunk after its window is admitted.
func (t Tracker) FinishedAgain(ctx context.Context, js jetstream.JetStream, cp kv.Checkpoint, by string) error {
	job, err := t.settle(ctx, cp.Job)
	if err != nil {
		return err
	}
	if err := SettleEnvelope(ctx, t.Stores, cp, by); err != nil {
		return err
	}
	return AdmitAfter(ctx, js, job, cp.Chunk)
}

// Unpark publishes the parked chunk message data (from subject, at
// sequence seq of SALVAGE_HOLD, with headers hdr) back to its partition's
// chunk stream (the worker that parked it checked that the message names
// its job's partition)
// with extra headers: a new message (a fresh delivery budget) whose id
// derives from seq, so releasing one parked copy twice publishes it once.
func Unpark(ctx context.Context, js jetstream.JetStream, subject string, data []byte, hdr, extra nats.Header, seq uint64) error {
	var c salvagetype.ChunkMsg
	if err := json.Unmarshal(data, &c); err != nil || c.Pipeline == "" || c.Job == "" || c.Chunk < 1 {
		return fmt.Errorf("parked message %d on %s is not a chunk message: %v", seq, subject, err)
	}
	out := nats.Header{}
	for _, k := range CarriedHeaders {
		if v := hdr.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	for k, v := range extra {
		out[k] = v
	}
	out.Set(salvagetype.HeaderMsgID, fmt.Sprintf("%s.%d.release.%d", c.Job, c.Chunk, seq))
	out.Set(salvagetype.HeaderJob, c.Job)
	out.Set(salvagetype.HeaderChunk, strconv.Itoa(c.Chunk))
	_, err := Publish(ctx, js, &nats.Msg{Subject: RefOf(c).Subject(), Data: data, Header: out})
	return err
}

// CarriedHeaders go with a chunk message wherever it is parked or
// released: its trace and the envelope it re-runs the chunk for.
var CarriedHeaders = []string{salvagetype.HeaderTraceParent, salvagetype.HeaderRecoveryOf, salvagetype.HeaderReplayOf}
