package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/natsext"
)

// batchWait bounds one batched direct get whose context has no deadline
// (natsext.RequestMany would give it the connection's 2 s).
const batchWait = 30 * time.Second

// directBatch is one batched direct get on stream (ADR-31: req is a
// DIRECT.GET body with batch or multi_last), each message handed to fn in
// order; fn returning false stops early. Unlike jetstreamext's GetBatch
// and GetLastMsgsFor, whose reply stream ends quietly when its wait runs
// out, it reports a reply cut short (ErrBatchCut, a timeout to
// streams.Retry): a listing, a count or a record read from it is either
// whole or an error. A 404 (nothing matched) is a complete, empty answer.
func directBatch(ctx context.Context, js jetstream.JetStream, stream string, req any, fn func(m *jetstream.RawStreamMsg) bool) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, batchWait)
		defer cancel()
	}
	complete := false
	replies, err := natsext.RequestMany(ctx, js.Conn(), apiSubject(js, "DIRECT.GET."+stream), body,
		natsext.RequestManySentinel(func(m *nats.Msg) bool {
			complete = len(m.Data) == 0 && m.Header.Get("Status") == "204" && m.Header.Get("Description") == "EOB"
			return complete
		}))
	if err != nil {
		return err
	}
	for m, err := range replies {
		if err != nil {
			return err
		}
		if len(m.Data) == 0 && m.Header.Get("Status") != "" {
			if m.Header.Get("Status") == "404" {
				return nil
			}
			return fmt.Errorf("kv: direct get on %s: %s %s", stream, m.Header.Get("Status"), m.Header.Get("Description"))
		}
		raw, err := rawMsg(m)
		if err != nil {
			return fmt.Errorf("kv: direct get on %s: %w", stream, err)
		}
		if !fn(raw) {
			return nil
		}
	}
	if !complete {
		return fmt.Errorf("%w (%s): %w", ErrBatchCut, stream, context.DeadlineExceeded)
	}
	return nil
}

// rawMsg reads a direct get reply's headers into the stored message.
func rawMsg(m *nats.Msg) (*jetstream.RawStreamMsg, error) {
	subject := m.Header.Get(jetstream.SubjectHeader)
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if subject == "" || err != nil {
		return nil, fmt.Errorf("a reply without its subject or sequence (%q, %q)", subject, m.Header.Get(jetstream.SequenceHeader))
	}
	at, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("a reply's time stamp: %w", err)
	}
	return &jetstream.RawStreamMsg{Subject: subject, Sequence: seq, Header: m.Header, Data: m.Data, Time: at}, nil
}

// apiSubject is the JetStream API subject of op for js (its API prefix
// or domain, else $JS.API).
func apiSubject(js jetstream.JetStream, op string) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "." + op
	case o.Domain != "":
		return "$JS." + o.Domain + ".API." + op
	default:
		return "$JS.API." + op
	}
}
