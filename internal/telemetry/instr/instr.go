// Package instr holds what Roundhouse records with: the tracer of its own
// spans and every metric instrument, created once from the global
// OpenTelemetry providers. It depends on the OpenTelemetry API only, so
// the proxy, store and subprocess packages stay light; package telemetry
// installs the SDK and its exporters. Until it does (or when nothing is
// configured) every call here is a no-op that costs an atomic load.
package instr

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// Scope names the instrumentation scope of Roundhouse's spans and metrics.
const Scope = "roundhouse"

// Tracer starts Roundhouse's own spans (model.call, s3.*, proc.run, …).
// The global tracer follows whatever provider is installed later.
var Tracer = otel.Tracer(Scope)

// Metric names, for dashboards and tests.
const (
	EpisodesStarted  = "roundhouse.episodes.started"
	EpisodesFinished = "roundhouse.episodes.finished"
	RoundSuccessRate = "roundhouse.round.success_rate"
	ProxyCalls       = "roundhouse.proxy.calls"
	ProxyLatency     = "roundhouse.proxy.latency"
	S3BytesWritten   = "roundhouse.s3.bytes_written"
	S3BytesRead      = "roundhouse.s3.bytes_read"
	TrainerStepTime  = "roundhouse.trainer.step_time"
	ServiceRestarts  = "roundhouse.services.restarts"
	ModelLoads       = "roundhouse.model.loads"
	ModelLoadTime    = "roundhouse.model.load_time"
	ModelIdleTime    = "roundhouse.model.idle_time"
	ModelWaitingNow  = "roundhouse.model.waiting"
)

// Outcomes of a finished episode (the outcome attribute).
const (
	OutcomeSuccess = "success"
	OutcomeFailure = "failure"
	OutcomeInvalid = "invalid"
)

var (
	meter = otel.Meter(Scope)

	episodesStarted = counter(EpisodesStarted, "{episode}",
		"Episode tries started on a rollout host (a retried episode counts each try), by phase.")
	episodesFinished = counter(EpisodesFinished, "{episode}",
		"Episodes whose records were stored, by phase, outcome (success, failure, invalid) and failure_class.")
	roundSuccess = gauge(RoundSuccessRate, "1",
		"Success rate over the valid episodes of a round's phase: collection when its batch is built, validation when its report is written.")
	proxyCalls = counter(ProxyCalls, "{call}",
		"Chat completions recorded by the proxy, by HTTP status class and trainable.")
	proxyLatency = histogram(ProxyLatency, "s",
		"Latency of a recorded chat completion through the proxy, request to last byte.",
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
	s3Written = counter(S3BytesWritten, "By", "Object bytes uploaded to S3.")
	s3Read    = counter(S3BytesRead, "By", "Object bytes downloaded from S3, ranged reads included.")
	stepTime  = histogram(TrainerStepTime, "s",
		"Wall time per trainer optimizer step, from its 'step i/n' progress lines, averaged over each heartbeat in which steps advanced.",
		0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
	modelLoads = counter(ModelLoads, "{load}",
		"Model-server starts on a rollout host for an episode's weights, by ok (ready or not).")
	modelLoadTime = histogram(ModelLoadTime, "s",
		"Time to fetch an episode's weights and start the model server until ready (or failed).",
		0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200)
	modelIdle = fcounter(ModelIdleTime, "s",
		"Time a rollout host's model server was loaded and no episode used it.")
	modelWaiting = updown(ModelWaitingNow, "{episode}",
		"Episodes on a rollout host waiting for its model slot, busy with other weights.")
	restarts = counter(ServiceRestarts, "{restart}",
		"Host services restarted by a rollout worker, by service and reason (exited, or new weights for the model server).")
)

func counter(name, unit, desc string) metric.Int64Counter {
	c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		otel.Handle(err)
		return noop.Int64Counter{}
	}
	return c
}

func fcounter(name, unit, desc string) metric.Float64Counter {
	c, err := meter.Float64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		otel.Handle(err)
		return noop.Float64Counter{}
	}
	return c
}

func updown(name, unit, desc string) metric.Int64UpDownCounter {
	c, err := meter.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		otel.Handle(err)
		return noop.Int64UpDownCounter{}
	}
	return c
}

func gauge(name, unit, desc string) metric.Float64Gauge {
	g, err := meter.Float64Gauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		otel.Handle(err)
		return noop.Float64Gauge{}
	}
	return g
}

