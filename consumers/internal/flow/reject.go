package flow

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// IntakeJobID is the id the splitter would have given the job message
// raw (see jobIDFor), so a waiter for it hears of its rejection.
func IntakeJobID(raw *jetstream.RawStreamMsg) string {
	var msg salvagetype.JobMsg
	if json.Unmarshal(raw.Data, &msg) == nil && msg.JobID != nil && streams.ValidateJobID(*msg.JobID) == nil {
		return *msg.JobID
	}
	meta := &jetstream.MsgMetadata{Stream: streams.Jobs, Timestamp: raw.Time}
	meta.Sequence.Stream = raw.Sequence
	return JobIDFor(raw.Header.Get(salvagetype.HeaderMsgID), meta)
}

// RejectError carries a rejection reason.
type RejectError struct {
	Reason salvagetype.RejectReason
	Err    error
}

func (e *RejectError) Error() string { return string(e.Reason) + ": " + e.Err.Error() }

func (e *RejectError) Unwrap() error { return e.Err }

// JobIDFor applies the identity rule: a valid ULID in Nats-Msg-Id, else a
// ULID derived from the stream sequence and timestamp — the same on every
// redelivery, never fresh randomness.
func JobIDFor(msgID string, meta *jetstream.MsgMetadata) string {
	if id, err := ulid.ParseStrict(msgID); err == nil {
		return id.String()
	}
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(meta.Timestamp))
	h := sha256.Sum256([]byte(meta.Stream + "/" + strconv.FormatUint(meta.Sequence.Stream, 10) + "/" + meta.Timestamp.UTC().Format(time.RFC3339Nano)))
	_ = id.SetEntropy(h[:10])
	return id.String()
}

// PublishRejection publishes the bounded rejection event of the job
// message at seq (its subject and data) on salvage.events.rejected.<reason>
// and, when the job id is known, on salvage.events.<job>.rejected too,
// where a waiter for that job finds it. Repeat-safe: its ids derive from
// seq.
func PublishRejection(ctx context.Context, js jetstream.JetStream, subject string, data []byte, seq uint64, job string, rej *RejectError) error {
	ev := streams.NewRejection(rej.Reason, rej.Err, subject, seq, data)
	ev.JobID = job
	h := nats.Header{}
	h.Set(salvagetype.HeaderReason, string(rej.Reason))
	h.Set(salvagetype.HeaderMsgID, fmt.Sprintf("rejected.%d", seq))
	if err := PublishJSON(ctx, js, streams.RejectedSubject(rej.Reason), ev, h); err != nil {
		return err
	}
	if job == "" {
		return nil
	}
	h = nats.Header{}
	h.Set(salvagetype.HeaderReason, string(rej.Reason))
	h.Set(salvagetype.HeaderMsgID, fmt.Sprintf("rejected.%d.job", seq))
	return PublishJSON(ctx, js, streams.JobRef{Job: job}.Event(streams.EventRejected), ev, h)
}
