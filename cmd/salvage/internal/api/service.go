// Package api is the NATS micro service `salvage` (visible to `nats micro
// ls|info|stats`): jobs and the DLQ over request-reply under salvage.api.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/consumers"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/streams"
)

// Service identity.
const (
	Name    = "salvage"
	Version = "0.3.0"
	// Prefix is the subject prefix of every endpoint.
	Prefix = "salvage.api"
)

// Error codes in the Nats-Service-Error-Code header.
const (
	CodeMalformed       = "400"
	CodeUnknown         = "404"
	CodeAlreadyResolved = "409"
	CodeTooLarge        = "413"
	CodeInternal        = "500"
)

// requestTimeout bounds the work behind one request.
const requestTimeout = 30 * time.Second

// Reply bounds.
const (
	// MaxReply is the largest reply the service sends; a larger answer is
	// refused with CodeTooLarge and a hint to page (the server's
	// max_payload is 1 MiB).
	MaxReply = 768 << 10
	// PageDefault and PageMax bound the chunks of a jobs.status reply and
	// the envelopes of a dlq.list reply.
	PageDefault = 100
	PageMax     = 1000
)

// Start registers the service on nc. It returns the service, which the
// caller stops.
func Start(nc *nats.Conn, js jetstream.JetStream, stores *kv.Stores, log zerolog.Logger) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{
		Name: Name, Version: Version,
		Description: "Salvage: submit and watch jobs, list, show, replay, resolve and acknowledge failure envelopes",
	})
	if err != nil {
		return nil, fmt.Errorf("api: add service: %w", err)
	}
	h := &handlers{js: js, stores: stores, op: consumers.NewOperator(js, stores), log: log.With().Str("role", "api").Logger()}
	g := svc.AddGroup(Prefix)
	for subject, fn := range map[string]func(context.Context, micro.Request) (any, error){
		"jobs.submit": h.submit, "jobs.status": h.status, "jobs.cancel": h.cancel,
		"dlq.list": h.list, "dlq.show": h.show, "dlq.replay": h.replay, "dlq.resolve": h.resolve, "dlq.ack": h.ack,
	} {
		if err := g.AddEndpoint(strings.ReplaceAll(subject, ".", "-"), h.wrap(fn), micro.WithEndpointSubject(subject)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("api: add endpoint %s: %w", subject, err)
		}
	}
	return svc, nil
}

type handlers struct {
	js     jetstream.JetStream
	stores *kv.Stores
	op     *consumers.Operator
	log    zerolog.Logger
}

// errMalformed marks a request the service cannot read.
var errMalformed = errors.New("malformed request")

// wrap answers fn's result as JSON, or its error with a code.
func (h *handlers) wrap(fn func(context.Context, micro.Request) (any, error)) micro.HandlerFunc {
	return func(req micro.Request) {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		out, err := fn(ctx, req)
		if err == nil {
			err = h.respond(req, out)
		}
		if err == nil {
			return
		}
		code := CodeInternal
		switch {
		case errors.Is(err, errMalformed), errors.Is(err, streams.ErrBadToken), errors.Is(err, streams.ErrBadJob):
			code = CodeMalformed
		case errors.Is(err, consumers.ErrUnknownEnvelope), errors.Is(err, consumers.ErrUnknownJob), errors.Is(err, kv.ErrNotFound):
			code = CodeUnknown
		case errors.Is(err, consumers.ErrAlreadyResolved), errors.Is(err, consumers.ErrSuperseded):
			code = CodeAlreadyResolved
		case errors.Is(err, errTooLarge):
			code = CodeTooLarge
		default:
			h.log.Error().Err(err).Str("subject", req.Subject()).Msg("request failed")
		}
		if rerr := req.Error(code, streams.Clip(err.Error(), streams.ErrorTextMax), nil); rerr != nil {
			h.log.Error().Err(rerr).Str("subject", req.Subject()).Msg("send error reply")
		}
	}
}

