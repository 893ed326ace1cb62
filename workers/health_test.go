package workers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
)

// get asks h for path and returns the status and body.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// fakeClock is a settable now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// switchable is a check whose result the test sets, counting its calls.
type switchable struct {
	err   atomic.Pointer[error]
	calls atomic.Int32
}

func (s *switchable) set(err error) { s.err.Store(&err) }
func (s *switchable) fn(context.Context) error {
	s.calls.Add(1)
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

func TestLivez(t *testing.T) {
	h := newHealth()
	code, body := get(t, h.handler(), "/livez")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not started") {
		t.Fatalf("before start: %d %q, want 503 naming the workers not started", code, body)
	}
	h.started()
	if code, body := get(t, h.handler(), "/livez"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("running: %d %q, want 200 ok", code, body)
	}
	h.onFatal(errors.New("namespace roundhouse not found"))
	h.onFatal(errors.New("a second fatal error")) // the first cause is the one to report
	code, body = get(t, h.handler(), "/livez")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "fatal error: namespace roundhouse not found") {
		t.Fatalf("after a fatal error: %d %q, want 503 with the first cause", code, body)
	}
	// A worker that cannot poll is not ready either, whatever its dependencies say.
	if code, body := get(t, h.handler(), "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "namespace roundhouse not found") {
		t.Fatalf("readyz after a fatal error: %d %q, want 503", code, body)
	}
}

func TestReadyz(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	h := newHealth()
	h.now = clock.now
	temporal, s3, proxy := &switchable{}, &switchable{}, &switchable{}
	h.checks = []readyCheck{{"temporal", temporal.fn}, {"s3", s3.fn}, {"proxy", proxy.fn}}

	if code, body := get(t, h.handler(), "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not started") {
		t.Fatalf("before start: %d %q, want 503", code, body)
	}
	h.started()
	code, body := get(t, h.handler(), "/readyz")
	if code != http.StatusOK || body != "ok\ntemporal: ok\ns3: ok\nproxy: ok\n" {
		t.Fatalf("all checks pass: %d %q", code, body)
	}

	// Within the TTL the cached answer stands: probes from many replicas
	// must not each become calls to Temporal and S3.
	s3.set(errors.New("S3 bucket \"roundhouse\" at http://s3:7070 is not reachable:\nconnection refused"))
	if code, _ := get(t, h.handler(), "/readyz"); code != http.StatusOK {
		t.Fatalf("within the TTL: %d, want the cached 200", code)
	}
	if n := s3.calls.Load(); n != 1 {
		t.Fatalf("s3 check ran %d times within the TTL, want 1", n)
	}

	clock.add(readyTTL)
	code, body = get(t, h.handler(), "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("s3 down after the TTL: %d %q, want 503", code, body)
	}
	// The reason names the check and its cause, on one line.
	if !strings.Contains(body, "s3: S3 bucket \"roundhouse\" at http://s3:7070 is not reachable: connection refused\n") ||
		!strings.Contains(body, "temporal: ok") || !strings.HasPrefix(body, "not ready\n") {
		t.Fatalf("body %q does not name the failing check and its cause", body)
	}

	s3.set(nil)
	proxy.set(errors.New("recording proxy on 127.0.0.1:1 not listening"))
	clock.add(readyTTL)
	if code, body := get(t, h.handler(), "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "proxy: recording proxy") || !strings.Contains(body, "s3: ok") {
		t.Fatalf("proxy down: %d %q", code, body)
	}
	proxy.set(nil)
	clock.add(readyTTL)
	if code, _ := get(t, h.handler(), "/readyz"); code != http.StatusOK {
		t.Fatalf("recovered: %d, want 200", code)
	}
}

