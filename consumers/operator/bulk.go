package operator

import (
	"context"
	"errors"
	"fmt"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// bulkIDsMax bounds the ids a bulk result lists.
const bulkIDsMax = 100

// BulkRequest acts on every envelope a filter matches, oldest first.
type BulkRequest struct {
	Action salvagetype.BulkAction
	Filter EnvelopeFilter
	By     string
	// Note goes with a resolve.
	Note string
	// DryRun only counts and lists what would be acted on.
	DryRun bool
	// Limit bounds the envelopes acted on (default and most BulkMax).
	Limit int
	// Each, when set, takes each envelope's action (not on a dry run):
	// it calls act, and may put it on record around it.
	Each func(r kv.EnvelopeRecord, act func() error) error
}

// Bulk applies one action — replay, resolve or ack — to every envelope
// req.Filter matches, oldest first, at most req.Limit of them, each
// through the same CAS as the single action: an envelope is replayed
// once however often the bulk action runs (a replay in flight is left
// alone), and a resolved or superseded one is refused, not touched. A
// dry run only counts.
func (o *Operator) Bulk(ctx context.Context, req BulkRequest) (salvagetype.BulkResult, error) {
	res := salvagetype.BulkResult{Action: req.Action, DryRun: req.DryRun, IDs: []string{}}
	switch req.Action {
	case salvagetype.BulkReplay, salvagetype.BulkResolve, salvagetype.BulkAck:
	default:
		return res, fmt.Errorf("%w: action %q: want %s, %s or %s", salvagetype.ErrBadBulk, req.Action, salvagetype.BulkReplay, salvagetype.BulkResolve, salvagetype.BulkAck)
	}
	if req.Filter.Empty() {
		return res, fmt.Errorf("%w: give a filter (category, status, job or a minimum age above zero): a bulk action on every envelope is too easy to run by mistake", salvagetype.ErrBadBulk)
	}
	if req.Limit < 0 || req.Limit > salvagetype.BulkMax {
		return res, fmt.Errorf("%w: limit %d: want 1 to %d", salvagetype.ErrBadBulk, req.Limit, salvagetype.BulkMax)
	}
	if req.Limit == 0 {
		req.Limit = salvagetype.BulkMax
	}
	if req.Filter.Job != "" {
		if err := streams.ValidateJobID(req.Filter.Job); err != nil {
			return res, err
		}
	}
	pg, err := o.Page(ctx, req.Filter, 0, req.Limit, false)
	if err != nil {
		return res, err
	}
	res.Matched = max(pg.Total, len(pg.Records))
	res.Remaining = max(pg.Total-req.Limit, 0)
	for _, r := range pg.Records {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if !actionable(req.Action, r) {
			if req.Action != salvagetype.BulkAck && (r.Status == salvagetype.EnvelopeResolved || r.Status == salvagetype.EnvelopeSuperseded) {
				res.Refused++
			} else {
				res.Unchanged++
			}
			continue
		}
		if req.DryRun && req.Action == salvagetype.BulkReplay {
			// What the replay itself would refuse is not counted acted.
			switch err := o.CheckReplay(ctx, r.ID); {
			case errors.Is(err, salvagetype.ErrReplayRefused), errors.Is(err, salvagetype.ErrAlreadyResolved), errors.Is(err, salvagetype.ErrSuperseded):
				res.Refused++
				continue
			}
		}
		if !req.DryRun {
			act := func() (err error) {
				switch req.Action {
				case salvagetype.BulkReplay:
					_, err = o.Replay(ctx, r.ID, req.By)
				case salvagetype.BulkResolve:
					_, err = o.Resolve(ctx, r.ID, req.By, req.Note)
				case salvagetype.BulkAck:
					_, err = o.Ack(ctx, r.ID, req.By)
				}
				return err
			}
			var err error
			if req.Each != nil {
				err = req.Each(r, act)
			} else {
				err = act()
			}
			switch {
			case errors.Is(err, salvagetype.ErrAlreadyResolved), errors.Is(err, salvagetype.ErrSuperseded), errors.Is(err, salvagetype.ErrReplayRefused):
				// Resolved or replaced already, or a replay Salvage will
				// not run (a cancelled job, a recovery running,
				// compensated effects beside standing ones): refused.
				res.Refused++
				continue
			case err != nil:
				if len(res.Failed) < bulkIDsMax {
					res.Failed = append(res.Failed, salvagetype.BulkFailure{ID: r.ID, Error: streams.Clip(err.Error(), 1024)})
				}
				continue
			}
		}
		res.Acted++
		if len(res.IDs) < bulkIDsMax {
			res.IDs = append(res.IDs, r.ID)
		}
	}
	return res, nil
}

// actionable reports whether action would change r: a replay needs an
// envelope neither resolved, superseded nor already requeued; a resolve
// one neither resolved nor superseded; an ack one nobody acknowledged.
func actionable(action salvagetype.BulkAction, r kv.EnvelopeRecord) bool {
	final := r.Status == salvagetype.EnvelopeResolved || r.Status == salvagetype.EnvelopeSuperseded
	switch action {
	case salvagetype.BulkReplay:
		return !final && !r.Requeued
	case salvagetype.BulkResolve:
		return !final
	default:
		return r.AckedBy == ""
	}
}
