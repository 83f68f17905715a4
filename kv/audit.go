package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// AuditLog is SALVAGE_AUDIT: each operator action is written before it
// runs (outcome pending) and again, on the same subject, with its
// outcome; the stream keeps one message a subject.
type AuditLog struct {
	js jetstream.JetStream
	x  seqIndex
}

// OpenAudit binds to SALVAGE_AUDIT; a write finds out whether it exists.
func OpenAudit(js jetstream.JetStream) *AuditLog {
	return &AuditLog{js: js, x: seqIndex{js: js, stream: streams.Audit}}
}

// Write puts e on subject. The message id names the entry and its
// outcome, so a write retried after a lost ack is stored once.
func (a *AuditLog) Write(ctx context.Context, subject string, e salvagetype.AuditEntry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, e.ID+"-"+string(e.Outcome))
	err = streams.Retry(ctx, func(ctx context.Context) error {
		_, err := a.js.PublishMsg(ctx, m, jetstream.WithExpectStream(streams.Audit))
		return err
	})
	if err != nil {
		return fmt.Errorf("%w: %w", salvagetype.ErrAuditUnavailable, err)
	}
	return nil
}

// Read hands fn the entries under filter from sequence from, oldest
// first, at most n of them, until fn returns false. It returns whether
// more follow the last one read. An entry that does not decode is passed
// over.
func (a *AuditLog) Read(ctx context.Context, filter string, from uint64, n int, fn func(seq uint64, e salvagetype.AuditEntry) bool) (more bool, err error) {
	read, last := 0, uint64(0)
	err = a.x.read(ctx, filter, from, n, func(m *jetstream.RawStreamMsg, pending int) bool {
		if m.Sequence <= last {
			// A batch retried after a transient error starts again:
			// each entry is handed over once.
			return true
		}
		read, last = read+1, m.Sequence
		more = pending > 0
		var e salvagetype.AuditEntry
		if json.Unmarshal(m.Data, &e) != nil {
			return true
		}
		return fn(m.Sequence, e)
	})
	return more && read > 0, err
}

// SeqAt is the first sequence SALVAGE_AUDIT stored at or after t.
func (a *AuditLog) SeqAt(ctx context.Context, t time.Time) (uint64, error) {
	return a.x.seqAt(ctx, t)
}

// Last is SALVAGE_AUDIT's last sequence.
func (a *AuditLog) Last(ctx context.Context) (uint64, error) { return a.x.last(ctx) }