// A hung dependency answers 503 within the timeout instead of hanging the probe.
func TestReadyzTimeout(t *testing.T) {
	h := newHealth()
	h.timeout = 50 * time.Millisecond
	h.checks = []readyCheck{
		{"temporal", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{"s3", func(context.Context) error { return nil }},
	}
	h.started()
	start := time.Now()
	code, body := get(t, h.handler(), "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "temporal: context deadline exceeded") || !strings.Contains(body, "s3: ok") {
		t.Fatalf("hung check: %d %q", code, body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("probe took %v with a 50ms check timeout", d)
	}
}

func TestHealthAddr(t *testing.T) {
	for in, want := range map[string]string{
		"8080": "127.0.0.1:8080", ":8080": "127.0.0.1:8080",
		"127.0.0.1:8080": "127.0.0.1:8080", "0.0.0.0:8080": "0.0.0.0:8080", "[::]:8080": "[::]:8080",
	} {
		if got := healthAddr(in); got != want {
			t.Errorf("healthAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// httpGet fetches url with a timeout.
func httpGet(url string) (int, string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestHealthRealServers runs Run's control and rollout roles against a real
// Temporal dev server and versitygw: ready with every check passing; then,
// given a bucket that does not exist, live but not ready, naming S3.
func TestHealthRealServers(t *testing.T) {
	st := itest.Start(t)
	c, err := client.Dial(client.Options{HostPort: st.Endpoints.Temporal, Namespace: st.Endpoints.Namespace,
		Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	missing := st.Endpoints.S3
	missing.Bucket = "no-such-bucket"
	bad, err := store.New(context.Background(), missing)
	if err != nil {
		t.Fatal(err)
	}

	run := func(s *store.Store, check func(base string)) {
		t.Helper()
		port := itest.Port(t)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			errc <- Run(ctx, c, s, Config{Roles: []string{"control", "rollout"}, Slots: 1, WorkDir: t.TempDir(),
				ProxyListen: "127.0.0.1:0", Namespace: st.Endpoints.Namespace, HealthListen: ":" + strconv.Itoa(port)})
		}()
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		deadline := time.Now().Add(time.Minute)
		for {
			code, _, err := httpGet(base + "/livez")
			if err == nil && code == http.StatusOK {
				break
			}
			select {
			case err := <-errc:
				t.Fatalf("Run returned before its workers were live: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("/livez not 200 within a minute: %d %v", code, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		check(base)
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Run did not return after its context ended")
		}
	}

	run(st.Store, func(base string) {
		code, body, err := httpGet(base + "/readyz")
		if err != nil || code != http.StatusOK || body != "ok\ntemporal: ok\ns3: ok\nproxy: ok\n" {
			t.Fatalf("/readyz with Temporal, S3 and the proxy up: %d %q %v", code, body, err)
		}
	})
	run(bad, func(base string) {
		code, body, err := httpGet(base + "/readyz")
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "s3: S3 bucket \"no-such-bucket\"") || !strings.Contains(body, "temporal: ok") {
			t.Fatalf("/readyz with a missing bucket: %d %q %v", code, body, err)
		}
	})
}

// serveHealth really listens, on loopback for a bare port, with the proxy
// check dialing a real listener, and stops when its context ends.
func TestServeHealth(t *testing.T) {
	if addr, err := serveHealth(context.Background(), "", newHealth(), nil); addr != nil || err != nil {
		t.Fatalf("empty address: %v %v, want nothing served", addr, err)
	}

	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxyLn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHealth()
	addr, err := serveHealth(ctx, ":0", h, []readyCheck{{"proxy", dialCheck("recording proxy", proxyLn.Addr().String())}})
	if err != nil {
		t.Fatal(err)
	}
	if ip := addr.(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Fatalf("bare port bound %v, want loopback", addr)
	}
	h.started()
	fetch := func(path string) (int, string, error) {
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + addr.String() + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	if code, body, err := fetch("/readyz"); err != nil || code != http.StatusOK || !strings.Contains(body, "proxy: ok") {
		t.Fatalf("readyz with the proxy listening: %d %q %v", code, body, err)
	}
	proxyLn.Close()
	h.results = nil // drop the cache (no other request is in flight)
	if code, body, err := fetch("/readyz"); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "proxy: recording proxy on "+proxyLn.Addr().String()+" not listening") {
		t.Fatalf("readyz with the proxy gone: %d %q %v", code, body, err)
	}
	if code, _, err := fetch("/nope"); err != nil || code != http.StatusNotFound {
		t.Fatalf("unknown path: %d %v", code, err)
	}

	// A second server on the same address fails with the flag to change.
	if _, err := serveHealth(ctx, addr.String(), newHealth(), nil); err == nil || !strings.Contains(err.Error(), "--health-listen") {
		t.Fatalf("address in use: %v, want an error naming --health-listen", err)
	}

	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, err := fetch("/livez"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("health endpoint still serving after its context ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
