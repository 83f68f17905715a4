package salvage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Actor is who took an operator action (its fields are documented in
// salvagetype).
type Actor = salvagetype.Actor

// AuditEntry is one operator action on SALVAGE_AUDIT.
type AuditEntry = salvagetype.AuditEntry

// AuditAction names an operator action the audit records.
type AuditAction = salvagetype.AuditAction

// AuditOutcome is how an audited action ended.
type AuditOutcome = salvagetype.AuditOutcome

// The operator actions the audit records: every Client method that
// changes what an operator owns (EnvelopeReplay, EnvelopeResolve,
// EnvelopeAck, EnvelopeBulk, ChunkApprove, JobCancel, PipelinePause,
// PipelineResume, LimitSet, LimitRemove), whichever way it is reached.
const (
	AuditReplay      = salvagetype.AuditReplay
	AuditResolve     = salvagetype.AuditResolve
	AuditAck         = salvagetype.AuditAck
	AuditBulk        = salvagetype.AuditBulk
	AuditApprove     = salvagetype.AuditApprove
	AuditReject      = salvagetype.AuditReject
	AuditCancel      = salvagetype.AuditCancel
	AuditPause       = salvagetype.AuditPause
	AuditResume      = salvagetype.AuditResume
	AuditLimitSet    = salvagetype.AuditLimitSet
	AuditLimitRemove = salvagetype.AuditLimitRemove
)

// AuditActions returns every AuditAction, in a slice of the caller's own.
func AuditActions() []AuditAction { return slices.Clone(salvagetype.AuditActions) }

// Audit outcomes.
const (
	AuditPending = salvagetype.AuditPending
	AuditOK      = salvagetype.AuditOK
	AuditRefused = salvagetype.AuditRefused
	AuditFailed  = salvagetype.AuditFailed
)

// Via values of an Actor: the ways in.
const (
	ViaAPI       = "api"
	ViaService   = "service"
	ViaDashboard = "dashboard"
)

type actorKey struct{}

type reasonKey struct{}

// WithActor returns ctx carrying a: the operator actions called with it
// are recorded as a's, and a.Name is the "by" their records keep when the
// call names none. Without it an action is the caller's "by", via "api",
// unverified.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// WithReason returns ctx carrying why the operator actions called with it
// are taken, for the audit. A method's own note or reason (a resolve's
// note, a pause's reason) is recorded instead when it has one.
func WithReason(ctx context.Context, reason string) context.Context {
	return context.WithValue(ctx, reasonKey{}, reason)
}

// actorOf is who an action called with ctx and by is, and the by its
// records keep: ctx's actor when it has a name (a verified name is the
// by, whatever the caller said), else by (default "api") through ctx's
// way in, unverified.
func actorOf(ctx context.Context, by string) (Actor, string) {
	a, _ := ctx.Value(actorKey{}).(Actor)
	if a.Via == "" {
		a.Via = ViaAPI
	}
	switch {
	case a.Name == "":
		if by == "" {
			by = a.Via
		}
		a.Name, a.Verified = by, false
	case a.Verified || by == "":
		by = a.Name
	}
	return a, by
}

// auditTextMax bounds an entry's names, reason, detail and error.
const auditTextMax = 1024

// audited puts the action of e on record, takes it (act gets the "by" to
// record and may add to e), and records its outcome. An action that
// cannot be put on record first is not taken (ErrAuditUnavailable). The
// outcome's write failing leaves the entry pending: logged, and the
// action's own result is returned.
func (c *Client) audited(ctx context.Context, e *AuditEntry, scope, key, by, reason string, act func(by string) error) error {
	st, err := c.storesFor(ctx)
	if err != nil {
		return err
	}
	e.Actor, by = actorOf(ctx, by)
	e.Actor.Name = streams.Clip(e.Actor.Name, 256)
	if reason == "" {
		reason, _ = ctx.Value(reasonKey{}).(string)
	}
	e.ID, e.At, e.Reason, e.Outcome = ulid.Make().String(), time.Now().UTC(), streams.Clip(reason, auditTextMax), AuditPending
	subject := streams.AuditSubject(scope, key, string(e.Action), e.ID)
	if err := st.Audit.Write(ctx, subject, *e); err != nil {
		return err
	}
	err = act(by)
	e.Outcome, e.DoneAt, e.Detail = outcomeOf(err), time.Now().UTC(), streams.Clip(e.Detail, auditTextMax)
	if err != nil {
		e.Error = streams.Clip(err.Error(), auditTextMax)
	}
	// The action is done: its outcome is written even when the caller
	// has gone.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if werr := st.Audit.Write(wctx, subject, *e); werr != nil {
		c.log.Error().Err(werr).Str("audit_id", e.ID).Str("action", string(e.Action)).Msg("the action's outcome is not on record: its entry stays pending")
	}
	return err
}

