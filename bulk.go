package salvage

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// ErrBadFilter is returned for a filter that cannot run — an envelope
// filter, a job search (JobQuery), an audit query — naming a category, a
// status or an action that does not exist (it would match nothing,
// silently), or bounds that contradict each other.
var ErrBadFilter = errors.New("salvage: bad filter")

// ErrBadBulk is returned for a bulk action that cannot run: an unknown
// action or a limit out of range.
var ErrBadBulk = salvagetype.ErrBadBulk

// Categories are every envelope category.
var Categories = []Category{CategoryTransientNetwork, CategoryExternalSystemDown, CategoryToolTimeout,
	CategoryPartialExecution, CategoryCompensationNeeded, CategoryBudgetExceeded, CategoryUnrecoverable}

// EnvelopeStatuses are every envelope status.
var EnvelopeStatuses = []EnvelopeStatus{EnvelopeOpen, EnvelopeRecovering, EnvelopeResolved, EnvelopeSuperseded,
	EnvelopeEscalated, EnvelopeDeadEnd, EnvelopeAbandoned}

// Validate refuses a category or status no envelope can have, and a job
// id that is not a token.
func (f EnvelopeFilter) Validate() error {
	if f.Category != "" && !slices.Contains(Categories, f.Category) {
		return fmt.Errorf("%w: category %q (want one of %v)", ErrBadFilter, f.Category, Categories)
	}
	if f.Status != "" && !slices.Contains(EnvelopeStatuses, f.Status) {
		return fmt.Errorf("%w: status %q (want one of %v)", ErrBadFilter, f.Status, EnvelopeStatuses)
	}
	if f.Job != "" {
		return ValidateJobID(f.Job)
	}
	return nil
}

func (f EnvelopeFilter) machinery() operator.EnvelopeFilter {
	return operator.EnvelopeFilter{Category: f.Category, Status: f.Status, Job: f.Job, MinAge: f.MinAge}
}

// BulkAction is what a bulk request does to each envelope it matches.
type BulkAction = salvagetype.BulkAction

// Bulk actions.
const (
	BulkReplay  = salvagetype.BulkReplay
	BulkResolve = salvagetype.BulkResolve
	BulkAck     = salvagetype.BulkAck
)

// BulkMax bounds the envelopes one bulk request acts on.
const BulkMax = salvagetype.BulkMax

// BulkRequest acts on every envelope Filter matches, oldest first.
type BulkRequest struct {
	Action BulkAction
	Filter EnvelopeFilter
	// By names who acts; default "api". Note goes with a resolve.
	By, Note string
	// DryRun only counts and lists what would be acted on.
	DryRun bool
	// Limit bounds the envelopes acted on: default and at most BulkMax;
	// BulkResult.Remaining says how many a next call would find.
	Limit int
}

// BulkResult says what a bulk request matched and did.
type BulkResult = salvagetype.BulkResult

// BulkFailure is one envelope a bulk request could not act on.
type BulkFailure = salvagetype.BulkFailure

// EnvelopeBulk replays, resolves or acknowledges every envelope a filter matches,
// each through the same compare-and-swap as the single action: running
// it twice replays nothing twice. Start with DryRun to see the count.
func (c *Client) EnvelopeBulk(ctx context.Context, req BulkRequest) (*BulkResult, error) {
	if err := req.Filter.Validate(); err != nil {
		return nil, err
	}
	op, err := c.operator(ctx)
	if err != nil {
		return nil, err
	}
	if req.Action != BulkReplay && req.Action != BulkResolve && req.Action != BulkAck {
		return nil, fmt.Errorf("%w: action %q: want %s, %s or %s", ErrBadBulk, req.Action, BulkReplay, BulkResolve, BulkAck)
	}
	_, req.By = actorOf(ctx, req.By)
	mreq := operator.BulkRequest{Action: req.Action, Filter: req.Filter.machinery(), By: req.By,
		Note: req.Note, DryRun: req.DryRun, Limit: req.Limit}
	if req.DryRun {
		res, err := op.Bulk(ctx, mreq)
		if err != nil {
			return nil, err
		}
		return &res, nil
	}
	// The bulk is one entry (its filter and counts), and each envelope's
	// action one more, filed under its job and naming the bulk's entry.
	bulk := AuditEntry{Action: AuditBulk, Detail: bulkDetail(req)}
	var res BulkResult
	err = c.audited(ctx, &bulk, streams.AuditScopeBulk, string(req.Action), req.By, req.Note, func(string) (err error) {
		mreq.Each = func(r kv.EnvelopeRecord, act func() error) error {
			e := AuditEntry{Action: AuditAction(req.Action), Job: r.Job, Chunk: r.Chunk, Envelope: r.ID, Detail: "bulk " + bulk.ID}
			return c.audited(ctx, &e, streams.AuditScopeJob, r.Job, req.By, req.Note, func(string) error { return act() })
		}
		res, err = op.Bulk(ctx, mreq)
		bulk.Detail += fmt.Sprintf("; matched %d, acted %d, unchanged %d, refused %d, failed %d", res.Matched, res.Acted, res.Unchanged, res.Refused, len(res.Failed))
		return err
	})
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// bulkDetail is a bulk's action and filter, for its audit entry.
func bulkDetail(req BulkRequest) string {
	f := req.Filter
	return fmt.Sprintf("%s where category=%q status=%q job=%q min_age=%s, limit %d", req.Action, f.Category, f.Status, f.Job, f.MinAge, req.Limit)
}
