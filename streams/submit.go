package streams

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/salvagehq/salvage/salvagetype"
)

// PrepareJob gives a job message (its top-level fields) an identity: the
// job_id it names, checked as a subject token, else a new ULID written into
// it. It returns the id and the encoded message, or an error wrapping
// ErrInvalidJob (no input, job_id not a string) or ErrBadToken.
func PrepareJob(msg map[string]json.RawMessage) (string, []byte, error) {
	if _, ok := msg["input"]; !ok {
		return "", nil, fmt.Errorf(`%w: job message has no "input"`, salvagetype.ErrInvalidJob)
	}
	var id string
	if raw, ok := msg["job_id"]; ok {
		if err := json.Unmarshal(raw, &id); err != nil {
			return "", nil, fmt.Errorf("%w: job_id: %v", salvagetype.ErrInvalidJob, err)
		}
		if err := ValidateJobID(id); err != nil {
			return "", nil, err
		}
	} else {
		id = ulid.Make().String()
		msg["job_id"], _ = json.Marshal(id)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", salvagetype.ErrInvalidJob, err)
	}
	return id, body, nil
}

// JobMessage is the message submitting body as job id to pipeline, whose
// input hashes to inputHash (InputHash): its Nats-Msg-Id is
// "<id>.<first 16 hex of the hash>", so the same job sent twice within the
// stream's duplicate window is stored once, while another input under the
// same id reaches the splitter, which refuses it. It carries a
// traceparent, minted when tp is empty.
func JobMessage(pipeline, id, inputHash string, body []byte, tp string) *nats.Msg {
	m := nats.NewMsg(Pipeline(pipeline).Subject())
	m.Data = body
	m.Header.Set(salvagetype.HeaderMsgID, id+"."+inputHash[:min(16, len(inputHash))])
	if _, ok := ParseTraceParent(tp); !ok {
		tp = NewTraceParent()
	}
	m.Header.Set(salvagetype.HeaderTraceParent, tp)
	return m
}

// NewTraceParent mints a W3C traceparent with random trace and span ids.
func NewTraceParent() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return TraceParent(hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:]))
}
