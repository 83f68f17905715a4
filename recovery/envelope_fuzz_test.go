package recovery_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// FuzzDecodeEnvelope: a DLQ message either decodes into an envelope whose
// ids, pipeline and chunk are usable as keys and subjects, and survives a
// round trip, or is refused with ErrBadEnvelope.
func FuzzDecodeEnvelope(f *testing.F) {
	good, _ := json.Marshal(salvagetype.Envelope{ID: "01JENV", Job: "01JJOB", Chunk: 3, Pipeline: "orders", Category: salvagetype.CategoryTransientNetwork})
	for _, s := range []string{string(good), `{}`, `null`, `{"envelope_id": "e", "job_id": "j", "chunk": 0, "pipeline": "p"}`,
		`{"envelope_id": "e.x", "job_id": "j", "chunk": 1, "pipeline": "p"}`, `{"envelope_id": "e", "job_id": "rejected", "chunk": 1, "pipeline": "p"}`,
		`{"envelope_id": "e", "job_id": "j", "chunk": 1, "pipeline": "p", "original": {"data": 5}}`, `{"chunk": 1e99}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := recovery.DecodeEnvelope(data)
		if err != nil {
			if !errors.Is(err, recovery.ErrBadEnvelope) {
				t.Fatalf("refused with %v, not ErrBadEnvelope", err)
			}
			return
		}
		if salvagetype.ValidateToken("envelope", env.ID) != nil || streams.ValidateJobID(env.Job) != nil ||
			salvagetype.ValidateToken("pipeline", env.Pipeline) != nil || env.Chunk < 1 {
			t.Fatalf("accepted %+v", env)
		}
		again, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := recovery.DecodeEnvelope(again); err != nil || back.ID != env.ID || back.Job != env.Job || back.Chunk != env.Chunk {
			t.Fatalf("round trip: %+v, %v", back, err)
		}
	})
}