// respond sends out as JSON, or returns an error (answered as such) when
// it is too large to send or the send fails: a request always gets an
// answer.
func (h *handlers) respond(req micro.Request, out any) error {
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

// decode reads a JSON request body into v.
func decode(req micro.Request, v any) error {
	if err := json.Unmarshal(req.Data(), v); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	return nil
}

type envelopeReq struct {
	EnvelopeID string `json:"envelope_id"`
	By         string `json:"by,omitempty"`
	Note       string `json:"note,omitempty"`
}

func (r *envelopeReq) read(req micro.Request) error {
	if err := decode(req, r); err != nil {
		return err
	}
	if r.EnvelopeID == "" {
		return fmt.Errorf("%w: envelope_id is required", errMalformed)
	}
	if r.By == "" {
		r.By = "api"
	}
	return streams.ValidateToken("envelope_id", r.EnvelopeID)
}

type listReq struct {
	consumers.EnvelopeFilter
	// MinAge is a Go duration ("30m").
	MinAge string `json:"min_age,omitempty"`
	page
}

// page selects part of a long answer.
type page struct {
	Offset int `json:"offset,omitempty"`
	// Limit defaults to PageDefault and is capped at PageMax.
	Limit int `json:"limit,omitempty"`
}

func (p page) bounds(n int) (from, to int) {
	limit := p.Limit
	if limit <= 0 {
		limit = PageDefault
	}
	limit = min(limit, PageMax)
	from = min(max(p.Offset, 0), n)
	return from, min(from+limit, n)
}

// EnvelopeList is the answer to dlq.list: a page of the matching envelope
// records, oldest first, and how many match in all.
type EnvelopeList struct {
	Envelopes []kv.EnvelopeRecord `json:"envelopes"`
	Total     int                 `json:"total"`
	Offset    int                 `json:"offset"`
	// NextOffset is where the next page starts; absent on the last one.
	NextOffset int `json:"next_offset,omitempty"`
}

func (h *handlers) list(ctx context.Context, req micro.Request) (any, error) {
	var r listReq
	if len(req.Data()) > 0 {
		if err := decode(req, &r); err != nil {
			return nil, err
		}
	}
	if r.MinAge != "" {
		d, err := time.ParseDuration(r.MinAge)
		if err != nil {
			return nil, fmt.Errorf("%w: min_age: %v", errMalformed, err)
		}
		r.EnvelopeFilter.MinAge = d
	}
	recs, err := h.op.List(ctx, r.EnvelopeFilter)
	if err != nil {
		return nil, err
	}
	from, to := r.page.bounds(len(recs))
	out := EnvelopeList{Envelopes: append([]kv.EnvelopeRecord{}, recs[from:to]...), Total: len(recs), Offset: from}
	if to < len(recs) {
		out.NextOffset = to
	}
	return out, nil
}

func (h *handlers) show(ctx context.Context, req micro.Request) (any, error) {
	var r envelopeReq
	if err := r.read(req); err != nil {
		return nil, err
	}
	return h.op.Show(ctx, r.EnvelopeID)
}

func (h *handlers) replay(ctx context.Context, req micro.Request) (any, error) {
	var r envelopeReq
	if err := r.read(req); err != nil {
		return nil, err
	}
	return h.op.Replay(ctx, r.EnvelopeID, r.By)
}

func (h *handlers) resolve(ctx context.Context, req micro.Request) (any, error) {
	var r envelopeReq
	if err := r.read(req); err != nil {
		return nil, err
	}
	return h.op.Resolve(ctx, r.EnvelopeID, r.By, r.Note)
}

func (h *handlers) ack(ctx context.Context, req micro.Request) (any, error) {
	var r envelopeReq
	if err := r.read(req); err != nil {
		return nil, err
	}
	return h.op.Ack(ctx, r.EnvelopeID, r.By)
}

type jobReq struct {
	JobID string `json:"job_id"`
	page
}

func (r *jobReq) read(req micro.Request) error {
	if err := decode(req, r); err != nil {
		return err
	}
	return streams.ValidateJobID(r.JobID)
}

// JobStatus is the answer to jobs.status: the job record (its counts
// cover every chunk) and one page of its chunks' checkpoints, chunk
// Offset+1 onward.
type JobStatus struct {
	Job    kv.Job          `json:"job"`
	Chunks []kv.Checkpoint `json:"chunks"`
	Offset int             `json:"offset"`
	// NextOffset is where the next page starts; absent on the last one.
	NextOffset int `json:"next_offset,omitempty"`
}

func (h *handlers) status(ctx context.Context, req micro.Request) (any, error) {
	var r jobReq
	if err := r.read(req); err != nil {
		return nil, err
	}
	j, err := h.stores.Jobs.Get(ctx, r.JobID)
	if err != nil {
		return nil, err
	}
	from, to := r.page.bounds(j.Chunks)
	cps, err := h.stores.Checkpoints.ForJobRange(ctx, r.JobID, from+1, to)
	if err != nil {
		return nil, err
	}
	out := JobStatus{Job: j, Chunks: j.View(cps), Offset: from}
	if to < j.Chunks {
		out.NextOffset = to
	}
	return out, nil
}

func (h *handlers) cancel(ctx context.Context, req micro.Request) (any, error) {
	var r jobReq
	if err := r.read(req); err != nil {
		return nil, err
	}
	return h.op.Cancel(ctx, r.JobID, "api")
}

// errTooLarge is a request or a reply past its size limit.
var errTooLarge = errors.New("too large")

// SubmitReply is the answer to jobs.submit.
type SubmitReply struct {
	JobID string `json:"job_id"`
	// Seq is the job message's SALVAGE_JOBS sequence; a rejection event
	// names it.
	Seq uint64 `json:"seq"`
}

// submit publishes {"pipeline": …, plus the job message's fields} to
// salvage.jobs.<pipeline> with a job id minted here, and replies with it.
// The splitter validates the rest and reports a rejection as usual.
func (h *handlers) submit(ctx context.Context, req micro.Request) (any, error) {
	if len(req.Data()) > consumers.MaxPayloadDefault {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", errTooLarge, len(req.Data()), consumers.MaxPayloadDefault)
	}
	var msg map[string]json.RawMessage
	if err := decode(req, &msg); err != nil {
		return nil, err
	}
	var pipeline string
	if err := json.Unmarshal(msg["pipeline"], &pipeline); err != nil {
		return nil, fmt.Errorf("%w: pipeline is required", errMalformed)
	}
	if err := streams.ValidateToken("pipeline", pipeline); err != nil {
		return nil, err
	}
	delete(msg, "pipeline")
	id, body, err := streams.PrepareJob(msg)
	if err != nil {
		return nil, err
	}
	m := streams.JobMessage(pipeline, id, body, req.Headers().Get(streams.HeaderTraceParent))
	ack, err := h.js.PublishMsg(ctx, m)
	if err != nil {
		return nil, err
	}
	return SubmitReply{JobID: id, Seq: ack.Sequence}, nil
}
