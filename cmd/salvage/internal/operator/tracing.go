package operator

import (
	"context"
	"os"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/salvagehq/salvage/otelsalvage"
)

// tracingShutdownTimeout bounds the flush of the spans left at exit.
const tracingShutdownTimeout = 5 * time.Second

// StartTracing exports spans over OTLP/HTTP when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set: it returns
// the provider (nil when not set; the global one then records nothing)
// and a stop that flushes what is left.
func StartTracing(ctx context.Context, log zerolog.Logger) (trace.TracerProvider, func(), error) {
	tp, err := otelsalvage.TracerProviderFromEnv(ctx, "salvage")
	if err != nil || tp == nil {
		return nil, func() {}, err
	}
	otel.SetTracerProvider(tp)
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	log.Info().Str("endpoint", endpoint).Msg("exporting OpenTelemetry spans over OTLP/HTTP")
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn().Err(err).Msg("flush the last OpenTelemetry spans")
		}
	}, nil
}
