package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// clearEnv unsets every OTEL_* variable for the test (empty reads as unset
// to the SDK and to Setup).
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
		}
	}
}

// collector is an OTLP/HTTP endpoint that counts the requests per path.
type collector struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

func newCollector(t *testing.T) *collector {
	c := &collector{hits: map[string]int{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.hits[r.URL.Path]++
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits[path]
}

// export records a span and a counter through the providers and flushes.
func export(t *testing.T, service string) (traces, metrics bool) {
	t.Helper()
	ctx := context.Background()
	tp, mp, err := providers(ctx, service)
	if err != nil {
		t.Fatal(err)
	}
	if tp != nil {
		_, span := tp.Tracer("test").Start(ctx, "probe")
		span.End()
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatalf("trace flush: %v", err)
		}
	}
	if mp != nil {
		cnt, err := mp.Meter("test").Int64Counter("probe")
		if err != nil {
			t.Fatal(err)
		}
		cnt.Add(ctx, 1)
		if err := mp.Shutdown(ctx); err != nil {
			t.Fatalf("metric flush: %v", err)
		}
	}
	return tp != nil, mp != nil
}

func TestNothingExportedByDefault(t *testing.T) {
	clearEnv(t)
	if traces, metrics := export(t, "roundhouse-test"); traces || metrics {
		t.Fatalf("no OTEL_* variable set, yet exporting traces=%v metrics=%v", traces, metrics)
	}
	shutdown, err := Setup(context.Background(), "roundhouse-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_SERVICE_NAME", "svc") // not an exporter variable
	if traces, metrics := export(t, "roundhouse-test"); traces || metrics {
		t.Fatalf("OTEL_SERVICE_NAME alone exports traces=%v metrics=%v", traces, metrics)
	}
}

func TestOTLPHTTP(t *testing.T) {
	clearEnv(t)
	c := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	if traces, metrics := export(t, "roundhouse-test"); !traces || !metrics {
		t.Fatalf("endpoint set, yet exporting traces=%v metrics=%v", traces, metrics)
	}
	if c.count("/v1/traces") == 0 || c.count("/v1/metrics") == 0 {
		t.Fatalf("collector got %v, want /v1/traces and /v1/metrics", c.hits)
	}
}

func TestNoneExporters(t *testing.T) {
	clearEnv(t)
	c := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.srv.URL)
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	if traces, metrics := export(t, "roundhouse-test"); traces || metrics {
		t.Fatalf("both exporters none, yet exporting traces=%v metrics=%v", traces, metrics)
	}
	t.Setenv("OTEL_METRICS_EXPORTER", "")
	if traces, metrics := export(t, "roundhouse-test"); traces || !metrics {
		t.Fatalf("traces none: exporting traces=%v metrics=%v, want metrics only", traces, metrics)
	}
	if c.count("/v1/traces") != 0 || c.count("/v1/metrics") == 0 {
		t.Fatalf("collector got %v, want /v1/metrics only", c.hits)
	}
}

func TestSignalEndpoint(t *testing.T) {
	clearEnv(t)
	c := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.srv.URL+"/v1/traces")
	if traces, metrics := export(t, "roundhouse-test"); !traces || metrics {
		t.Fatalf("traces endpoint only: exporting traces=%v metrics=%v", traces, metrics)
	}
	if c.count("/v1/traces") == 0 {
		t.Fatalf("collector got %v", c.hits)
	}
}

func TestBadProtocol(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
	if _, err := Setup(context.Background(), "roundhouse-test"); err == nil {
		t.Fatal("Setup accepted OTEL_EXPORTER_OTLP_PROTOCOL=carrier-pigeon")
	}
}

// TestGRPCShutdownBounded: an unreachable gRPC collector delays exit by the
// shutdown timeout at most.
func TestGRPCShutdownBounded(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	tp, mp, err := providers(context.Background(), "roundhouse-test")
	if err != nil || tp == nil || mp == nil {
		t.Fatalf("grpc: providers %v %v, %v", tp, mp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "probe")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_ = tp.Shutdown(ctx) // fails: nothing listens
	_ = mp.Shutdown(ctx)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
}

func TestResource(t *testing.T) {
	clearEnv(t)
	ctx := context.Background()
	get := func(service, key string) string {
		t.Helper()
		res, err := newResource(ctx, service)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range res.Attributes() {
			if string(kv.Key) == key {
				return kv.Value.Emit()
			}
		}
		return ""
	}
	if got := get("roundhouse-worker", "service.name"); got != "roundhouse-worker" {
		t.Errorf("service.name = %q", got)
	}
	if got := get("roundhouse-worker", "service.version"); got == "" {
		t.Error("no service.version")
	}
	t.Setenv("OTEL_SERVICE_NAME", "rollout-a")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=ci")
	if got := get("roundhouse-worker", "service.name"); got != "rollout-a" {
		t.Errorf("service.name = %q, want OTEL_SERVICE_NAME's", got)
	}
	if got := get("roundhouse-worker", "deployment.environment.name"); got != "ci" {
		t.Errorf("OTEL_RESOURCE_ATTRIBUTES ignored: %q", got)
	}
}

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env            map[string]string
		traces, metric bool
	}{
		{nil, false, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, false, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "none"}, true, false},
	} {
		clearEnv(t)
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		if Enabled("TRACES") != c.traces || Enabled("METRICS") != c.metric {
			t.Errorf("%v: traces %v metrics %v, want %v %v", c.env, Enabled("TRACES"), Enabled("METRICS"), c.traces, c.metric)
		}
	}
}
