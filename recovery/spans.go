package recovery

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// Span attribute keys: every span Salvage exports (job, chunk, stage,
// agent turn, call, recovery) names what it is about with these.
const (
	AttrJob        = attribute.Key("salvage.job_id")
	AttrPipeline   = attribute.Key("salvage.pipeline")
	AttrChunk      = attribute.Key("salvage.chunk")
	attrStage      = attribute.Key("salvage.stage")
	attrStageName  = attribute.Key("salvage.stage_name")
	attrAgent      = attribute.Key("salvage.agent")
	attrTool       = attribute.Key("salvage.tool")
	attrSystem     = attribute.Key("salvage.system")
	AttrStatus     = attribute.Key("salvage.status")
	AttrAttempts   = attribute.Key("salvage.attempts")
	attrKey        = attribute.Key("salvage.journal_key")
	attrModel      = attribute.Key("salvage.model")
	AttrTokensIn   = attribute.Key("salvage.tokens.prompt")
	AttrTokensOut  = attribute.Key("salvage.tokens.completion")
	attrErrorClass = attribute.Key("salvage.error_class")
	attrReplayed   = attribute.Key("salvage.replayed")
	AttrDelivery   = attribute.Key("salvage.delivery")
	AttrEpoch      = attribute.Key("salvage.epoch")
	AttrEnvelope   = attribute.Key("salvage.envelope_id")
	AttrCategory   = attribute.Key("salvage.category")
	AttrStrategy   = attribute.Key("salvage.strategy")
	AttrChunks     = attribute.Key("salvage.chunks")
	AttrDone       = attribute.Key("salvage.chunks.done")
	AttrFailed     = attribute.Key("salvage.chunks.dead_lettered")
	AttrCancelled  = attribute.Key("salvage.chunks.cancelled")
	AttrRetries    = attribute.Key("salvage.tier1_retries")
	AttrFinishes   = attribute.Key("salvage.finishes")
)

// tracerOr returns t, or a tracer that records nothing.
func tracerOr(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t
}

// startSpan starts a span whose attributes are built only when it
// records: with no exporter configured (the usual case) a call's span
// costs no allocation for them.
func startSpan(ctx context.Context, tracer trace.Tracer, name string, attrs func() []attribute.KeyValue, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, span := tracerOr(tracer).Start(ctx, name, opts...)
	if span.IsRecording() {
		span.SetAttributes(attrs()...)
	}
	return ctx, span
}

// startStage starts the span of one stage of one chunk.
func startStage(ctx context.Context, st salvagetype.Stage, r StageRun) (context.Context, trace.Span) {
	return startSpan(ctx, r.Tracer, "stage "+st.Name, func() []attribute.KeyValue {
		return []attribute.KeyValue{AttrJob.String(r.Job), AttrChunk.Int(r.Chunk), attrStage.Int(r.Stage), attrStageName.String(st.Name)}
	})
}

// startTurn starts the span of one agent's turn in a stage.
func startTurn(ctx context.Context, tracer trace.Tracer, t *turn) (context.Context, trace.Span) {
	return startSpan(ctx, tracer, "agent "+t.Agent, func() []attribute.KeyValue {
		return []attribute.KeyValue{AttrJob.String(t.Job), AttrChunk.Int(t.Chunk), attrStage.Int(t.Stage), attrAgent.String(t.Agent)}
	})
}

// startCall starts the span of one journaled call.
func (t *turn) startCall(ctx context.Context, tool *salvagetype.Tool, key string) (context.Context, trace.Span) {
	return startSpan(ctx, t.tracer, "call "+tool.Name, func() []attribute.KeyValue {
		return []attribute.KeyValue{AttrJob.String(t.Job), AttrChunk.Int(t.Chunk), attrStage.Int(t.Stage), attrAgent.String(t.Agent),
			attrTool.String(tool.Name), attrSystem.String(tool.System), attrKey.String(key)}
	}, trace.WithSpanKind(trace.SpanKindClient))
}

// endCall ends a call's span with what the journal row says of it.
func endCall(span trace.Span, row kv.JournalRow, replayed bool, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	status := row.Status
	if status == "" || status == salvagetype.CallInitiated {
		status = "NOT_MADE"
		if err == nil {
			status = salvagetype.CallSucceeded
		}
	}
	span.SetAttributes(AttrStatus.String(string(status)), AttrAttempts.Int(row.Attempts), attrReplayed.Bool(replayed))
	if u := row.Usage; u != nil {
		span.SetAttributes(attrModel.String(u.Model), AttrTokensIn.Int64(u.PromptTokens), AttrTokensOut.Int64(u.CompletionTokens))
	}
	if ClassOf(err) == salvagetype.ClassCancelled {
		// Stopped by Salvage (a sibling failed, the job was cancelled):
		// not a failure of this call.
		span.End()
		return
	}
	endWith(span, err)
}

// endWith ends span, marking it failed with err's class when err is set.
func endWith(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(attrErrorClass.String(ClassOf(err).String()))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
