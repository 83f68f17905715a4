package consumers

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

// intakeJobID is the id the splitter would have given the job message
// raw (see jobIDFor), so a waiter for it hears of its rejection.
func intakeJobID(raw *jetstream.RawStreamMsg) string {
	var msg salvagetype.JobMsg
	if json.Unmarshal(raw.Data, &msg) == nil && msg.JobID != nil && streams.ValidateJobID(*msg.JobID) == nil {
		return *msg.JobID
	}
	meta := &jetstream.MsgMetadata{Stream: streams.Jobs, Timestamp: raw.Time}
	meta.Sequence.Stream = raw.Sequence
	return jobIDFor(raw.Header.Get(salvagetype.HeaderMsgID), meta)
}

// rejectError carries a rejection reason.
type rejectError struct {
	reason salvagetype.RejectReason
	err    error
}

func (e *rejectError) Error() string { return string(e.reason) + ": " + e.err.Error() }

func (e *rejectError) Unwrap() error { return e.err }

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

// publishRejection publishes the bounded rejection event of the job
// message at seq (its subject and data) on salvage.events.rejected.<reason>
// and, when the job id is known, on salvage.events.<job>.rejected too,
// where a waiter for that job finds it. Repeat-safe: its ids derive from
// seq.
func publishRejection(ctx context.Context, js jetstream.JetStream, subject string, data []byte, seq uint64, job string, rej *rejectError) error {
	ev := streams.NewRejection(rej.reason, rej.err, subject, seq, data)
	ev.JobID = job
	h := nats.Header{}
	h.Set(salvagetype.HeaderReason, string(rej.reason))
	h.Set(salvagetype.HeaderMsgID, fmt.Sprintf("rejected.%d", seq))
	if err := publishJSON(ctx, js, streams.RejectedSubject(rej.reason), ev, h); err != nil {
		return err
	}
	if job == "" {
		return nil
	}
	h = nats.Header{}
	h.Set(salvagetype.HeaderReason, string(rej.reason))
	h.Set(salvagetype.HeaderMsgID, fmt.Sprintf("rejected.%d.job", seq))
	return publishJSON(ctx, js, streams.JobRef{Job: job}.Event(streams.EventRejected), ev, h)
}
