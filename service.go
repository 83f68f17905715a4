package salvage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// The NATS micro service `salvage` (RoleAPI): the Client's operations over
// request-reply, for the stock nats CLI and for programs in any language.
const (
	// ServiceName is the micro service's name (`nats micro info salvage`).
	ServiceName = "salvage"
	// ServiceVersion is its version.
	ServiceVersion = "0.7.0"
	// ServicePrefix prefixes every endpoint's subject.
	ServicePrefix = "salvage.api"
)

// Error codes in the Nats-Service-Error-Code header of a failed request.
const (
	CodeMalformed       = "400"
	CodeUnknown         = "404"
	CodeAlreadyResolved = "409"
	CodeTooLarge        = "413"
	CodeInternal        = "500"
)

// Service bounds.
const (
	// MaxReply is the largest reply the service sends; a larger answer is
	// refused with CodeTooLarge and a hint to page.
	MaxReply = 768 << 10
	// requestTimeout bounds the work behind one request.
	requestTimeout = 30 * time.Second
)

var (
	// errMalformed marks a request the service cannot read.
	errMalformed = errors.New("malformed request")
	// errTooLarge is a request or a reply past its size limit.
	errTooLarge = errors.New("too large")
)

// serveAPI runs the micro service until ctx ends.
func (c *Client) serveAPI(ctx context.Context) error {
	c.apiAccount = serviceAccount(c.js.Conn())
	svc, err := micro.AddService(c.js.Conn(), micro.Config{
		Name: ServiceName, Version: ServiceVersion,
		Description: "Salvage: submit, list, watch and trace jobs (a tenant: its own, under tenant.<tenant>), list, show, replay, resolve and acknowledge failure envelopes, act on envelopes in bulk, list circuit breakers, list the chunks awaiting approval and approve them, list, pause and resume pipelines, list the live processes, list, set and remove rate limits, list the audit of operator actions, search jobs by metadata, tenant, pipeline, status and time, list the chunks held across jobs",
	})
	if err != nil {
		return fmt.Errorf("salvage: add service: %w", err)
	}
	g := svc.AddGroup(ServicePrefix)
	for subject, fn := range map[string]func(context.Context, micro.Request) (any, error){
		"jobs.submit": c.apiSubmit, "jobs.status": c.apiStatus, "jobs.failing": c.apiFailing, "jobs.cancel": c.apiCancel,
		"dlq.list": c.apiList, "dlq.show": c.apiShow, "dlq.replay": c.apiReplay, "dlq.resolve": c.apiResolve, "dlq.ack": c.apiAck,
		"dlq.bulk": c.apiBulk, "breakers.list": c.apiBreakers, "approve": c.apiApprove, "approvals.list": c.apiApprovals,
		"pipelines.list": c.apiPipelines, "pipelines.pause": c.apiPause, "pipelines.resume": c.apiResume,
		"workers.list": c.apiWorkers, "jobs.list": c.apiJobs, "jobs.trace": c.apiTrace,
		"limits.list": c.apiLimits, "limits.set": c.apiSetLimit, "limits.remove": c.apiRemoveLimit,
		"audit.list": c.apiAudit, "jobs.search": c.apiJobSearch, "held.list": c.apiHeld,
	} {
		if err := g.AddEndpoint(strings.ReplaceAll(subject, ".", "-"), c.handler(fn), micro.WithEndpointSubject(subject)); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("salvage: add endpoint %s: %w", subject, err)
		}
	}
	for subject, fn := range c.tenantEndpoints() {
		if err := g.AddEndpoint("tenant-"+strings.ReplaceAll(subject, ".", "-"), c.handler(fn), micro.WithEndpointSubject("tenant.*."+subject)); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("salvage: add endpoint tenant.*.%s: %w", subject, err)
		}
	}
	<-ctx.Done()
	return svc.Stop()
}

