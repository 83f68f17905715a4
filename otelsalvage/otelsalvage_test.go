package otelsalvage_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/otelsalvage"
)

// TestTracerProviderFromEnv: no endpoint, no provider; a protocol this
// build does not speak is refused by name.
func TestTracerProviderFromEnv(t *testing.T) {
	ctx := context.Background()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if tp, err := otelsalvage.TracerProviderFromEnv(ctx, "salvage"); tp != nil || err != nil {
		t.Fatalf("without an endpoint: %v, %v", tp, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, err := otelsalvage.TracerProviderFromEnv(ctx, "salvage"); !errors.Is(err, salvage.ErrInvalidConfig) || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc") {
		t.Fatalf("grpc: %v", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	tp, err := otelsalvage.TracerProviderFromEnv(ctx, "salvage")
	if err != nil || tp == nil {
		t.Fatalf("http/protobuf: %v, %v", tp, err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