// outcomeOf is the outcome of an action that returned err: refused when
// a rule refused it (errorCodes), failed otherwise.
func outcomeOf(err error) AuditOutcome {
	switch {
	case err == nil:
		return AuditOK
	case refusal(err):
		return AuditRefused
	}
	return AuditFailed
}

// auditEnvelope is audited for an action on envelope id, filed under its
// job. An id no record has is refused unrecorded: there is nothing to act on.
func (c *Client) auditEnvelope(ctx context.Context, action AuditAction, id, by, reason string, act func(by string) error) error {
	if err := salvagetype.ValidateToken("envelope_id", id); err != nil {
		return fmt.Errorf("%w: %w", ErrUnknownEnvelope, err)
	}
	st, err := c.storesFor(ctx)
	if err != nil {
		return err
	}
	r, _, err := st.Envelopes.Get(ctx, id)
	if errors.Is(err, kv.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrUnknownEnvelope, id)
	}
	if err != nil {
		return err
	}
	e := AuditEntry{Action: action, Job: r.Job, Chunk: r.Chunk, Envelope: id}
	return c.audited(ctx, &e, streams.AuditScopeJob, r.Job, by, reason, act)
}

// AuditQuery selects audit entries, oldest first: those of one job (and
// with Envelope, of one of its envelopes; Envelope alone finds its job),
// one pipeline or one limit key; or, with none of these, every entry.
type AuditQuery struct {
	Job      string `json:"job_id,omitempty"`
	Envelope string `json:"envelope_id,omitempty"`
	Pipeline string `json:"pipeline,omitempty"`
	LimitKey string `json:"limit_key,omitempty"`
	// Action keeps the entries of one action.
	Action AuditAction `json:"action,omitempty"`
	// Since keeps the entries asked for at or after it (their outcome
	// rewrote them later): the first page starts there.
	Since time.Time `json:"since,omitzero"`
	// After continues a listing: the Next of its previous page.
	After uint64 `json:"after,omitempty"`
	// Newest lists the latest entries instead, newest first: one page,
	// read from the end of the stream (or of the target's entries).
	Newest bool `json:"newest,omitempty"`
	// Limit bounds the page: default PageDefault, at most PageMax.
	Limit int `json:"limit,omitempty"`
}

// AuditPage is one page of audit entries.
type AuditPage struct {
	Items []AuditEntry `json:"items"`
	// Next continues the listing (AuditQuery.After); 0 when the stream
	// holds no more under the query.
	Next uint64 `json:"next,omitempty"`
}

// auditScanMax bounds the messages one page reads, whatever the query
// keeps of them: a page shorter than its limit with a Next is the bound.
const auditScanMax = 5000

// AuditList returns a page of the audit entries q selects, from
// SALVAGE_AUDIT: the entries of one job, pipeline or limit are read from
// their own subjects, so a page costs what they hold, not the stream.
func (c *Client) AuditList(ctx context.Context, q AuditQuery) (*AuditPage, error) {
	scope, key, err := c.auditScope(ctx, &q)
	if err != nil {
		return nil, err
	}
	if q.Action != "" && !validAction(q.Action) {
		return nil, fmt.Errorf("%w: action %q: want one of %v", ErrBadFilter, q.Action, salvagetype.AuditActions)
	}
	if q.Limit < 0 || q.Limit > PageMax {
		return nil, fmt.Errorf("%w: limit %d: want 1 to %d", ErrBadFilter, q.Limit, PageMax)
	}
	limit := q.Limit
	if limit == 0 {
		limit = PageDefault
	}
	st, err := c.storesFor(ctx)
	if err != nil {
		return nil, err
	}
	from := q.After
	if q.Newest {
		return c.auditNewest(ctx, st, q, scope, key, limit)
	}
	if from == 0 && !q.Since.IsZero() {
		if from, err = st.Audit.SeqAt(ctx, q.Since); err != nil {
			return nil, err
		}
	}
	from = max(from, 1)
	filter := streams.AuditFilter(scope, key)
	out := &AuditPage{Items: []AuditEntry{}}
	for scanned := 0; scanned < auditScanMax; {
		full := false
		more, err := st.Audit.Read(ctx, filter, from, min(limit+10, auditScanMax-scanned), func(seq uint64, e AuditEntry) bool {
			scanned++
			from = seq + 1
			if (q.Envelope == "" || e.Envelope == q.Envelope) && (q.Action == "" || e.Action == q.Action) && !e.At.Before(q.Since) {
				out.Items = append(out.Items, e)
			}
			full = len(out.Items) == limit
			return !full
		})
		if err != nil {
			return nil, err
		}
		if full {
			// Whether more follow is the next page's to find.
			out.Next = from
			return out, nil
		}
		if !more {
			return out, nil
		}
	}
	out.Next = from
	return out, nil
}

