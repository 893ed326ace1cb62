package proxy

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// startCall starts the "model.call" span of a recorded call as a child of
// its episode's span (parent): the request comes from the harness, whose
// context knows nothing of the episode activity that registered it. An
// episode without a span (tracing off, or the proxy used on its own) gets
// no call spans, and the call pays nothing for them.
func startCall(ctx context.Context, parent trace.SpanContext, start time.Time) (context.Context, trace.Span) {
	if !parent.IsValid() {
		return ctx, nil
	}
	ctx = trace.ContextWithSpanContext(ctx, parent)
	return instr.Tracer.Start(ctx, "model.call", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
}

// endCall records the call's metrics and ends its span (if any) with what
// the record says. Attributes are built only for a span that records: with
// no telemetry configured a call costs two no-op instrument calls.
func endCall(ctx context.Context, span trace.Span, rec *schemas.Call) {
	instr.ProxyCall(ctx, int(rec.HTTPStatus), rec.Trainable, time.Duration(rec.LatencyMS*float64(time.Millisecond)))
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("episode.id", rec.EpisodeID),
			attribute.Int("call.index", int(rec.CallIndex)),
			attribute.String("model", rec.Model),
			attribute.Int("tokens.prompt", int(rec.PromptTokens)),
			attribute.Int("tokens.completion", int(rec.CompletionTokens)),
			attribute.Float64("latency_ms", rec.LatencyMS),
			attribute.Int("http.response.status_code", int(rec.HTTPStatus)),
			attribute.Bool("trainable", rec.Trainable),
			attribute.Bool("stream", rec.Stream),
			attribute.String("finish_reason", rec.FinishReason),
		)
		if rec.Error != "" {
			span.SetStatus(codes.Error, rec.Error)
		}
	}
	span.End()
}
