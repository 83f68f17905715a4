package salvage

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/consumers"
)

// IDGenerator makes OpenTelemetry span ids: at random, except for a job's
// span, whose id derives from the job id so that the chunk and recovery
// spans every process exports find their parent. Give it to the
// TracerProvider in Config.TracerProvider
// (sdktrace.WithIDGenerator(salvage.IDGenerator{}); otelsalvage's
// TracerProviderFromEnv does).
// It implements go.opentelemetry.io/otel/sdk/trace.IDGenerator.
type IDGenerator struct{}

// NewIDs returns a trace id and a span id for a root span: the job span's
// own, or random ones.
func (IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if sc, ok := consumers.FixedIDs(ctx); ok {
		return sc.TraceID(), sc.SpanID()
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, randomSpanID()
}

// NewSpanID returns a span id for a span of trace traceID.
func (IDGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

// randomSpanID is a valid span id at random.
func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.LittleEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// JobSpanContext is the span context of job's span in trace traceID (the
// job's Job.TraceID): the parent of its chunk and recovery spans.
func JobSpanContext(traceID, job string) (trace.SpanContext, bool) {
	return consumers.JobSpanContext(traceID, job)
}
