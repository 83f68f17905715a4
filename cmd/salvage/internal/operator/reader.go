package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
)

// reader answers the read commands (status, jobs, trace, breakers) from
// the salvage.api service when one answers — so an operator's user needs
// no bucket reads — and from the buckets directly when none does (a
// deployment that runs no api role).
type reader struct {
	nc *nats.Conn
	c  *salvage.Client
	// direct is set once no service answered.
	direct bool
}

// withReader connects and makes a reader for a command.
func (e *Env) withReader(name string, fn func(ctx context.Context, r *reader) error) func(*cobra.Command, []string) error {
	return e.withConn(name, func(ctx context.Context, nc *nats.Conn, c *salvage.Client) error {
		return fn(ctx, &reader{nc: nc, c: c})
	})
}

// ask calls endpoint; false when no service answered (the reader reads
// directly from then on).
func (r *reader) ask(ctx context.Context, endpoint string, body, out any) (bool, error) {
	if r.direct {
		return false, nil
	}
	err := RequestOn(ctx, r.nc, endpoint, body, out)
	if errors.Is(err, errNoService) {
		r.direct = true
		return false, nil
	}
	return true, err
}

// unknownJob makes the service's 404 for a job ErrUnknownJob, saying
// "unknown job" once: the service's text may begin with it already.
func unknownJob(err error) error {
	var se *serviceError
	if errors.As(err, &se) && se.code == salvage.CodeUnknown {
		return fmt.Errorf("%w: %s", salvage.ErrUnknownJob, strings.TrimPrefix(se.text, salvage.ErrUnknownJob.Error()+": "))
	}
	return err
}

// ChunkList is one page of job id's chunks.
func (r *reader) ChunkList(ctx context.Context, id string, page *salvage.Page) (*salvage.ChunkPage, error) {
	return askJobPage(ctx, r, "jobs.status", id, page, r.c.ChunkList)
}

// ChunkListFailing is one page of job id's chunks that failed or wait. A service
// too old to know jobs.failing does not answer it; the chunks are read
// directly then.
func (r *reader) ChunkListFailing(ctx context.Context, id string, page *salvage.Page) (*salvage.FailingPage, error) {
	return askJobPage(ctx, r, "jobs.failing", id, page, r.c.ChunkListFailing)
}

// JobList is a page of job records, newest first.
func (r *reader) JobList(ctx context.Context, page *salvage.Page) ([]salvage.Job, error) {
	var jobs []salvage.Job
	if ok, err := r.ask(ctx, "jobs.list", page, &jobs); ok {
		return jobs, err
	}
	return r.c.JobList(ctx, page)
}

// JobTracePage is a page of job id's timeline.
func (r *reader) JobTracePage(ctx context.Context, id string, page *salvage.Page) (*salvage.Trace, error) {
	return askJobPage(ctx, r, "jobs.trace", id, page, r.c.JobTracePage)
}

// askJobPage asks endpoint for a page of job id, or reads it with direct
// when no service answers.
func askJobPage[T any](ctx context.Context, r *reader, endpoint, id string, page *salvage.Page,
	direct func(context.Context, string, *salvage.Page) (*T, error)) (*T, error) {
	var out T
	body := map[string]any{"job_id": id, "offset": page.Offset, "limit": page.Limit}
	if ok, err := r.ask(ctx, endpoint, body, &out); ok {
		return &out, unknownJob(err)
	}
	return direct(ctx, id, page)
}

// ChunkTrace is chunk's part of job id's timeline, as a Trace.
func (r *reader) ChunkTrace(ctx context.Context, id string, chunk int) (*salvage.Trace, error) {
	var tr salvage.Trace
	if ok, err := r.ask(ctx, "jobs.trace", map[string]any{"job_id": id, "chunk": chunk}, &tr); ok {
		return &tr, unknownJob(err)
	}
	one, err := r.c.JobTracePage(ctx, id, &salvage.Page{Offset: chunk - 1, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(one.Chunks) == 0 {
		return nil, fmt.Errorf("%w: job %s has no chunk %d", salvage.ErrUnknownJob, id, chunk)
	}
	one.NextOffset = 0
	return one, nil
}

// BreakerList lists the circuit breakers.
func (r *reader) BreakerList(ctx context.Context) ([]salvage.Breaker, error) {
	var bs []salvage.Breaker
	if ok, err := r.ask(ctx, "breakers.list", struct{}{}, &bs); ok {
		return bs, err
	}
	return r.c.BreakerList(ctx)
}

// ChunkListAwaiting lists up to limit chunks awaiting approval, longest
// waiting first.
func (r *reader) ChunkListAwaiting(ctx context.Context, limit int) ([]salvage.Awaiting, error) {
	var as []salvage.Awaiting
	if ok, err := r.ask(ctx, "approvals.list", map[string]int{"limit": limit}, &as); ok {
		return as, err
	}
	return r.c.ChunkListAwaiting(ctx, limit)
}

// LimitList lists the rate limits.
func (r *reader) LimitList(ctx context.Context) ([]salvage.LimitState, error) {
	var ls []salvage.LimitState
	if ok, err := r.ask(ctx, "limits.list", struct{}{}, &ls); ok {
		return ls, err
	}
	return r.c.LimitList(ctx)
}

// PipelineList lists the pipelines.
func (r *reader) PipelineList(ctx context.Context) ([]salvage.PipelineStatus, error) {
	var ps []salvage.PipelineStatus
	if ok, err := r.ask(ctx, "pipelines.list", struct{}{}, &ps); ok {
		return ps, err
	}
	return r.c.PipelineList(ctx)
}

// AuditList is a page of the audit entries q selects.
func (r *reader) AuditList(ctx context.Context, q salvage.AuditQuery) (*salvage.AuditPage, error) {
	var p salvage.AuditPage
	if ok, err := r.ask(ctx, "audit.list", q, &p); ok {
		return &p, err
	}
	return r.c.AuditList(ctx, q)
}

// JobSearch is a page of the jobs q selects. A service too old to know
// jobs.search does not answer it; the indexes are read directly then.
func (r *reader) JobSearch(ctx context.Context, q salvage.JobQuery) (*salvage.JobSearchPage, error) {
	var p salvage.JobSearchPage
	if ok, err := r.ask(ctx, "jobs.search", q, &p); ok {
		return &p, err
	}
	return r.c.JobSearch(ctx, q)
}

// ChunkListHeld lists up to limit chunks waiting in SALVAGE_HOLD, of one
// system or all.
func (r *reader) ChunkListHeld(ctx context.Context, system string, limit int) ([]salvage.HeldChunk, error) {
	var hs []salvage.HeldChunk
	if ok, err := r.ask(ctx, "held.list", map[string]any{"system": system, "limit": limit}, &hs); ok {
		return hs, err
	}
	return r.c.ChunkListHeld(ctx, system, limit)
}
