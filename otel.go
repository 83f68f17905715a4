package salvage

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/consumers"
)

// IDGenerator makes OpenTelemetry span ids: at random, except for a job's
// span, whose id derives from the job id so that the chunk and recovery
// spans every process exports find their parent. Give it to the
// TracerProvider in Config.TracerProvider
// (sdktrace.WithIDGenerator(salvage.IDGenerator{}); otelsalvage's
// TracerProviderFromEnv does).
type IDGenerator = consumers.IDGenerator

// JobSpanContext is the span context of job's span in trace traceID (the
// job's Job.TraceID): the parent of its chunk and recovery spans.
func JobSpanContext(traceID, job string) (trace.SpanContext, bool) {
	return consumers.JobSpanContext(traceID, job)
}