// handler answers fn's result as JSON, or its error with a code. Every
// request gets an answer: one too large to send, or one that fails to
// send, is answered with an error.
func (c *Client) handler(fn func(context.Context, micro.Request) (any, error)) micro.HandlerFunc {
	return func(req micro.Request) {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		out, err := fn(c.withRequest(ctx, req), req)
		if err == nil {
			err = respond(req, out)
		}
		if err == nil {
			return
		}
		name, code, known := errorCodeOf(err)
		if !known {
			c.log.Error().Err(err).Str("subject", req.Subject()).Msg("request failed")
		}
		if rerr := req.Error(code, streams.Clip(err.Error(), salvagetype.ErrorTextMax), nil,
			micro.WithHeaders(micro.Headers{ErrorCodeHeader: []string{name}})); rerr != nil {
			c.log.Error().Err(rerr).Str("subject", req.Subject()).Msg("send error reply")
		}
	}
}

func respond(req micro.Request, out any) error {
	data, err := json.Marshal(out)
	if err != nil {
		return err
	}
	if len(data) > MaxReply {
		return fmt.Errorf("%w: the reply would be %d bytes, the limit is %d; ask for a page (offset, limit)", errTooLarge, len(data), MaxReply)
	}
	if err := req.Respond(data); err != nil {
		return fmt.Errorf("send reply: %w", err)
	}
	return nil
}

// decode reads a JSON request body into v; an empty body leaves v as is
// when empty is allowed. A body larger than requestMax (jobs.submit has
// its own bound, the payload limit), one with a field v does not have or
// anything after the object is refused: a mistyped field would otherwise
// be dropped and the request acted on without it.
func decode(req micro.Request, v any, empty bool) error {
	return decodeBytes(req.Data(), v, empty, requestMax)
}

// requestMax bounds a request body other than jobs.submit's.
const requestMax = 64 << 10

func decodeBytes(data []byte, v any, empty bool, limit int) error {
	if empty && len(data) == 0 {
		return nil
	}
	if len(data) > limit {
		return fmt.Errorf("%w: the request is %d bytes, the limit is %d", errTooLarge, len(data), limit)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the JSON object", errMalformed)
	}
	if err := streams.CheckDuplicateKeys(data); err != nil {
		// The last would win, silently: which one the sender meant is
		// not ours to guess.
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	return nil
}

// checkPage refuses a page that asks for nothing sensible: a negative
// offset or limit (absent or 0 is the default).
func checkPage(p Page) error {
	if p.Offset < 0 || p.Limit < 0 {
		return fmt.Errorf("%w: offset %d, limit %d: want 0 or more (0 is the default)", errMalformed, p.Offset, p.Limit)
	}
	return nil
}

// parseMinAge reads a min_age ("30m"): a Go duration, not negative.
func parseMinAge(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: min_age: %v", errMalformed, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("%w: min_age %s: want 0 or more", errMalformed, s)
	}
	return d, nil
}

// envelopeRequest is the body of dlq.show, dlq.replay, dlq.resolve and
// dlq.ack.
type envelopeRequest struct {
	EnvelopeID string `json:"envelope_id"`
	By         string `json:"by,omitempty"`
	Note       string `json:"note,omitempty"`
	// Reason says why, for the audit (a resolve's note is its reason).
	Reason string `json:"reason,omitempty"`
}

func readEnvelopeRequest(req micro.Request) (envelopeRequest, error) {
	return parseEnvelopeRequest(req.Data())
}

// parseEnvelopeRequest reads the body of an envelope request: an error
// wrapping errMalformed or salvagetype.ErrInvalidToken, or a request whose
// envelope_id is a token.
func parseEnvelopeRequest(data []byte) (envelopeRequest, error) {
	var r envelopeRequest
	if err := decodeBytes(data, &r, false, requestMax); err != nil {
		return r, err
	}
	if r.EnvelopeID == "" {
		return r, fmt.Errorf("%w: envelope_id is required", errMalformed)
	}
	return r, salvagetype.ValidateToken("envelope_id", r.EnvelopeID)
}

