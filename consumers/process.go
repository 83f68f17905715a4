package consumers

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/consumers/internal/flow"
)

// ProcessID is a fresh id for a process: host, pid and a random suffix, as
// a subject token. Workers and orchestrators take one when not given one.
func ProcessID() string { return flow.ProcessID() }

// JobSpanContext is the span context of job's span in trace traceID (32
// hex digits): its span id derives from the job id, so every process puts
// its chunk and recovery spans under the one span that the process that
// finishes the job exports. ok is false for a trace id that is not one.
func JobSpanContext(traceID, job string) (trace.SpanContext, bool) {
	return flow.JobSpanContext(traceID, job)
}

// FixedIDs returns the ids a root span started under ctx must take: the
// job span's, which JobSpanContext derives. A TracerProvider's id
// generator asks it (salvage.IDGenerator); a provider that does not
// exports the job span under a random id, and the chunk and recovery
// spans then point to a parent that never arrives.
func FixedIDs(ctx context.Context) (trace.SpanContext, bool) { return flow.FixedIDs(ctx) }