func histogram(name, unit, desc string, bounds ...float64) metric.Float64Histogram {
	h, err := meter.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(bounds...))
	if err != nil {
		otel.Handle(err)
		return noop.Float64Histogram{}
	}
	return h
}

// EpisodeStarted counts a try of an episode that starts running.
func EpisodeStarted(ctx context.Context, phase string) {
	episodesStarted.Add(ctx, 1, metric.WithAttributes(attribute.String("phase", phase)))
}

// Outcome names an episode's outcome: invalid episodes say nothing about
// the policy, valid ones succeeded or failed.
func Outcome(valid, success bool) string {
	switch {
	case !valid:
		return OutcomeInvalid
	case success:
		return OutcomeSuccess
	}
	return OutcomeFailure
}

// EpisodeFinished counts an episode whose records are stored.
func EpisodeFinished(ctx context.Context, phase string, valid, success bool, failureClass string) {
	episodesFinished.Add(ctx, 1, metric.WithAttributes(attribute.String("phase", phase),
		attribute.String("outcome", Outcome(valid, success)), attribute.String("failure_class", failureClass)))
}

// RoundSuccess records the success rate of a round's phase.
func RoundSuccess(ctx context.Context, run string, round int32, phase string, rate float64) {
	roundSuccess.Record(ctx, rate, metric.WithAttributes(attribute.String("run", run),
		attribute.Int("round", int(round)), attribute.String("phase", phase)))
}

// statusClasses name HTTP status classes; index status/100, 0 for none.
var statusClasses = [...]string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}

// The proxy's attribute sets are few, so they are built once, as the
// variadic slices themselves: recording a call then allocates nothing.
var (
	callOpts    [len(statusClasses)][2][]metric.AddOption
	latencyOpts [len(statusClasses)][2][]metric.RecordOption
)

func init() {
	for i, class := range statusClasses {
		for j, trainable := range []bool{false, true} {
			set := attribute.NewSet(attribute.String("status", class), attribute.Bool("trainable", trainable))
			callOpts[i][j] = []metric.AddOption{metric.WithAttributeSet(set)}
			latencyOpts[i][j] = []metric.RecordOption{metric.WithAttributeSet(set)}
		}
	}
}

// StatusClass is the class of an HTTP status ("2xx"), "none" for 0 or
// a status outside 100-599.
func StatusClass(status int) string { return statusClasses[statusIndex(status)] }

func statusIndex(status int) int {
	if status < 100 || status >= 600 {
		return 0
	}
	return status / 100
}

// ProxyCall records a completed chat completion through the proxy.
func ProxyCall(ctx context.Context, status int, trainable bool, latency time.Duration) {
	i, j := statusIndex(status), 0
	if trainable {
		j = 1
	}
	proxyCalls.Add(ctx, 1, callOpts[i][j]...)
	proxyLatency.Record(ctx, latency.Seconds(), latencyOpts[i][j]...)
}

// S3Written counts uploaded bytes.
func S3Written(ctx context.Context, n int64) { s3Written.Add(ctx, n) }

// S3Read counts downloaded bytes.
func S3Read(ctx context.Context, n int64) { s3Read.Add(ctx, n) }

// TrainerStep records the wall time of one trainer step.
func TrainerStep(ctx context.Context, d time.Duration) { stepTime.Record(ctx, d.Seconds()) }

// ServiceRestart counts a host service restarted (reason "exited" or
// "weights").
func ServiceRestart(ctx context.Context, service, reason string) {
	restarts.Add(ctx, 1, metric.WithAttributes(attribute.String("service", service), attribute.String("reason", reason)))
}

// ModelLoad records a model-server start that became ready (ok) or not,
// and how long it took.
func ModelLoad(ctx context.Context, ok bool, d time.Duration) {
	o := metric.WithAttributes(attribute.Bool("ok", ok))
	modelLoads.Add(ctx, 1, o)
	modelLoadTime.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.Bool("ok", ok)))
}

// ModelIdle adds a stretch of a loaded, unused model server.
func ModelIdle(ctx context.Context, d time.Duration) { modelIdle.Add(ctx, d.Seconds()) }

// ModelWaiting counts an episode starting (+1) or ending (-1) a wait for
// the model slot.
func ModelWaiting(ctx context.Context, delta int64) { modelWaiting.Add(ctx, delta) }

// End ends a span, marking it failed when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
