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
			_ = req.RespondJSON(out)
			return
		}
		code := CodeInternal
		switch {
		case errors.Is(err, errMalformed), errors.Is(err, streams.ErrBadToken), errors.Is(err, streams.ErrBadJob):
			code = CodeMalformed
		case errors.Is(err, consumers.ErrUnknownEnvelope), errors.Is(err, kv.ErrNotFound):
			code = CodeUnknown
		case errors.Is(err, consumers.ErrAlreadyResolved):
			code = CodeAlreadyResolved
		case errors.Is(err, errTooLarge):
			code = CodeTooLarge
		default:
			h.log.Error().Err(err).Str("subject", req.Subject()).Msg("request failed")
		}
		_ = req.Error(code, err.Error(), nil)
	}
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
	if recs == nil {
		recs = []kv.EnvelopeRecord{}
	}
	return recs, err
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
}

func (r *jobReq) read(req micro.Request) error {
	if err := decode(req, r); err != nil {
		return err
	}
	return streams.ValidateJobID(r.JobID)
}

// JobStatus is the answer to jobs.status.
type JobStatus struct {
	Job    kv.Job          `json:"job"`
	Chunks []kv.Checkpoint `json:"chunks"`
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
	cps, err := h.stores.Checkpoints.ForJob(ctx, r.JobID, j.Chunks)
	if err != nil {
		return nil, err
	}
	for i := range cps {
		cps[i].Outputs, cps[i].Snapshots = nil, nil
	}
	return JobStatus{Job: j, Chunks: cps}, nil
}

func (h *handlers) cancel(ctx context.Context, req micro.Request) (any, error) {
	var r jobReq
	if err := r.read(req); err != nil {
		return nil, err
	}
	return h.stores.Jobs.Cancel(ctx, r.JobID)
}

var errTooLarge = errors.New("job message too large")

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
