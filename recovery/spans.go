package recovery

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/salvagehq/salvage/kv"
)

// Span attribute keys of stage, agent turn and call spans (the consumers
// package names those of jobs, chunks and recoveries alike).
const (
	attrJob        = attribute.Key("salvage.job_id")
	attrChunk      = attribute.Key("salvage.chunk")
	attrStage      = attribute.Key("salvage.stage")
	attrStageName  = attribute.Key("salvage.stage_name")
	attrAgent      = attribute.Key("salvage.agent")
	attrTool       = attribute.Key("salvage.tool")
	attrSystem     = attribute.Key("salvage.system")
	attrStatus     = attribute.Key("salvage.status")
	attrAttempts   = attribute.Key("salvage.attempts")
	attrKey        = attribute.Key("salvage.journal_key")
	attrTokensIn   = attribute.Key("salvage.tokens.prompt")
	attrTokensOut  = attribute.Key("salvage.tokens.completion")
	attrModel      = attribute.Key("salvage.model")
	attrErrorClass = attribute.Key("salvage.error_class")
	attrReplayed   = attribute.Key("salvage.replayed")
)

// tracerOr returns t, or a tracer that records nothing.
func tracerOr(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t
}

// startStage starts the span of one stage of one chunk.
func startStage(ctx context.Context, st Stage, r StageRun) (context.Context, trace.Span) {
	return tracerOr(r.Tracer).Start(ctx, "stage "+st.Name, trace.WithAttributes(
		attrJob.String(r.Job), attrChunk.Int(r.Chunk), attrStage.Int(r.Stage), attrStageName.String(st.Name)))
}

// startTurn starts the span of one agent's turn in a stage.
func startTurn(ctx context.Context, tracer trace.Tracer, t *Turn) (context.Context, trace.Span) {
	return tracerOr(tracer).Start(ctx, "agent "+t.Agent, trace.WithAttributes(
		attrJob.String(t.Job), attrChunk.Int(t.Chunk), attrStage.Int(t.Stage), attrAgent.String(t.Agent)))
}

// startCall starts the span of one journaled call.
func (t *Turn) startCall(ctx context.Context, tool *Tool, key string) (context.Context, trace.Span) {
	return tracerOr(t.tracer).Start(ctx, "call "+tool.Name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attrJob.String(t.Job), attrChunk.Int(t.Chunk), attrStage.Int(t.Stage), attrAgent.String(t.Agent),
		attrTool.String(tool.Name), attrSystem.String(tool.System), attrKey.String(key)))
}

// endCall ends a call's span with what the journal row says of it.
func endCall(span trace.Span, row kv.JournalRow, replayed bool, err error) {
	status := row.Status
	if status == "" || status == kv.CallInitiated {
		status = "NOT_MADE"
		if err == nil {
			status = kv.CallSucceeded
		}
	}
	span.SetAttributes(attrStatus.String(status), attrAttempts.Int(row.Attempts), attrReplayed.Bool(replayed))
	if u := row.Usage; u != nil {
		span.SetAttributes(attrModel.String(u.Model), attrTokensIn.Int64(u.PromptTokens), attrTokensOut.Int64(u.CompletionTokens))
	}
	if ClassOf(err) == ClassCancelled {
		// Stopped by Salvage (a sibling failed, the job was cancelled):
		// not a failure of this call.
		span.End()
		return
	}
	endWith(span, err)
}

// endWith ends span, marking it failed with err's class when err is set.
func endWith(span trace.Span, err error) {
	if err != nil {
		span.SetAttributes(attrErrorClass.String(ClassOf(err).String()))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
