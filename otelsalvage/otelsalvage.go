// Package otelsalvage exports Salvage's spans with OpenTelemetry's OTLP
// over HTTP, configured by the standard environment variables. It is apart
// from the root package, as otelriver is from River, so that a program that
// does not export traces does not import the exporter (and the gRPC and
// protobuf packages it brings).
//
//	tp, err := otelsalvage.TracerProviderFromEnv(ctx, "my-service")
//	if tp != nil {
//		defer tp.Shutdown(context.Background())
//		cfg.TracerProvider = tp
//	}
package otelsalvage

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/salvagehq/salvage"
)

// TracerProviderFromEnv builds a TracerProvider that exports spans with
// OTLP over HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, configured by the standard
// OpenTelemetry environment variables (OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_SCHEDULE_DELAY,
// …). service names the service when OTEL_SERVICE_NAME does not. It
// returns nil when neither endpoint is set, and an error for
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc, which this build does not speak. The
// caller shuts the provider down, which flushes what is left.
func TracerProviderFromEnv(ctx context.Context, service string) (*sdktrace.TracerProvider, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" && p != "http/protobuf" {
			return nil, fmt.Errorf("%w: %s=%s: Salvage exports OTLP over HTTP (http/protobuf) only", salvage.ErrInvalidConfig, v, p)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otelsalvage: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, fmt.Errorf("otelsalvage: OTLP resource: %w", err)
	}
	if name := strings.TrimSpace(os.Getenv("OTEL_SERVICE_NAME")); name != "" {
		// The environment wins over the caller's name.
		res, err = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(name)))
		if err != nil {
			return nil, fmt.Errorf("otelsalvage: OTLP resource: %w", err)
		}
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(salvage.IDGenerator{})), nil
}