// auditNewest is the latest limit entries q selects, newest first: of a
// target, from its own entries (at most auditScanMax read); of every
// entry, from the last few times limit messages of the stream (an
// action's asking is replaced by its outcome, leaving gaps).
func (c *Client) auditNewest(ctx context.Context, st *kv.Stores, q AuditQuery, scope, key string, limit int) (*AuditPage, error) {
	from := uint64(1)
	if scope == "" {
		last, err := st.Audit.Last(ctx)
		if err != nil {
			return nil, err
		}
		if back := uint64(3 * limit); last > back {
			from = last - back + 1
		}
	}
	// The last limit that match, of at most auditScanMax read, batch by
	// batch (a batch ends at a megabyte).
	var all []AuditEntry
	for scanned := 0; scanned < auditScanMax; {
		more, err := st.Audit.Read(ctx, streams.AuditFilter(scope, key), from, auditScanMax-scanned, func(seq uint64, e AuditEntry) bool {
			scanned++
			from = seq + 1
			if (q.Envelope == "" || e.Envelope == q.Envelope) && (q.Action == "" || e.Action == q.Action) && !e.At.Before(q.Since) {
				if all = append(all, e); len(all) > 2*limit {
					all = append(all[:0], all[len(all)-limit:]...)
				}
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
	}
	all = all[max(len(all)-limit, 0):]
	slices.Reverse(all)
	if all == nil {
		all = []AuditEntry{}
	}
	return &AuditPage{Items: all}, nil
}

// auditScope is the scope and key q reads, checking its names.
func (c *Client) auditScope(ctx context.Context, q *AuditQuery) (scope, key string, err error) {
	set := 0
	for _, s := range []string{q.Job, q.Pipeline, q.LimitKey} {
		if s != "" {
			set++
		}
	}
	if set > 1 {
		return "", "", fmt.Errorf("%w: one of job, pipeline or limit key at a time", ErrBadFilter)
	}
	if q.Envelope != "" && q.Job == "" && set == 0 {
		if err := salvagetype.ValidateToken("envelope_id", q.Envelope); err != nil {
			return "", "", err
		}
		st, err := c.storesFor(ctx)
		if err != nil {
			return "", "", err
		}
		r, _, err := st.Envelopes.Get(ctx, q.Envelope)
		if errors.Is(err, kv.ErrNotFound) {
			return "", "", fmt.Errorf("%w: %s", ErrUnknownEnvelope, q.Envelope)
		}
		if err != nil {
			return "", "", err
		}
		q.Job = r.Job
	}
	switch {
	case q.Job != "":
		return streams.AuditScopeJob, q.Job, streams.ValidateJobID(q.Job)
	case q.Pipeline != "":
		return streams.AuditScopePipeline, q.Pipeline, salvagetype.ValidateToken("pipeline", q.Pipeline)
	case q.LimitKey != "":
		kind, name, _ := strings.Cut(q.LimitKey, ".")
		if salvagetype.ValidateToken("limit kind", kind) != nil || salvagetype.ValidateToken("limit name", name) != nil {
			return "", "", fmt.Errorf("%w: limit key %q: want <kind>.<name>", ErrBadFilter, q.LimitKey)
		}
		return streams.AuditScopeLimit, q.LimitKey, nil
	}
	return "", "", nil
}

// apiAudit takes an AuditQuery (every field optional) and answers an
// AuditPage.
func (c *Client) apiAudit(ctx context.Context, req micro.Request) (any, error) {
	var q AuditQuery
	if err := decode(req, &q, true); err != nil {
		return nil, err
	}
	return c.AuditList(ctx, q)
}

func validAction(a AuditAction) bool { return slices.Contains(salvagetype.AuditActions, a) }