func (c *Client) apiList(ctx context.Context, req micro.Request) (any, error) {
	var r struct {
		EnvelopeFilter
		// MinAge is a Go duration ("30m").
		MinAge string `json:"min_age,omitempty"`
		Page
	}
	if err := decode(req, &r, true); err != nil {
		return nil, err
	}
	if err := checkPage(r.Page); err != nil {
		return nil, err
	}
	if r.MinAge != "" {
		d, err := parseMinAge(r.MinAge)
		if err != nil {
			return nil, err
		}
		r.EnvelopeFilter.MinAge = d
	}
	return c.EnvelopeList(ctx, r.EnvelopeFilter, &r.Page)
}

// apiBulk takes {"action": "replay"|"resolve"|"ack", "category"?,
// "status"?, "job_id"?, "min_age"?, "dry_run"?, "by"?, "note"?, "limit"?}.
func (c *Client) apiBulk(ctx context.Context, req micro.Request) (any, error) {
	var r struct {
		Action BulkAction `json:"action"`
		EnvelopeFilter
		MinAge string `json:"min_age,omitempty"`
		DryRun bool   `json:"dry_run,omitempty"`
		By     string `json:"by,omitempty"`
		Note   string `json:"note,omitempty"`
		Limit  int    `json:"limit,omitempty"`
	}
	if err := decode(req, &r, false); err != nil {
		return nil, err
	}
	if r.Limit < 0 {
		return nil, fmt.Errorf("%w: limit %d: want 0 (the default) or more", errMalformed, r.Limit)
	}
	if r.MinAge != "" {
		d, err := parseMinAge(r.MinAge)
		if err != nil {
			return nil, err
		}
		r.EnvelopeFilter.MinAge = d
	}
	return c.EnvelopeBulk(ctx, BulkRequest{Action: r.Action, Filter: r.EnvelopeFilter, By: r.By, Note: r.Note, DryRun: r.DryRun, Limit: r.Limit})
}

func (c *Client) apiShow(ctx context.Context, req micro.Request) (any, error) {
	r, err := readEnvelopeRequest(req)
	if err != nil {
		return nil, err
	}
	return c.EnvelopeGet(ctx, r.EnvelopeID)
}

func (c *Client) apiReplay(ctx context.Context, req micro.Request) (any, error) {
	r, err := readEnvelopeRequest(req)
	if err != nil {
		return nil, err
	}
	return c.EnvelopeReplay(WithReason(ctx, r.Reason), r.EnvelopeID, r.By)
}

func (c *Client) apiResolve(ctx context.Context, req micro.Request) (any, error) {
	r, err := readEnvelopeRequest(req)
	if err != nil {
		return nil, err
	}
	return c.EnvelopeResolve(WithReason(ctx, r.Reason), r.EnvelopeID, r.By, r.Note)
}

func (c *Client) apiAck(ctx context.Context, req micro.Request) (any, error) {
	r, err := readEnvelopeRequest(req)
	if err != nil {
		return nil, err
	}
	return c.EnvelopeAck(WithReason(ctx, r.Reason), r.EnvelopeID, r.By)
}

// jobRequest is the body of jobs.status and jobs.cancel.
type jobRequest struct {
	JobID  string `json:"job_id"`
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	Page
}

func readJobRequest(req micro.Request) (jobRequest, error) {
	var r jobRequest
	if err := decode(req, &r, false); err != nil {
		return r, err
	}
	if err := checkPage(r.Page); err != nil {
		return r, err
	}
	return r, streams.ValidateJobID(r.JobID)
}

