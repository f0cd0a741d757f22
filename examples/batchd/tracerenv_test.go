package main

import (
	"strings"
	"testing"
)

// TestTracerProviderFromEnv: no endpoint, no provider (nothing exported,
// nothing paid); an endpoint makes one; a protocol batchd does not speak
// is refused, not ignored.
func TestTracerProviderFromEnv(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(v, "")
	}
	tp, err := tracerProviderFromEnv(t.Context(), nil)
	if tp != nil || err != nil {
		t.Fatalf("without an endpoint: %v, %v; want no provider", tp, err)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv(v, "http://127.0.0.1:1")
			tp, err := tracerProviderFromEnv(t.Context(), nil)
			if tp == nil || err != nil {
				t.Fatalf("with %s: %v, %v; want a provider", v, tp, err)
			}
			if err := tp.Shutdown(t.Context()); err != nil {
				t.Error(err)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
			if _, err := tracerProviderFromEnv(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "http/protobuf") {
				t.Errorf("with protocol grpc: %v, want an error", err)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf") // the traces variable wins
			tp, err = tracerProviderFromEnv(t.Context(), nil)
			if tp == nil || err != nil {
				t.Fatalf("with traces protocol http/protobuf: %v, %v", tp, err)
			}
			tp.Shutdown(t.Context())
		})
	}
}
