package deadletter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/consumers/internal/flow"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// intakeBatch bounds the job messages one sweep rejects per subject.
const intakeBatch = 100

// SweepIntake rejects the job messages no splitter will ever take: those
// on a subject that is not salvage.jobs.<pipeline> (bad-subject, bad-token)
// at once, and those for a pipeline no process has ever registered
// (unknown-pipeline) once they waited UnknownPipelineWait. A job for a
// pipeline that was registered but has no worker running waits, however
// long, for one to start. Each rejection is published before its message
// is deleted, so a crash between the two rejects it again (the event is
// deduplicated). It returns how many it rejected.
func (d *DeadLetterer) SweepIntake(ctx context.Context) (int, error) {
	s, err := d.js.Stream(ctx, streams.Jobs)
	if err != nil {
		return 0, fmt.Errorf("consumers: intake: %w", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(streams.JobsAll))
	if err != nil {
		return 0, fmt.Errorf("consumers: intake: %w", err)
	}
	n := 0
	for subject, count := range info.State.Subjects {
		pipeline, perr := streams.ParseJobSubject(subject)
		if perr == nil {
			if _, err := d.stores.Pipelines.Get(ctx, pipeline); err == nil {
				continue // its splitters take it, now or once one runs
			} else if !errors.Is(err, kv.ErrNotFound) {
				return n, err
			}
		}
		for range min(count, intakeBatch) {
			raw, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return n, fmt.Errorf("consumers: intake %s: %w", subject, err)
			}
			rej := intakeRejection(subject, perr, pipeline)
			if perr == nil && time.Since(raw.Time) < d.cfg.UnknownPipelineWait {
				break // the oldest is not due yet: none after it is
			}
			if err := flow.PublishRejection(ctx, d.js, raw.Subject, raw.Data, raw.Sequence, flow.IntakeJobID(raw), rej); err != nil {
				return n, err
			}
			if err := flow.DeleteMsg(ctx, d.js, streams.Jobs, raw.Sequence); err != nil {
				return n, err
			}
			d.log.Warn().Str("reason", string(rej.Reason)).Str("subject", subject).Uint64("stream_seq", raw.Sequence).Err(rej.Err).Msg("job rejected")
			n++
		}
	}
	return n, nil
}

// intakeRejection says why a job message on subject will never be split:
// perr, the subject's own fault, else its pipeline was never run.
func intakeRejection(subject string, perr error, pipeline string) *flow.RejectError {
	switch {
	case errors.Is(perr, salvagetype.ErrInvalidToken):
		return &flow.RejectError{Reason: salvagetype.RejectBadToken, Err: perr}
	case perr != nil:
		return &flow.RejectError{Reason: salvagetype.RejectBadSubject, Err: perr}
	}
	return &flow.RejectError{Reason: salvagetype.RejectUnknownPipeline, Err: fmt.Errorf("no process has ever run pipeline %q (%s waited for one)", pipeline, subject)}
}
