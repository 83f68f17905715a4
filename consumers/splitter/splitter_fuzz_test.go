package splitter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// fuzzSplitter splits a job's input, a JSON array, one chunk per item,
// with small limits so the fuzzer reaches them.
func fuzzSplitter(f *testing.F) *Splitter {
	f.Helper()
	reg, err := recovery.NewRegistry(&recovery.Plan{
		Name: "items",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var items []json.RawMessage
			if err := json.Unmarshal(in, &items); err != nil {
				return nil, fmt.Errorf("%w: %w", salvagetype.ErrBadInput, err)
			}
			return items, nil
		},
		Stages: []salvagetype.Stage{{Name: "s", Agents: []salvagetype.Agent{{Name: "a", Run: func(context.Context, *salvagetype.Turn) (any, error) { return nil, nil }}}}},
	})
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(nil, nil, Config{Registry: reg, MaxPayload: 2048, MaxChunks: 20, ChunkWindow: 4})
	if err != nil {
		f.Fatal(err)
	}
	return s
}

// rejectReasons are the reasons a job message may be refused for.
var rejectReasons = map[salvagetype.RejectReason]bool{
	salvagetype.RejectMalformedJSON: true, salvagetype.RejectUnknownPipeline: true, salvagetype.RejectOversized: true,
	salvagetype.RejectBadToken: true, salvagetype.RejectBadSubject: true, salvagetype.RejectBadInput: true,
	salvagetype.RejectOversizedChunk: true, salvagetype.RejectTooManyChunks: true, salvagetype.RejectPanic: true,
}

// FuzzParseJob: whatever subject, body and headers a job message has,
// the splitter either refuses it with a known reason or produces chunks
// within the limits, under a valid job id and trace id, each chunk
// message on its job's subject — never a panic, never a chunk too large.
func FuzzParseJob(f *testing.F) {
	s := fuzzSplitter(f)
	for _, seed := range []struct{ subject, body, msgID, tp string }{
		{"salvage.jobs.items", `{"input": [1, 2, 3]}`, "", ""},
		{"salvage.jobs.items", `{"job_id": "01JABCDEFGHJKMNPQRSTVWXYZ0", "input": ["a"]}`, "", streams.NewTraceParent()},
		{"salvage.jobs.items", `{"job_id": "a.b", "input": [1]}`, "", ""},
		{"salvage.jobs.items", `{"job_id": "rejected", "input": [1]}`, "", ""},
		{"salvage.jobs.items", `{"input": []}`, "01JABCDEFGHJKMNPQRSTVWXYZ0", ""},
		{"salvage.jobs.items", `{"input": null}`, "x", "00-bad"},
		{"salvage.jobs.items", `{"input": [1]} trailing`, "", ""},
		{"salvage.jobs.nope", `{"input": [1]}`, "", ""},
		{"salvage.jobs.a.b", `{"input": [1]}`, "", ""},
		{"salvage.jobs.items", `{"input": ["` + string(make([]byte, 100)) + `"]}`, "", ""},
		{"salvage.jobs.items", `{"input": [0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}`, "", ""},
		{"salvage.jobs.items", `{"input": ["\u0000\ud800"], "budget": {"tokens": -1}}`, "", ""},
	} {
		f.Add(seed.subject, []byte(seed.body), seed.msgID, seed.tp)
	}
	f.Fuzz(func(t *testing.T, subject string, body []byte, msgID, tp string) {
		hdr := nats.Header{}
		hdr.Set(salvagetype.HeaderMsgID, msgID)
		hdr.Set(salvagetype.HeaderTraceParent, tp)
		meta := &jetstream.MsgMetadata{Stream: streams.Jobs, Sequence: jetstream.SequencePair{Stream: 42}, Timestamp: time.Unix(1_700_000_000, 0)}
		p, err := s.parse(subject, body, hdr, meta, nil)
		if err != nil {
			var rej *flow.RejectError
			if !errors.As(err, &rej) || !rejectReasons[rej.Reason] {
				t.Fatalf("refused with %v, not a known rejection", err)
			}
			return
		}
		if streams.ValidateJobID(p.jobID) != nil || len(p.traceID) != 32 {
			t.Fatalf("job id %q, trace id %q", p.jobID, p.traceID)
		}
		if n := len(p.inputs); n < 1 || n > s.cfg.MaxChunks {
			t.Fatalf("%d chunks", n)
		}
		for i := range p.inputs {
			m, err := p.message(i)
			if err != nil {
				t.Fatalf("chunk %d: %v", i+1, err)
			}
			if len(m.Data) > s.cfg.MaxPayload {
				t.Fatalf("chunk %d is %d bytes, over the limit", i+1, len(m.Data))
			}
			var c salvagetype.ChunkMsg
			if err := json.Unmarshal(m.Data, &c); err != nil || c.Job != p.jobID || c.Chunk != i+1 || c.Pipeline != "items" {
				t.Fatalf("chunk %d message %s: %v", i+1, m.Data, err)
			}
		}
	})
}
