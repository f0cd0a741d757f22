package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// tracerProviderFromEnv builds the daemon's tracer provider from the
// standard OpenTelemetry environment, or returns nil (and the daemon
// traces nothing, at no cost) when neither OTEL_EXPORTER_OTLP_ENDPOINT nor
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. Spans go over OTLP/HTTP with
// protobuf (the exporter reads the OTEL_EXPORTER_OTLP_* variables: the
// endpoint, headers, timeout, compression, certificates), in batches (the
// OTEL_BSP_* variables; by default every 5s), sampled as
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG say (by default every
// trace, or as the caller's traceparent decided), from a service named by
// OTEL_SERVICE_NAME (default "batchd") with OTEL_RESOURCE_ATTRIBUTES.
// Another OTEL_EXPORTER_OTLP_PROTOCOL than http/protobuf is an error.
// The SDK's own errors (an export that failed, say) are logged to log at
// WARN. The caller shuts the provider down after the daemon, which
// exports the spans still buffered.
func tracerProviderFromEnv(ctx context.Context, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(os.Getenv(v)); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("daemon: %s=%q: batchd exports traces over http/protobuf only", v, p)
			}
			break // the traces variable wins
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("daemon: OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("batchd")),
		resource.Environment(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("daemon: trace resource: %w", err)
	}
	if log != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.LogAttrs(context.Background(), slog.LevelWarn, "opentelemetry error", slog.String("err", err.Error()))
		}))
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
