package flow

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// CancelReplay is how far back a worker's follow of cancellations starts:
// well past the moment between a chunk's read of its job record (which
// shows any earlier cancel) and the follow being live.
const CancelReplay = time.Minute

// publishCancelled announces that job was cancelled (streams.
// EventCancelled), once per job within the stream's duplicate window (its
// message id is the job's). Workers stop the job's running chunks when it
// arrives; the record, written first, stays the truth (every run reads it
// when it starts), and cancelRest, which publishes it, is repeated by the
// repair sweep after a crash.
func publishCancelled(ctx context.Context, js jetstream.JetStream, job kv.Job) error {
	ev := salvagetype.JobEvent{Job: job.ID, Kind: streams.EventCancelled, Pipeline: job.Pipeline, Status: salvagetype.JobCancelled,
		Chunks: job.Chunks, Reason: job.StopReason(), TraceID: job.TraceID, At: time.Now().UTC()}
	h := nats.Header{}
	h.Set(salvagetype.HeaderMsgID, job.ID+"."+streams.EventCancelled)
	return PublishJSON(ctx, js, job.Ref().Event(ev.Kind), ev, h)
}

// ErrFollowReconnected ends a follow whose connection reconnected: after a
// server restart an ordered consumer is only made again once it missed
// enough heartbeats, so the follow starts over at once instead.
var ErrFollowReconnected = errors.New("consumers: connection reconnected")
