package workers_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workers"
	"github.com/roundhouse-rl/roundhouse/workflows"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// The SDK's in-memory exporters, installed as the global providers once
// per test binary: the global providers delegate to the first ones set.
var (
	memOnce  sync.Once
	spans    *tracetest.InMemoryExporter
	reader   *sdkmetric.ManualReader
	memSetup = func() {
		spans = tracetest.NewInMemoryExporter()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
		// Delta: each Collect returns what happened since the last one.
		reader = sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(
			func(sdkmetric.InstrumentKind) metricdata.Temporality { return metricdata.DeltaTemporality }))
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	}
)

// TestRoundTelemetry runs a real round of the minimal harness in process
// (validation, collection, advantages, training) against a real Temporal
// server and S3, with the workers and the client on in-memory telemetry,
// and checks the spans and metrics it leaves: one trace from the client's
// StartWorkflow through workflows, activities, episodes, model calls, S3
// and subprocesses, and the round's counts in the metrics.
func TestRoundTelemetry(t *testing.T) {
	stack := itest.Start(t)
	bins := itest.Build(t, "./harnesses/minimal/cmd/...")
	root := itest.Root(t)
	memOnce.Do(memSetup)
	spans.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil { // the baseline of the deltas
		t.Fatal(err)
	}

	quiet := tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	c, err := connect.Temporal(ctx, stack.Endpoints, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wctx, stopWorkers := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- workers.Run(wctx, c, stack.Store, workers.Config{Roles: []string{"control", "rollout", "train"}, Slots: 4,
			WorkDir: filepath.Join(stack.Dir, "work"), ProxyListen: "127.0.0.1:0", Host: "itest", Namespace: "default"})
	}()
	defer func() {
		stopWorkers()
		if err := <-done; err != nil {
			t.Errorf("workers: %v", err)
		}
	}()

	// A small round: validation on 2 tasks × 2 init states, then 4 groups of
	// 6 attempts, whose mixed outcomes give the trainer samples. Both tasks
	// stay in the pool whatever validation says (a pool of the hard task
	// alone left every group without signal, and nothing to train, about
	// once in fifty runs).
	h, err := harness.Load(filepath.Join(root, "harnesses/minimal/harness.yaml"), map[string]string{"bin": bins})
	if err != nil {
		t.Fatal(err)
	}
	h.Tasks = h.Tasks[:2]
	h.Splits.Val = "45-46"
	h.Collect.FinalValidation, h.Collect.ValidateEveryRound = false, false
	h.Collect.PoolBand = [2]float64{-1, 2}
	const run, groups, attempts, val = "itest-otel", 4, 6, 4
	l := schemas.Layout{Run: run}
	files, err := weights.Dir(filepath.Join(root, "harnesses/minimal/weights/w0"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := weights.Publish(ctx, stack.Store, l.Weights("w0"), files, schemas.WeightsManifest{WeightsID: "w0"}); err != nil {
		t.Fatal(err)
	}
	hb, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := stack.Store.Put(ctx, l.Harness(), hb); err != nil {
		t.Fatal(err)
	}
	if err := api.RegisterSearchAttributes(ctx, c, "default"); err != nil {
		t.Fatal(err)
	}
	in := api.TrainInput{Run: run, Harness: h, InitialWeightsID: "w0", WeightsID: "w0", Rounds: 1,
		Groups: groups, Attempts: attempts, Round: 1, HeartbeatTimeout: 30 * time.Second}
	started := time.Now()
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: api.WorkflowID(run), TaskQueue: api.ControlQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(api.RunAttr.ValueSet(run), api.KindAttr.ValueSet("train"),
			api.RoundAttr.ValueSet(1), api.WeightsAttr.ValueSet("w0"))}, workflows.Train, in)
	if err != nil {
		t.Fatal(err)
	}
	var res api.TrainResult
	if err := wr.Get(ctx, &res); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	t.Logf("round took %s", time.Since(started).Round(time.Millisecond))
	if len(res.Summaries) != 1 {
		t.Fatalf("summaries %+v", res.Summaries)
	}
	sum := res.Summaries[0]
	if sum.Episodes != groups*attempts || sum.Invalid != 0 {
		t.Fatalf("summary: %d episodes (%d invalid), want %d valid", sum.Episodes, sum.Invalid, groups*attempts)
	}

	// Spans: one trace from StartWorkflow down to the model calls.
	all := spans.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	named := map[string][]tracetest.SpanStub{}
	for _, s := range all {
		byID[s.SpanContext.SpanID()] = s
		named[s.Name] = append(named[s.Name], s)
	}
	if len(named["StartWorkflow:Train"]) != 1 {
		t.Fatalf("want one StartWorkflow:Train span, got %d of %d spans", len(named["StartWorkflow:Train"]), len(all))
	}
	start := named["StartWorkflow:Train"][0]
	tid := start.SpanContext.TraceID()
	inTrace := 0
	for _, s := range all {
		if s.SpanContext.TraceID() != tid {
			continue
		}
		inTrace++
		// The trace is one tree: every span's parent was recorded too.
		if s.SpanContext.SpanID() != start.SpanContext.SpanID() {
			if _, ok := byID[s.Parent.SpanID()]; !ok {
				t.Errorf("span %s of the round's trace has no recorded parent", s.Name)
			}
		}
	}
	for _, name := range []string{"RunWorkflow:Train", "RunWorkflow:Episodes", "RunActivity:RunEpisode", "RunActivity:WriteReport",
		"RunActivity:BuildBatch", "RunActivity:Train", "episode", "model.call", "service.start", "s3.Put", "s3.PutFile", "s3.Get", "proc.run", "trainer"} {
		n := 0
		for _, s := range named[name] {
			if s.SpanContext.TraceID() == tid {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no %s span in the round's trace", name)
		}
	}
	t.Logf("%d spans, %d in the round's trace", len(all), inTrace)

	episodes := map[string]tracetest.SpanStub{}
	for _, s := range named["episode"] {
		episodes[attr(s, "episode.id").AsString()] = s
		if p := byID[s.Parent.SpanID()]; p.Name != "RunActivity:RunEpisode" {
			t.Errorf("episode %s: parent %q, want RunActivity:RunEpisode", attr(s, "episode.id").AsString(), p.Name)
		}
	}
	if len(episodes) != val+groups*attempts {
		t.Errorf("%d episode spans, want %d", len(episodes), val+groups*attempts)
	}
	calls := map[string]int64{}
	for _, s := range named["model.call"] {
		p, ok := byID[s.Parent.SpanID()]
		id := attr(s, "episode.id").AsString()
		if !ok || p.Name != "episode" || s.SpanContext.TraceID() != tid || attr(p, "episode.id").AsString() != id {
			t.Errorf("model.call of %s: parent %q (episode %s), want its episode span in the round's trace", id, p.Name, attr(p, "episode.id").AsString())
		}
		if attr(s, "http.response.status_code").AsInt64() != 200 || attr(s, "tokens.completion").AsInt64() <= 0 || !attr(s, "trainable").AsBool() {
			t.Errorf("model.call of %s: attributes %v", id, s.Attributes)
		}
		calls[id]++
	}
	for id, s := range episodes {
		if got, want := calls[id], attr(s, "episode.calls").AsInt64(); got != want || want == 0 {
			t.Errorf("episode %s: %d model.call spans, episode says %d calls", id, got, want)
		}
	}
	for _, s := range named["proc.run"] {
		p := byID[s.Parent.SpanID()]
		switch attr(s, "proc.name").AsString() {
		case "episode":
			if p.Name != "episode" {
				t.Errorf("episode subprocess under %q", p.Name)
			}
		case "trainer":
			if p.Name != "trainer" || attr(s, "process.exit.code").AsInt64() != 0 {
				t.Errorf("trainer subprocess under %q, exit %d", p.Name, attr(s, "process.exit.code").AsInt64())
			}
		}
	}
	// A try stages its calls (with their bytes), and publishing copies
	// them into the table: both in the round's trace.
	stored, published := false, false
	staged := l.Prefix() + "staged/round=1/phase=" + schemas.PhaseTrain + "/"
	for _, s := range named["s3.Put"] {
		if k := attr(s, "aws.s3.key").AsString(); strings.HasPrefix(k, staged) && strings.HasSuffix(k, "/calls.parquet") && s.SpanContext.TraceID() == tid {
			stored = stored || attr(s, "s3.bytes").AsInt64() > 0
		}
	}
	for _, s := range named["s3.Copy"] {
		if strings.HasPrefix(attr(s, "aws.s3.key").AsString(), l.CallsDir(1, schemas.PhaseTrain)) && s.SpanContext.TraceID() == tid {
			published = true
		}
	}
	if !stored || !published {
		t.Errorf("in the round's trace: a staged calls file put with its bytes %v, published into the table %v", stored, published)
	}

	// Metrics: the round's counts.
	rm = metricdata.ResourceMetrics{}
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	m := metrics(rm)
	finished := sumInt(t, m[instr.EpisodesFinished])
	if finished != val+groups*attempts {
		t.Errorf("%s = %d, want %d", instr.EpisodesFinished, finished, val+groups*attempts)
	}
	if n := sumInt(t, m[instr.EpisodesFinished], attribute.String("phase", schemas.PhaseTrain)); n != groups*attempts {
		t.Errorf("%s{phase=train} = %d, want %d", instr.EpisodesFinished, n, groups*attempts)
	}
	if n, want := sumInt(t, m[instr.EpisodesFinished], attribute.String("outcome", instr.OutcomeSuccess)), int64(sum.Successes)+successes(named["episode"], schemas.PhaseVal); n != want {
		t.Errorf("%s{outcome=success} = %d, want %d", instr.EpisodesFinished, n, want)
	}
	if n := sumInt(t, m[instr.EpisodesStarted]); n < finished {
		t.Errorf("%s = %d < %d finished", instr.EpisodesStarted, n, finished)
	}
	if n := sumInt(t, m[instr.ProxyCalls], attribute.String("status", "2xx")); n != int64(len(named["model.call"])) || n == 0 {
		t.Errorf("%s{status=2xx} = %d, want %d (the model.call spans)", instr.ProxyCalls, n, len(named["model.call"]))
	}
	if n := histCount(t, m[instr.ProxyLatency]); n != uint64(len(named["model.call"])) {
		t.Errorf("%s count = %d, want %d", instr.ProxyLatency, n, len(named["model.call"]))
	}
	for _, name := range []string{instr.S3BytesWritten, instr.S3BytesRead} {
		if n := sumInt(t, m[name]); n <= 0 {
			t.Errorf("%s = %d", name, n)
		}
	}
	if sum.Samples > 0 && histCount(t, m[instr.TrainerStepTime]) == 0 {
		t.Errorf("the trainer ran on %d samples but %s is empty", sum.Samples, instr.TrainerStepTime)
	}
	rates := map[string]float64{}
	if g, ok := m[instr.RoundSuccessRate].Data.(metricdata.Gauge[float64]); ok {
		for _, dp := range g.DataPoints {
			if r, _ := dp.Attributes.Value("run"); r.AsString() == run {
				p, _ := dp.Attributes.Value("phase")
				rates[p.AsString()] = dp.Value
			}
		}
	}
	if r, ok := rates[schemas.PhaseTrain]; !ok || r != sum.SuccessRate {
		t.Errorf("%s{phase=train} = %v (recorded %v), want %v", instr.RoundSuccessRate, r, ok, sum.SuccessRate)
	}
	if _, ok := rates[schemas.PhaseVal]; !ok {
		t.Errorf("%s{phase=val} not recorded: %v", instr.RoundSuccessRate, rates)
	}
}

// attr is a span's attribute (the zero Value when absent).
func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// successes counts the successful episode spans of a phase.
func successes(eps []tracetest.SpanStub, phase string) int64 {
	var n int64
	for _, s := range eps {
		if attr(s, "phase").AsString() == phase && attr(s, "episode.success").AsBool() {
			n++
		}
	}
	return n
}

// metrics indexes the collected metrics by name.
func metrics(rm metricdata.ResourceMetrics) map[string]metricdata.Metrics {
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sumInt adds a counter's data points, those with the attributes want.
func sumInt(t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Errorf("metric %q is %T, want an int64 sum", m.Name, m.Data)
		return 0
	}
	var n int64
	for _, dp := range s.DataPoints {
		match := true
		for _, kv := range want {
			if v, ok := dp.Attributes.Value(kv.Key); !ok || v != kv.Value {
				match = false
			}
		}
		if match {
			n += dp.Value
		}
	}
	return n
}

// histCount is how many values a histogram recorded.
func histCount(t *testing.T, m metricdata.Metrics) uint64 {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Errorf("metric %q is %T, want a float64 histogram", m.Name, m.Data)
		return 0
	}
	var n uint64
	for _, dp := range h.DataPoints {
		n += dp.Count
	}
	return n
}
