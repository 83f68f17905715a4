package salvage

import (
	"context"
	"fmt"
	"strings"

	"github.com/salvagehq/salvage/salvagetype"
)

// ActionCheck says whether an action would be taken now, as the server
// decides it (the rule the action itself applies, asked before a person
// clicks), and what a person should know first.
type ActionCheck struct {
	Allowed bool `json:"allowed"`
	// Reason is why it would be refused.
	Reason string `json:"reason,omitempty"`
	// Warning is what to weigh before taking it: a failure classed
	// permanent, a replay that runs the chunk fresh and so calls its
	// side effects again (Effects names them), an acknowledgement
	// already given.
	Warning string `json:"warning,omitempty"`
	// Effects are the side effects a replay would call again: tool, and
	// the resource the earlier call made.
	Effects []string `json:"effects,omitempty"`
}

// EnvelopeActions are the checks of the actions on one envelope.
type EnvelopeActions struct {
	Replay  ActionCheck `json:"replay"`
	Resolve ActionCheck `json:"resolve"`
	Ack     ActionCheck `json:"ack"`
}

// effectsMax bounds the effects a check names.
const effectsMax = 20

// envelopeActions checks the actions on d's envelope: the replay by the
// plan Replay would make (reading the job, the checkpoint and one chunk's
// journal), resolve and ack by the record.
func envelopeActions(ctx context.Context, d *EnvelopeDetail, plan func(context.Context, string) (bool, error)) EnvelopeActions {
	r, e := d.Record, d.Envelope
	var a EnvelopeActions
	switch r.Status {
	case EnvelopeResolved:
		a.Resolve.Reason = fmt.Sprintf("%v: by %s", ErrAlreadyResolved, r.ResolvedBy)
	case EnvelopeSuperseded:
		a.Resolve.Reason = fmt.Sprintf("%v by %s: act on that one", ErrSuperseded, r.SupersededBy)
	default:
		a.Resolve.Allowed = true
	}
	a.Ack.Allowed = true
	if r.AckedBy != "" {
		a.Ack.Warning = "already acknowledged by " + r.AckedBy + ": the first acknowledgement is kept"
	}
	fresh, err := plan(ctx, r.ID)
	if err != nil {
		a.Replay.Reason = err.Error()
		return a
	}
	a.Replay.Allowed = true
	var warn []string
	if class, ok := salvagetype.ParseClass(e.ErrorClass); ok && class.Permanent() {
		warn = append(warn, fmt.Sprintf("the failure was classed %s (%s): a replay runs the same input into it again", e.ErrorClass, clip(e.Error, 200)))
	}
	if fresh {
		for _, row := range d.Journal {
			if row.Fingerprint == nil || len(a.Replay.Effects) == effectsMax {
				continue
			}
			fx := row.Tool
			if row.Fingerprint.ResourceID != "" {
				fx += " (" + row.Fingerprint.ResourceID + ", " + strings.ToLower(string(row.Status)) + ")"
			}
			a.Replay.Effects = append(a.Replay.Effects, fx)
		}
		warn = append(warn, fmt.Sprintf("its effects were compensated, so it runs fresh in a new epoch and calls its side effects again (%d named)", len(a.Replay.Effects)))
	}
	a.Replay.Warning = strings.Join(warn, "; ")
	return a
}

// JobActions are the checks of the actions on one job.
type JobActions struct {
	Cancel ActionCheck `json:"cancel"`
	// ReplayFailed replays its envelopes (a bulk replay filtered on the
	// job): allowed when at least one of the first replayCheckMax would
	// be replayed.
	ReplayFailed ActionCheck `json:"replay_failed"`
}

// replayCheckMax bounds the envelopes a job's replay check reads.
const replayCheckMax = 100

// JobActionsOf says which actions on job id the server would take now,
// and why not: cancel by the record (a finished job is not cancelled), a
// replay of its failures by a bulk dry run over at most replayCheckMax
// of its envelopes (the rule the replay applies to each).
func (c *Client) JobActionsOf(ctx context.Context, id string) (*JobActions, error) {
	j, _, err := c.job(ctx, id)
	if err != nil {
		return nil, err
	}
	var a JobActions
	switch {
	case j.CancelledAt != nil:
		a.Cancel.Reason = "already cancelled (" + j.StopReason() + ")"
	case j.Finished():
		a.Cancel.Reason = fmt.Sprintf("%v: %s is %s; nothing of it runs (resolve its envelopes to close them)", ErrJobFinished, id, j.Status)
	default:
		a.Cancel.Allowed = true
	}
	res, err := c.EnvelopeBulk(ctx, BulkRequest{Action: BulkReplay, Filter: EnvelopeFilter{Job: id}, DryRun: true, Limit: replayCheckMax})
	if err != nil {
		return nil, err
	}
	switch {
	case res.Acted > 0:
		a.ReplayFailed.Allowed = true
		if res.Refused > 0 {
			a.ReplayFailed.Warning = fmt.Sprintf("%d of its envelopes would not be replayed (resolved, superseded, or a replay Salvage refuses)", res.Refused)
		}
	case res.Matched == 0:
		a.ReplayFailed.Reason = "the job has no envelope"
	default:
		a.ReplayFailed.Reason = fmt.Sprintf("nothing to replay: %d envelope(s), %d already so, %d refused (resolved, superseded, or a replay Salvage will not run)", res.Matched, res.Unchanged, res.Refused)
	}
	return &a, nil
}
