package recovery

import (
	"encoding/json"
	"fmt"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// DecodeEnvelope reads a failure envelope as published on SALVAGE_DLQ and
// checks what the recovery of it builds keys and subjects from: the
// envelope and job ids and the pipeline are tokens, the chunk counts from
// 1. It returns an error wrapping ErrBadEnvelope otherwise.
func DecodeEnvelope(data []byte) (salvagetype.Envelope, error) {
	var env salvagetype.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return env, fmt.Errorf("%w: %v", ErrBadEnvelope, err)
	}
	for _, c := range []struct{ what, tok string }{{"envelope_id", env.ID}, {"pipeline", env.Pipeline}} {
		if err := salvagetype.ValidateToken(c.what, c.tok); err != nil {
			return env, fmt.Errorf("%w: %w", ErrBadEnvelope, err)
		}
	}
	if err := streams.ValidateJobID(env.Job); err != nil {
		return env, fmt.Errorf("%w: %w", ErrBadEnvelope, err)
	}
	if env.Chunk < 1 {
		return env, fmt.Errorf("%w: chunk %d: chunks count from 1", ErrBadEnvelope, env.Chunk)
	}
	return env, nil
}
