package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ReadyLine starts the line a service prints once it accepts calls, as
// RPent's services do: "RPC server listening on http://HOST:PORT".
const ReadyLine = "RPC server listening on "

// Components are the services the stand-in can be.
var Components = map[string]string{
	"env":  "", // LIBERO environment server (robots.libero.env_server)
	"vla":  "PI05_CHECKPOINT_PATH",
	"sam3": "SAM3_CHECKPOINT_PATH",
}

// Service answers POST /call for one component.
type Service struct {
	Component string
	// FailEvery makes every n-th method call (healthz and stats excepted)
	// fail with HTTP 500, as a crashed model or CUDA error would; 0: never.
	FailEvery int
	// Loading makes healthz answer 503 forever: a service never ready.
	Loading bool
	Env     *Env // the env component's environment

	mu     sync.Mutex
	calls  int
	errors int
	byName map[string]int
}

type callRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// Handler serves POST /call.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /call", s.call)
	return mux
}

func writeReply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the caller went away; nothing to do
}

func fail(w http.ResponseWriter, status int, format string, args ...any) {
	writeReply(w, status, map[string]any{"ok": false, "error": fmt.Sprintf(format, args...)})
}

func (s *Service) call(w http.ResponseWriter, r *http.Request) {
	var req callRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.Method == "" {
		fail(w, http.StatusBadRequest, "%s: body must be {\"method\": …, \"params\": …}: %v", s.Component, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch req.Method {
	case "healthz":
		if s.Loading {
			fail(w, http.StatusServiceUnavailable, "%s: still loading", s.Component)
			return
		}
		writeReply(w, http.StatusOK, map[string]any{"ok": true, "component": s.Component, "calls": s.calls})
		return
	case "stats":
		writeReply(w, http.StatusOK, map[string]any{"ok": true, "result": map[string]any{"calls": s.calls, "errors": s.errors, "methods": s.byName}})
		return
	}
	s.calls++
	if s.byName == nil {
		s.byName = map[string]int{}
	}
	s.byName[req.Method]++
	if s.FailEvery > 0 && s.calls%s.FailEvery == 0 {
		s.errors++
		fail(w, http.StatusInternalServerError, "%s: injected failure on call %d (stand-in --fail-calls-every %d)", s.Component, s.calls, s.FailEvery)
		return
	}
	result, err := s.dispatch(req)
	if err != nil {
		s.errors++
		fail(w, http.StatusBadRequest, "%s %s: %v", s.Component, req.Method, err)
		return
	}
	writeReply(w, http.StatusOK, map[string]any{"ok": true, "result": result})
}

func (s *Service) dispatch(req callRequest) (any, error) {
	decode := func(v any) error {
		if len(req.Params) == 0 {
			return errors.New("params missing")
		}
		return json.Unmarshal(req.Params, v)
	}
	switch s.Component + "." + req.Method {
	case "env.reset":
		e := NewEnv(s.Env.Suite, s.Env.Task, s.Env.Seed, s.Env.MaxSteps)
		s.Env = e
		return map[string]any{"suite": e.Suite, "task": e.Task, "seed": e.Seed, "instruction": e.Instruction(),
			"max_episode_steps": e.MaxSteps, "observation": map[string]any{"agentview_image": e.Observation()}}, nil
	case "env.step":
		var p struct {
			Actions [][]float64 `json:"actions"`
		}
		if err := decode(&p); err != nil {
			return nil, err
		}
		res, err := s.Env.Step(p.Actions)
		if err != nil {
			return nil, err
		}
		return map[string]any{"step": res, "observation": map[string]any{"agentview_image": s.Env.Observation()}}, nil
	case "vla.predict_action":
		var p struct {
			Instruction string `json:"instruction"`
		}
		if err := decode(&p); err != nil {
			return nil, err
		}
		if strings.TrimSpace(p.Instruction) == "" {
			return nil, errors.New("empty instruction")
		}
		return map[string]any{"actions": ChunkFor(p.Instruction)}, nil
	case "sam3.segment":
		var p struct {
			Text string `json:"text"`
		}
		if err := decode(&p); err != nil {
			return nil, err
		}
		h := hash("sam3", p.Text)
		x, y := float64(h%200), float64((h>>8)%200)
		return map[string]any{"boxes": [][]float64{{x, y, x + 24, y + 24}}, "scores": []float64{0.5 + float64(h%50)/100}, "labels": []string{p.Text}}, nil
	}
	return nil, fmt.Errorf("unknown method %q", req.Method)
}

// ServeConfig starts one stand-in service.
type ServeConfig struct {
	Component  string
	Host       string
	Port       int // 0 picks a free port (the ready line names it)
	Suite      string
	Task, Seed int
	MaxSteps   int
	// FailStart: "" starts normally; "exit" fails while loading and exits;
	// "never-ready" keeps running but never prints the ready line and
	// answers healthz with 503.
	FailStart  string
	ReadyDelay time.Duration // model loading time before it listens
	FailEvery  int
}

// Serve runs the service until ctx ends. It returns an error when it cannot
// start, as a real service exits non-zero when its checkpoint will not load.
func Serve(ctx context.Context, cfg ServeConfig, stdout io.Writer) error {
	envVar, ok := Components[cfg.Component]
	if !ok {
		return fmt.Errorf("component %q: use env, vla or sam3", cfg.Component)
	}
	fmt.Fprintf(stdout, "%s: loading (stand-in)\n", cfg.Component)
	if envVar != "" {
		if p := os.Getenv(envVar); p != "" {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("%s: checkpoint %s=%s: %w", cfg.Component, envVar, p, err)
			}
		}
	}
	switch cfg.FailStart {
	case "", "never-ready":
	case "exit":
		return fmt.Errorf("%s: failed while loading (stand-in fail-start=exit)", cfg.Component)
	default:
		return fmt.Errorf("fail-start %q: use exit or never-ready", cfg.FailStart)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(cfg.ReadyDelay):
	}
	svc := &Service{Component: cfg.Component, FailEvery: cfg.FailEvery, Loading: cfg.FailStart == "never-ready"}
	if cfg.Component == "env" {
		if cfg.MaxSteps < 1 {
			return fmt.Errorf("env: --max-episode-steps %d must be positive", cfg.MaxSteps)
		}
		svc.Env = NewEnv(cfg.Suite, cfg.Task, cfg.Seed, cfg.MaxSteps)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fmt.Errorf("%s: listen: %w", cfg.Component, err)
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if !svc.Loading {
		fmt.Fprintf(stdout, "%shttp://%s\n", ReadyLine, ln.Addr())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("%s: serve: %w", cfg.Component, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("%s: shutdown: %w", cfg.Component, err)
	}
	return nil
}

// Client calls a service's POST /call.
type Client struct {
	Name string // for error messages: env, vla, sam3
	URL  string // http://host:port
	HTTP *http.Client
}

// Call invokes method and decodes the result into out (if not nil).
func (c *Client) Call(ctx context.Context, method string, params, out any) error {
	body, err := json.Marshal(map[string]any{"method": method, "params": params})
	if err != nil {
		return fmt.Errorf("%s %s: encode: %w", c.Name, method, err)
	}
	url := strings.TrimSuffix(c.URL, "/") + "/call"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.Name, method, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.Name, method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read reply: %w", c.Name, method, err)
	}
	var reply struct {
		OK     bool            `json:"ok"`
		Error  string          `json:"error"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(b, &reply); err != nil {
		return fmt.Errorf("%s %s: %s: reply is not JSON: %.200s", c.Name, method, resp.Status, b)
	}
	if resp.StatusCode/100 != 2 || !reply.OK {
		return fmt.Errorf("%s %s: %s: %s", c.Name, method, resp.Status, reply.Error)
	}
	if out != nil {
		if err := json.Unmarshal(reply.Result, out); err != nil {
			return fmt.Errorf("%s %s: decode result: %w", c.Name, method, err)
		}
	}
	return nil
}

// ParseEndpoint turns RPent's [protocol://]HOST:PORT into an http:// URL.
// The stand-in speaks HTTP only; socket:// is refused rather than ignored.
func ParseEndpoint(s string) (string, error) {
	proto, rest, found := strings.Cut(s, "://")
	if !found {
		proto, rest = "http", s
	}
	if proto != "http" {
		return "", fmt.Errorf("endpoint %q: the stand-in speaks http only", s)
	}
	rest = strings.TrimSuffix(rest, "/")
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" || port == "" {
		return "", fmt.Errorf("endpoint %q: want [http://]HOST:PORT", s)
	}
	return "http://" + rest, nil
}
