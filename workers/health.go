package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/host"
	"github.com/roundhouse-rl/roundhouse/internal/store"
)

// Probe timing. Kubelet and Compose probe every few seconds, from every
// replica: caching keeps a fleet of workers from turning probes into load on
// Temporal and S3, and the timeout keeps a hung dependency from hanging the
// probe (probe timeouts in deploy/ are longer than checkTimeout).
const (
	readyTTL     = 5 * time.Second
	checkTimeout = 3 * time.Second
)

// readyCheck is one dependency the worker needs before it can take work.
type readyCheck struct {
	name string
	fn   func(context.Context) error
}

// health is what the worker's probes report: live while its SDK workers run,
// ready while it is live and every check passes.
type health struct {
	mu      sync.Mutex
	running bool
	fatal   error

	checks  []readyCheck
	ttl     time.Duration
	timeout time.Duration
	now     func() time.Time

	evalMu  sync.Mutex // one evaluation at a time; waiting probes reuse its result
	checked time.Time
	results []error // per check, from the last evaluation
}

func newHealth() *health {
	return &health{ttl: readyTTL, timeout: checkTimeout, now: time.Now}
}

// started marks the SDK workers as running.
func (h *health) started() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = true
}

// onFatal is the SDK workers' OnFatalError: the SDK stops a worker after a
// fatal error (a deleted namespace, a rejected API key) while the process
// goes on, so liveness must say so for the orchestrator to restart it.
func (h *health) onFatal(err error) {
	slog.Error("worker stopped on a fatal error", "error", err)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fatal == nil {
		h.fatal = err
	}
}

// live is nil while the workers run.
func (h *health) live() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.fatal != nil:
		return fmt.Errorf("a worker stopped on a fatal error: %w", h.fatal)
	case !h.running:
		return errors.New("workers not started yet")
	}
	return nil
}

// ready runs the checks, at most once per ttl, each under the timeout and all
// at once, and returns their results in order.
func (h *health) ready(ctx context.Context) []error {
	h.evalMu.Lock()
	defer h.evalMu.Unlock()
	if h.results != nil && h.now().Sub(h.checked) < h.ttl {
		return h.results
	}
	results := make([]error, len(h.checks))
	var wg sync.WaitGroup
	for i, c := range h.checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, h.timeout)
			defer cancel()
			results[i] = c.fn(cctx)
		}()
	}
	wg.Wait()
	// A probe whose own request was canceled learned nothing about the
	// dependencies: do not cache that.
	if ctx.Err() == nil {
		h.results, h.checked = results, h.now()
	}
	return results
}

func (h *health) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		if err := h.live(); err != nil {
			reply(w, http.StatusServiceUnavailable, "not live: "+err.Error()+"\n")
			return
		}
		reply(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := h.live(); err != nil {
			reply(w, http.StatusServiceUnavailable, "not ready: "+err.Error()+"\n")
			return
		}
		var b strings.Builder
		failed := false
		for i, err := range h.ready(r.Context()) {
			if err != nil {
				failed = true
				fmt.Fprintf(&b, "%s: %s\n", h.checks[i].name, strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				fmt.Fprintf(&b, "%s: ok\n", h.checks[i].name)
			}
		}
		if failed {
			reply(w, http.StatusServiceUnavailable, "not ready\n"+b.String())
			return
		}
		reply(w, http.StatusOK, "ok\n"+b.String())
	})
	return mux
}

func reply(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// healthAddr binds a bare port (":8080" or "8080") to loopback: probes from
// inside the container or host need no more, and exposing the endpoint on
// every interface (0.0.0.0:8080, as Kubernetes' kubelet needs) is a choice
// the operator writes out.
func healthAddr(addr string) string {
	if !strings.Contains(addr, ":") {
		return "127.0.0.1:" + addr
	}
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}

// serveHealth serves /livez and /readyz on addr until ctx ends, with checks
// as the readiness conditions; an empty addr serves nothing. It returns the
// address it listens on.
func serveHealth(ctx context.Context, addr string, h *health, checks []readyCheck) (net.Addr, error) {
	if addr == "" {
		return nil, nil
	}
	h.checks = checks
	ln, err := net.Listen("tcp", healthAddr(addr))
	if err != nil {
		return nil, fmt.Errorf("health endpoint on %s (choose another --health-listen): %w", addr, err)
	}
	srv := &http.Server{Handler: h.handler(), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("health endpoint stopped", "error", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	slog.Info("health endpoint listening", "addr", ln.Addr().String(), "paths", "/livez /readyz")
	return ln.Addr(), nil
}

// readyChecks are the worker's dependencies: Temporal, the bucket, and on a
// rollout host the recording proxy the episodes talk through.
func readyChecks(c client.Client, s *store.Store, rollout *host.Host) []readyCheck {
	checks := []readyCheck{
		// GetSystemInfo rather than CheckHealth: it is the call the SDK
		// itself makes when it connects, authenticated like every other
		// call; CheckHealth uses the gRPC health service, which has broken
		// against Temporal Cloud before (sdk-go#2426) while work went on.
		{"temporal", func(ctx context.Context) error {
			if _, err := c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{}); err != nil {
				return fmt.Errorf("Temporal not reachable: %w", err)
			}
			return nil
		}},
		{"s3", s.Check},
	}
	if rollout != nil {
		checks = append(checks, readyCheck{"proxy", dialCheck("recording proxy", rollout.ProxyAddr)})
	}
	return checks
}

// dialCheck passes while something accepts TCP connections on addr.
func dialCheck(what, addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("%s on %s not listening: %w", what, addr, err)
		}
		return conn.Close()
	}
}
