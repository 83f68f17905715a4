package flow

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// ReadEnvelope reads the envelope of rec as published: its message in
// SALVAGE_DLQ, else, when that message is gone (purged, aged out, lost)
// or is not this envelope's (the stream was made again), the body kept
// beside the record. The orchestrator publishes such an envelope again
// (restoreLost); until then everything reads it from its body.
func ReadEnvelope(ctx context.Context, js jetstream.JetStream, st *kv.Stores, rec kv.EnvelopeRecord) (salvagetype.Envelope, error) {
	var env salvagetype.Envelope
	m, err := GetMsg(ctx, js, streams.DLQ, rec.DLQSeq)
	if err != nil {
		return env, fmt.Errorf("envelope %s: %w", rec.ID, err)
	}
	if m != nil {
		if env, err = recovery.DecodeEnvelope(m.Data); err == nil && env.ID == rec.ID {
			return env, nil
		}
	}
	body, err := st.Envelopes.Body(ctx, rec.ID)
	if errors.Is(err, kv.ErrNotFound) {
		return env, fmt.Errorf("%w: envelope %s: its message SALVAGE_DLQ %d is gone and it was recorded before bodies were kept", errEnvelopeLost, rec.ID, rec.DLQSeq)
	}
	if err != nil {
		return env, err
	}
	if env, err = recovery.DecodeEnvelope(body); err != nil {
		return env, fmt.Errorf("envelope %s: %w", rec.ID, err)
	}
	return env, nil
}

// errEnvelopeLost is returned when an envelope's DLQ message is gone and
// its record, written before records kept the envelope's body, has nothing
// to read it from.
var errEnvelopeLost = errors.New("envelope lost")
