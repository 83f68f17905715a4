package flow

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// instrumentationName names the tracer Salvage's spans come from.
const instrumentationName = "github.com/salvagehq/salvage"

// TracerOf returns the tracer of tp, or a no-op one when tp is nil. Not
// the global provider: reaching for it would make every program that
// imports Salvage import OpenTelemetry's globals (propagation, baggage,
// metrics, logs); a program that wants it passes otel.GetTracerProvider().
func TracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(instrumentationName)
}

// JobSpanContext is the span context of job's span in trace traceID (32
// hex digits): its span id derives from the job id, so every process
// puts its chunk and recovery spans under the one span that the process
// that finishes the job exports. ok is false for a trace id that is not
// one.
func JobSpanContext(traceID, job string) (trace.SpanContext, bool) {
	tid, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(streams.DeriveSpanID("job:" + job))
	if err != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}), true
}

// UnderJob returns ctx with job's span as the remote parent, so a span
// started from it belongs to the job's trace.
func UnderJob(ctx context.Context, traceID, job string) context.Context {
	sc, ok := JobSpanContext(traceID, job)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// fixedIDsKey carries, to FixedIDs, the ids a root span must take.
type fixedIDsKey struct{}

// FixedIDs returns the ids a root span started under ctx must take: the
// job span's, which JobSpanContext derives. A TracerProvider's id
// generator asks it (salvage.IDGenerator); a provider that does not
// exports the job span under a random id, and the chunk and recovery
// spans then point to a parent that never arrives.
func FixedIDs(ctx context.Context) (trace.SpanContext, bool) {
	sc, ok := ctx.Value(fixedIDsKey{}).(trace.SpanContext)
	return sc, ok
}

// exportJobSpan records the span of a job that just finished. The first
// finish exports the job's span, from its creation to now, under the id
// JobSpanContext derives; a later one (a recovery re-ran a chunk) exports
// a "finished again" span under it, with the new outcome.
func exportJobSpan(tracer trace.Tracer, j kv.Job) {
	sc, ok := JobSpanContext(j.TraceID, j.ID)
	if !ok {
		return
	}
	end := time.Now()
	if j.FinishedAt != nil {
		end = *j.FinishedAt
	}
	attrs := trace.WithAttributes(
		recovery.AttrJob.String(j.ID), recovery.AttrPipeline.String(j.Pipeline), recovery.AttrStatus.String(string(j.Status)), recovery.AttrChunks.Int(j.Chunks),
		recovery.AttrDone.Int(j.Summary.Done), recovery.AttrFailed.Int(j.Summary.DeadLettered), recovery.AttrCancelled.Int(j.Summary.Cancelled),
		recovery.AttrTokensIn.Int64(j.Summary.PromptTokens), recovery.AttrTokensOut.Int64(j.Summary.CompletionTokens), recovery.AttrRetries.Int(j.Summary.Tier1Retries))
	var span trace.Span
	if j.Finishes <= 1 {
		ctx := context.WithValue(context.Background(), fixedIDsKey{}, sc)
		_, span = tracer.Start(ctx, "job "+j.Pipeline, trace.WithNewRoot(), trace.WithTimestamp(j.CreatedAt), attrs)
	} else {
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
		_, span = tracer.Start(ctx, "finished again", trace.WithTimestamp(end), attrs,
			trace.WithAttributes(recovery.AttrFinishes.Int(j.Finishes)))
	}
	if j.Status == salvagetype.JobIncomplete {
		span.SetStatus(codes.Error, "job incomplete")
	}
	span.End(trace.WithTimestamp(end))
}

// Outcomes of a chunk's delivery that are not checkpoint statuses.
const (
	OutcomeRetry    = "retry"
	OutcomeReleased = "released"
)

// EndChunkSpan ends a delivery's span with how it ended: an error status
// for a retry, a dead-letter or an infrastructure error.
func EndChunkSpan(span trace.Span, outcome string, err error) {
	if outcome == "" {
		outcome = "stopped"
	}
	span.SetAttributes(recovery.AttrStatus.String(outcome))
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case outcome == OutcomeRetry || outcome == string(salvagetype.ChunkDeadLettered):
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}
