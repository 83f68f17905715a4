package salvage

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// PipelineStatus is what a deployment knows of one pipeline: whether it
// is paused, by whom and why, and how many of its chunks wait for it to
// resume.
type PipelineStatus struct {
	Pipeline string `json:"pipeline"`
	Paused   bool   `json:"paused"`
	// PausedAt, PausedBy and Reason describe the latest pause; ResumedAt
	// and ResumedBy the latest resume.
	PausedAt  time.Time `json:"paused_at,omitzero"`
	PausedBy  string    `json:"paused_by,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	ResumedAt time.Time `json:"resumed_at,omitzero"`
	ResumedBy string    `json:"resumed_by,omitempty"`
	// Parked counts the chunks waiting on SALVAGE_HOLD for the pipeline
	// to resume (subject salvage.hold.paused-<pipeline>.<job>.<chunk>).
	Parked int `json:"parked"`
	// Workers counts the live processes that run its chunks (Workers):
	// with none, its jobs wait. Waiting counts its job messages not split
	// yet (on salvage.jobs.<pipeline>).
	Workers int `json:"workers"`
	Waiting int `json:"waiting"`
	// Recovery counts the live processes that recover its envelopes
	// (RoleRecovery with the pipeline): with none, its envelopes stay
	// open and the alerter raises a no-recovery alert.
	Recovery int `json:"recovery"`
	// Fingerprint names the definition the pipeline's workers and
	// recovery run (Pipeline.Fingerprint), Definition is it (its first
	// 200 lines), DefinedBy and DefinedAt say which process registered
	// it and when, and PreviousFingerprint is the one the latest upgrade
	// replaced.
	Fingerprint         string    `json:"fingerprint,omitempty"`
	Definition          []string  `json:"definition,omitempty"`
	DefinedBy           string    `json:"defined_by,omitempty"`
	DefinedAt           time.Time `json:"defined_at,omitzero"`
	PreviousFingerprint string    `json:"previous_fingerprint,omitempty"`
}

// PipelineList lists every pipeline a worker of the deployment runs (and any
// pipeline paused by name), by name.
func (c *Client) PipelineList(ctx context.Context) ([]PipelineStatus, error) {
	st, err := c.storesFor(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := st.Pipelines.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]PipelineStatus, 0, len(recs))
	for _, r := range recs {
		p, err := c.pipelineStatus(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pipeline < out[j].Pipeline })
	return out, nil
}

// PipelinePause pauses pipeline: no chunk of it starts a stage until it
// resumes. A chunk inside a stage finishes that stage; then, and every
// chunk of the pipeline after it, parks on
// salvage.hold.paused-<pipeline>.<job>.<chunk> (status paused), without
// spending a delivery; jobs are still accepted. by and reason are
// recorded. Pausing a paused pipeline changes nothing. It returns an
// error wrapping ErrUnknownPipeline for a pipeline no worker runs and
// this client does not know, ErrInvalidToken for a name that is not a
// subject token.
func (c *Client) PipelinePause(ctx context.Context, pipeline, by, reason string) (PipelineStatus, error) {
	return c.setPaused(ctx, pipeline, true, by, reason)
}

// PipelineResume resumes a paused pipeline: its parked chunks return to
// SALVAGE_CHUNKS, each with a fresh delivery budget, and go on from the
// stage they stopped before. Resuming a running pipeline changes
// nothing. Errors as PipelinePause.
func (c *Client) PipelineResume(ctx context.Context, pipeline, by string) (PipelineStatus, error) {
	return c.setPaused(ctx, pipeline, false, by, "")
}

func (c *Client) setPaused(ctx context.Context, pipeline string, paused bool, by, reason string) (PipelineStatus, error) {
	if err := salvagetype.ValidateToken("pipeline", pipeline); err != nil {
		return PipelineStatus{}, err
	}
	st, err := c.storesFor(ctx)
	if err != nil {
		return PipelineStatus{}, err
	}
	if _, err := st.Pipelines.Get(ctx, pipeline); errors.Is(err, kv.ErrNotFound) {
		if _, gerr := c.registry.Get(pipeline); gerr != nil {
			return PipelineStatus{}, fmt.Errorf("%w: no worker runs %q", ErrUnknownPipeline, pipeline)
		}
	} else if err != nil {
		return PipelineStatus{}, err
	}
	e := AuditEntry{Action: AuditResume, Pipeline: pipeline}
	if paused {
		e.Action = AuditPause
	}
	var rec kv.PipelineState
	var changed bool
	err = c.audited(ctx, &e, streams.AuditScopePipeline, pipeline, by, reason, func(who string) (err error) {
		by = who
		rec, changed, err = st.Pipelines.SetPaused(ctx, pipeline, paused, streams.Clip(by, 256), streams.Clip(reason, salvagetype.ErrorTextMax))
		if err == nil && !changed {
			e.Detail = "already " + string(PipelineRunning)
			if paused {
				e.Detail = "already " + string(PipelinePaused)
			}
		}
		return err
	})
	if err != nil {
		return PipelineStatus{}, err
	}
	if changed {
		word := "resumed"
		if paused {
			word = string(PipelinePaused)
		}
		c.log.Info().Str("pipeline", pipeline).Str("by", by).Str("reason", reason).Msg("pipeline " + word)
	}
	return c.pipelineStatus(ctx, rec)
}

func (c *Client) pipelineStatus(ctx context.Context, r kv.PipelineState) (PipelineStatus, error) {
	p := PipelineStatus{Pipeline: r.Pipeline, Paused: r.Paused, PausedAt: r.PausedAt, PausedBy: r.PausedBy,
		Reason: r.Reason, ResumedAt: r.ResumedAt, ResumedBy: r.ResumedBy, Fingerprint: r.Fingerprint, Definition: r.Definition,
		DefinedBy: r.DefinedBy, DefinedAt: r.DefinedAt, PreviousFingerprint: r.PreviousFingerprint}
	var err error
	if p.Parked, err = c.held(ctx, streams.Pipeline(r.Pipeline).PausedSystem()); err != nil {
		return p, err
	}
	st, err := c.storesFor(ctx)
	if err != nil {
		return p, err
	}
	workers, err := st.Workers.List(ctx)
	if err != nil {
		return p, err
	}
	for _, w := range workers {
		if w.Runs(r.Pipeline) {
			p.Workers++
		}
		if w.Recovering(r.Pipeline) {
			p.Recovery++
		}
	}
	p.Waiting, err = c.waitingJobs(ctx, r.Pipeline)
	return p, err
}

// waitingJobs counts the job messages of pipeline not split yet.
func (c *Client) waitingJobs(ctx context.Context, pipeline string) (int, error) {
	s, err := c.js.Stream(ctx, streams.Jobs)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(streams.Pipeline(pipeline).Subject()))
	if err != nil {
		return 0, err
	}
	return int(info.State.Subjects[streams.Pipeline(pipeline).Subject()]), nil
}