// apiApprove takes {"job_id", "chunk", "approve": true|false, "by"?,
// "note"?}; approve is required, so an empty body rejects nothing.
func (c *Client) apiApprove(ctx context.Context, req micro.Request) (any, error) {
	var r struct {
		JobID   string `json:"job_id"`
		Chunk   int    `json:"chunk"`
		Approve *bool  `json:"approve"`
		By      string `json:"by,omitempty"`
		Note    string `json:"note,omitempty"`
	}
	if err := decode(req, &r, false); err != nil {
		return nil, err
	}
	if r.Approve == nil || r.Chunk < 1 {
		return nil, fmt.Errorf(`%w: want {"job_id", "chunk" (from 1), "approve": true|false}`, errMalformed)
	}
	return c.ChunkApprove(ctx, r.JobID, r.Chunk, Decision{Reject: !*r.Approve, By: r.By, Note: r.Note})
}

// apiBreakers lists the circuit breakers; the request body is ignored.
func (c *Client) apiBreakers(ctx context.Context, _ micro.Request) (any, error) {
	bs, err := c.BreakerList(ctx)
	if bs == nil {
		bs = []Breaker{}
	}
	return bs, err
}

// approvalsListMax bounds one approvals.list answer: each chunk carries
// up to AwaitingInputMax bytes of its input, so the reply stays under
// MaxReply.
const approvalsListMax = 200

// apiApprovals takes {"limit"?}: the chunks awaiting approval, longest
// waiting first (100 by default, at most approvalsListMax).
func (c *Client) apiApprovals(ctx context.Context, req micro.Request) (any, error) {
	var r struct {
		Limit int `json:"limit"`
	}
	if err := decode(req, &r, true); err != nil {
		return nil, err
	}
	if r.Limit < 0 || r.Limit > approvalsListMax {
		return nil, fmt.Errorf("%w: limit %d: want 0 (100) to %d", errMalformed, r.Limit, approvalsListMax)
	}
	return c.ChunkListAwaiting(ctx, r.Limit)
}

// apiPipelines lists the pipelines; the request body is ignored.
func (c *Client) apiPipelines(ctx context.Context, _ micro.Request) (any, error) {
	return c.PipelineList(ctx)
}

// apiWorkers lists the live processes; the request body is ignored.
func (c *Client) apiWorkers(ctx context.Context, _ micro.Request) (any, error) {
	ws, err := c.WorkerList(ctx)
	if ws == nil {
		ws = []Worker{}
	}
	return ws, err
}

