// Package telemetry is Roundhouse's OpenTelemetry: Setup installs the
// process's tracer and meter providers with the exporters the standard
// OTEL_* environment variables choose, and metrics.go holds every metric
// instrument. Nothing is exported unless an OTEL_* exporter variable is set:
// the global providers then stay the API's no-ops and nothing touches the
// network.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ShutdownTimeout bounds the final flush when the caller's context has no
// deadline: an unreachable collector must not hold a process at exit.
const ShutdownTimeout = 5 * time.Second

// Setup installs global TracerProvider and MeterProvider exporting over
// OTLP (or what OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER name), with a
// resource of service.name (OTEL_SERVICE_NAME overrides service),
// service.version and OTEL_RESOURCE_ATTRIBUTES. A signal is exported only
// when OTEL_<SIGNAL>_EXPORTER names an exporter other than none, or an
// OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or the signal's own) is set;
// OTEL_SDK_DISABLED=true turns both off. shutdown flushes and stops what
// was installed, within ShutdownTimeout unless ctx says otherwise; it is
// never nil.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	// Trace context crosses processes in W3C headers wherever we propagate
	// it (Temporal's interceptor has its own propagator with the same default).
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	tp, mp, err := providers(ctx, service)
	if err != nil {
		return func(context.Context) error { return nil }, err
	}
	if tp != nil {
		otel.SetTracerProvider(tp)
	}
	if mp != nil {
		otel.SetMeterProvider(mp)
	}
	return func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, ShutdownTimeout)
			defer cancel()
		}
		var errs []error
		if tp != nil {
			if err := tp.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("telemetry: flush traces: %w", err))
			}
		}
		if mp != nil {
			if err := mp.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("telemetry: flush metrics: %w", err))
			}
		}
		return errors.Join(errs...)
	}, nil
}

// providers builds the SDK providers the environment asks for; nil for a
// signal that is not exported.
func providers(ctx context.Context, service string) (*sdktrace.TracerProvider, *sdkmetric.MeterProvider, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil, nil
	}
	traces, metrics := Enabled("TRACES"), Enabled("METRICS")
	if !traces && !metrics {
		return nil, nil, nil
	}
	res, err := newResource(ctx, service)
	if err != nil {
		return nil, nil, err
	}
	var tp *sdktrace.TracerProvider
	if traces {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: trace exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			// The batcher and the sampler read OTEL_BSP_* and OTEL_TRACES_SAMPLER.
			tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		}
	}
	var mp *sdkmetric.MeterProvider
	if metrics {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			if tp != nil {
				_ = tp.Shutdown(ctx)
			}
			return nil, nil, fmt.Errorf("telemetry: metric exporter (OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
		}
		if !autoexport.IsNoneMetricReader(r) {
			// The periodic reader reads OTEL_METRIC_EXPORT_INTERVAL.
			mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r), sdkmetric.WithResource(res))
		}
	}
	return tp, mp, nil
}

// Enabled reports whether the environment asks to export a signal
// ("TRACES", "METRICS"): OTEL_<SIGNAL>_EXPORTER names an exporter other
// than none, or an OTLP endpoint for it is set. Unlike the SDK's own
// default (OTLP to localhost), an empty environment exports nothing.
func Enabled(signal string) bool {
	if v := strings.TrimSpace(os.Getenv("OTEL_" + signal + "_EXPORTER")); v != "" {
		return v != "none"
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

// newResource describes the process: service.name and service.version,
// then the SDK, host and pid; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// come last and so win.
func newResource(ctx context.Context, service string) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", Version())),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID(),
		resource.WithFromEnv())
	if err != nil {
		if res == nil {
			return nil, fmt.Errorf("telemetry: resource: %w", err)
		}
		// A partial resource (e.g. a malformed OTEL_RESOURCE_ATTRIBUTES
		// entry) still names the service: report it and go on.
		otel.Handle(fmt.Errorf("telemetry: resource: %w", err))
	}
	return res, nil
}

// Version is the build's module version, or its VCS revision for a build
// from a work tree ("dev" when neither is known).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "dev"
	}
	return rev[:min(12, len(rev))] + dirty
}