// pipelineRequest is the body of pipelines.pause and pipelines.resume.
type pipelineRequest struct {
	Pipeline string `json:"pipeline"`
	By       string `json:"by,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

func readPipelineRequest(req micro.Request) (pipelineRequest, error) {
	var r pipelineRequest
	if err := decode(req, &r, false); err != nil {
		return r, err
	}
	if r.Pipeline == "" {
		return r, fmt.Errorf(`%w: want {"pipeline", "by"?, "reason"?}`, errMalformed)
	}
	return r, nil
}

// apiPause takes {"pipeline", "by"?, "reason"?}.
func (c *Client) apiPause(ctx context.Context, req micro.Request) (any, error) {
	r, err := readPipelineRequest(req)
	if err != nil {
		return nil, err
	}
	return c.PipelinePause(ctx, r.Pipeline, r.By, r.Reason)
}

// apiResume takes {"pipeline", "by"?}.
func (c *Client) apiResume(ctx context.Context, req micro.Request) (any, error) {
	r, err := readPipelineRequest(req)
	if err != nil {
		return nil, err
	}
	return c.PipelineResume(ctx, r.Pipeline, r.By)
}

func (c *Client) apiStatus(ctx context.Context, req micro.Request) (any, error) {
	r, err := readJobRequest(req)
	if err != nil {
		return nil, err
	}
	return c.ChunkList(ctx, r.JobID, &r.Page)
}

// apiFailing takes {"job_id", "offset"?, "limit"?}: the job and a page
// of its chunks that failed or wait, with how many match (Failing).
func (c *Client) apiFailing(ctx context.Context, req micro.Request) (any, error) {
	r, err := readJobRequest(req)
	if err != nil {
		return nil, err
	}
	return c.ChunkListFailing(ctx, r.JobID, &r.Page)
}

// apiJobs takes {"offset"?, "limit"?}: a page of job records, newest
// first.
func (c *Client) apiJobs(ctx context.Context, req micro.Request) (any, error) {
	var p Page
	if err := decode(req, &p, true); err != nil {
		return nil, err
	}
	if err := checkPage(p); err != nil {
		return nil, err
	}
	jobs, err := c.JobList(ctx, &p)
	if jobs == nil {
		jobs = []Job{}
	}
	return jobs, err
}

// apiTrace takes {"job_id", "chunk"?, "offset"?, "limit"?}: one chunk's
// timeline, or a page of the job's chunks (next_offset says where the
// next begins).
func (c *Client) apiTrace(ctx context.Context, req micro.Request) (any, error) {
	var r struct {
		JobID string `json:"job_id"`
		Chunk int    `json:"chunk,omitempty"`
		Page
	}
	if err := decode(req, &r, false); err != nil {
		return nil, err
	}
	if err := streams.ValidateJobID(r.JobID); err != nil {
		return nil, err
	}
	if err := checkPage(r.Page); err != nil {
		return nil, err
	}
	if r.Chunk < 0 {
		return nil, fmt.Errorf("%w: chunk %d: chunks are numbered from 1", errMalformed, r.Chunk)
	}
	if r.Chunk == 0 {
		return c.JobTracePage(ctx, r.JobID, &r.Page)
	}
	tr, err := c.JobTracePage(ctx, r.JobID, &Page{Offset: r.Chunk - 1, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(tr.Chunks) == 0 {
		return nil, fmt.Errorf("%w: job %s has no chunk %d", ErrUnknownJob, r.JobID, r.Chunk)
	}
	tr.NextOffset = 0 // one chunk, not a page
	return tr, nil
}

func (c *Client) apiCancel(ctx context.Context, req micro.Request) (any, error) {
	r, err := readJobRequest(req)
	if err != nil {
		return nil, err
	}
	return c.JobCancel(WithReason(ctx, r.Reason), r.JobID, r.By)
}

// SubmitReply is the answer to jobs.submit.
type SubmitReply struct {
	JobID string `json:"job_id"`
}

// submitRequest is the body of jobs.submit.
type submitRequest struct {
	Pipeline string          `json:"pipeline"`
	Input    json.RawMessage `json:"input"`
	JobID    *string         `json:"job_id"`
	Budget   *Budget         `json:"budget"`
	Metadata map[string]any  `json:"metadata"`
	Tenant   string          `json:"tenant"`
}

// apiSubmit takes {"pipeline", "input", "job_id"?, "budget"?, "metadata"?,
// "tenant"?}.
func (c *Client) apiSubmit(ctx context.Context, req micro.Request) (any, error) {
	var r submitRequest
	if err := decodeBytes(req.Data(), &r, false, c.cfg.MaxPayload); err != nil {
		return nil, err
	}
	return c.submitFrom(ctx, req, r)
}

// submitFrom submits the job r asks for.
func (c *Client) submitFrom(ctx context.Context, req micro.Request, r submitRequest) (any, error) {
	if r.Pipeline == "" {
		return nil, fmt.Errorf("%w: pipeline is required", errMalformed)
	}
	if len(r.Input) == 0 {
		return nil, fmt.Errorf("%w: job message has no input", salvagetype.ErrInvalidJob)
	}
	opts := &SubmitOpts{Budget: r.Budget, Metadata: r.Metadata, Tenant: r.Tenant, TraceParent: req.Headers().Get(salvagetype.HeaderTraceParent)}
	if r.JobID != nil {
		if err := streams.ValidateJobID(*r.JobID); err != nil {
			return nil, err
		}
		opts.JobID = *r.JobID
	}
	id, err := c.JobSubmit(ctx, r.Pipeline, r.Input, opts)
	if err != nil {
		return nil, err
	}
	return SubmitReply{JobID: id}, nil
}
