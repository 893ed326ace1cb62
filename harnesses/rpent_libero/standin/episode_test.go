package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/server"
	"github.com/roundhouse-rl/roundhouse/internal/outcome"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

var rpentSpec = schemas.OutcomeSpec{Adapter: "rpent_libero"}

// toyModel serves harnesses/minimal's toy policy in process and records
// every request body it gets.
func toyModel(t *testing.T) (*httptest.Server, func() []map[string]any) {
	t.Helper()
	p, err := policy.Load("../../minimal/weights/w0/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	h := server.New(p, "toy", "w0").Handler()
	var mu sync.Mutex
	var reqs []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			b, _ := io.ReadAll(r.Body)
			var m map[string]any
			json.Unmarshal(b, &m)
			mu.Lock()
			reqs = append(reqs, m)
			mu.Unlock()
			r.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []map[string]any { mu.Lock(); defer mu.Unlock(); return append([]map[string]any(nil), reqs...) }
}

// scripted answers each chat request with the next tool call of script
// (name, arguments), then with finish.
func scripted(t *testing.T, script ...[2]string) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		call := [2]string{"finish", `{"success":true,"summary":"done"}`}
		if n < len(script) {
			call = script[n]
		}
		n++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
				"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
					"id": fmt.Sprintf("call_%d", n), "type": "function",
					"function": map[string]any{"name": call[0], "arguments": call[1]}}}}}},
			"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// services starts env, vla and sam3 in process; failEvery applies to vla and sam3.
func services(t *testing.T, task, seed, failEvery int) (env, vla, sam3 *Service, urls [3]string) {
	t.Helper()
	env = &Service{Component: "env", Env: NewEnv("libero_object_swap", task, seed, 400)}
	vla = &Service{Component: "vla", FailEvery: failEvery}
	sam3 = &Service{Component: "sam3", FailEvery: failEvery}
	for i, s := range []*Service{env, vla, sam3} {
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	return
}

func config(t *testing.T, baseURL string, task, seed int, urls [3]string) Config {
	return Config{Robot: "libero", LiberoType: "pro", Suite: "libero_object_swap", Task: task, Seed: seed,
		Planner: "api", Model: "openai-chat:toy", BaseURL: baseURL, MaxTurns: 8, MaxEpisodeSteps: 400,
		OutputDir: t.TempDir(), EnvEndpoint: urls[0], VLAEndpoint: urls[1], SAM3Endpoint: urls[2], PolicyMode: "tool"}
}

var knobs = Knobs{HangFor: time.Minute, ModelTimeout: 10 * time.Second, ServiceTimeout: 5 * time.Second, APIKey: "EMPTY"}

type files struct {
	transcript map[string]any
	steps      []Step
}

func readFiles(t *testing.T, dir string) files {
	t.Helper()
	var f files
	paths, _ := filepath.Glob(filepath.Join(dir, "transcript_*.json"))
	if len(paths) != 1 {
		t.Fatalf("want one transcript_*.json in %s, got %v", dir, paths)
	}
	b, _ := os.ReadFile(paths[0])
	if err := json.Unmarshal(b, &f.transcript); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"finish", "stats", "error", "messages"} {
		if _, ok := f.transcript[k]; !ok {
			t.Errorf("transcript lacks key %q", k)
		}
	}
	var st struct {
		Steps []Step `json:"steps"`
	}
	b, _ = os.ReadFile(filepath.Join(dir, "states.json"))
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("states.json: %v", err)
	}
	f.steps = st.Steps
	if _, err := os.Stat(filepath.Join(dir, "run.log")); err != nil {
		t.Errorf("run.log: %v", err)
	}
	return f
}

func terminated(steps []Step) bool {
	for _, s := range steps {
		if s.Terminated {
			return true
		}
	}
	return false
}

// The stand-in plays against the toy model server as an OpenAI client with
// tools; whatever the toy calls becomes a step, and the env alone decides.
func TestEpisodesAgainstTheToyModel(t *testing.T) {
	model, requests := toyModel(t)
	successes := 0
	for seed := 11; seed < 23; seed++ {
		_, vla, _, urls := services(t, seed%3, seed, 0)
		cfg := config(t, model.URL+"/v1", seed%3, seed, urls)
		if code := Run(context.Background(), cfg, knobs, io.Discard); code != ExitOK {
			t.Fatalf("seed %d: exit %d", seed, code)
		}
		f := readFiles(t, cfg.OutputDir)
		res := outcome.Decide(rpentSpec, cfg.OutputDir, outcome.Exit{})
		if !res.Valid || res.Success != terminated(f.steps) {
			t.Errorf("seed %d: outcome %+v but states terminated=%v", seed, res, terminated(f.steps))
		}
		if res.Success {
			successes++
		}
		if vla.calls != len(f.steps) {
			t.Errorf("seed %d: %d VLA calls for %d steps", seed, vla.calls, len(f.steps))
		}
		// Tool mode carries nothing of code mode.
		if _, err := os.Stat(filepath.Join(cfg.OutputDir, "code_policy")); err == nil || f.transcript["policy_mode"] != nil ||
			f.transcript["stats"].(map[string]any)["code_snippets"] != nil {
			t.Errorf("seed %d: tool mode wrote code mode's files or fields", seed)
		}
	}
	reqs := requests()
	if len(reqs) == 0 {
		t.Fatal("the toy model got no request")
	}
	for _, r := range reqs {
		if r["model"] != "toy" || r["tool_choice"] != "auto" || len(r["tools"].([]any)) != len(Tools) {
			t.Fatalf("request is not a chat completion with tools: model=%v tool_choice=%v", r["model"], r["tool_choice"])
		}
	}
	// The first user turn carries the camera image, as RPent's does.
	first := reqs[0]["messages"].([]any)[1].(map[string]any)["content"].([]any)
	if img := first[1].(map[string]any)["image_url"].(map[string]any)["url"].(string); !strings.HasPrefix(img, "data:image/png;base64,") {
		t.Errorf("first user message has no inline image: %.40s", img)
	}
	t.Logf("%d/12 toy episodes succeeded", successes)
}

// Success is the env's terminated flag, never the model's finish claim.
func TestFinishClaimIsNotSuccess(t *testing.T) {
	_, _, _, urls := services(t, 2, 12, 0)
	cfg := config(t, scripted(t).URL+"/v1", 2, 12, urls) // finish(success=true) at once
	if code := Run(context.Background(), cfg, knobs, io.Discard); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	f := readFiles(t, cfg.OutputDir)
	if claim, _ := f.transcript["finish"].(map[string]any); claim["success"] != true {
		t.Fatalf("finish claim not recorded: %v", f.transcript["finish"])
	}
	res := outcome.Decide(rpentSpec, cfg.OutputDir, outcome.Exit{})
	if !res.Valid || res.Success || !strings.Contains(res.Termination, "claimed success") {
		t.Fatalf("a finish claim without terminated must be a valid failure, got %+v", res)
	}

	// Trying instructions until the env terminates gives a success whose
	// steps say so, although the model never calls finish.
	env := NewEnv("libero_object_swap", 2, 12, 400)
	var script [][2]string
	for i := 0; i < 60 && !env.terminated; i++ {
		instr := fmt.Sprintf("pick up the salad dressing, attempt %d", i)
		if _, err := env.Step(ChunkFor(instr)); err != nil {
			t.Fatal(err)
		}
		script = append(script, [2]string{"execute_skill", fmt.Sprintf(`{"instruction":%q}`, instr)})
	}
	if !env.terminated {
		t.Fatal("no instruction sequence reached the goal in 60 tries")
	}
	_, _, _, urls = services(t, 2, 12, 0)
	cfg = config(t, scripted(t, script...).URL+"/v1", 2, 12, urls)
	cfg.MaxTurns = len(script) + 1
	if code := Run(context.Background(), cfg, knobs, io.Discard); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	f = readFiles(t, cfg.OutputDir)
	if f.transcript["finish"] != nil || f.transcript["termination"] != "env_terminated" || len(f.steps) != len(script) || !f.steps[len(f.steps)-1].Terminated {
		t.Fatalf("finish %v termination %v steps %d (want %d, last terminated)", f.transcript["finish"], f.transcript["termination"], len(f.steps), len(script))
	}
	if res := outcome.Decide(rpentSpec, cfg.OutputDir, outcome.Exit{}); !res.Valid || !res.Success || res.Reward != 1 {
		t.Fatalf("terminated episode: %+v", res)
	}
}

// A failing VLA or SAM3 call is a tool result {"error": …}; the episode goes
// on, exits 0, and the adapter calls it an infrastructure failure.
func TestServiceErrorsAreToolResults(t *testing.T) {
	_, _, sam3, urls := services(t, 1, 20, 2) // every second call fails
	script := [][2]string{{"execute_skill", `{"instruction":"pick up the cream cheese"}`}, {"detect", `{"object":"basket"}`}, {"open_drawer", `{}`}}
	cfg := config(t, scripted(t, script...).URL+"/v1", 1, 20, urls)
	if code := Run(context.Background(), cfg, knobs, io.Discard); code != ExitOK {
		t.Fatalf("exit %d, want 0: service errors do not stop RPent", code)
	}
	f := readFiles(t, cfg.OutputDir)
	var errs, sam3Errs int
	for _, m := range f.transcript["messages"].([]any) {
		m := m.(map[string]any)
		if m["role"] != "tool" {
			continue
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(m["content"].(string)), &res); err != nil {
			t.Fatalf("tool result is not JSON: %v", m["content"])
		}
		if e, ok := res["error"].(string); ok {
			errs++
			if strings.HasPrefix(e, "sam3 segment: 500") {
				sam3Errs++
			}
		}
	}
	if sam3Errs == 0 || sam3.errors == 0 {
		t.Fatalf("no sam3 error reached the transcript (service errors %d)", sam3.errors)
	}
	if st := f.transcript["stats"].(map[string]any); int(st["service_errors"].(float64)) != errs {
		t.Errorf("stats.service_errors %v, tool results with errors %d", st["service_errors"], errs)
	}
	res := outcome.Decide(rpentSpec, cfg.OutputDir, outcome.Exit{})
	if res.Valid || res.FailureClass != schemas.FailureInfra || !strings.Contains(res.Termination, "sam3") {
		t.Fatalf("service errors must make the episode invalid: %+v", res)
	}
}

// A model that cannot be reached or answers an error makes rpent fail with
// a transcript error and exit 1; the episode is infrastructure because the
// evidence says a component failed: the proxy's record of the failed call
// (here written as the proxy would: it answers 502 for an unreachable
// model), or no model call at all (the planner's setup failed).
func TestPlannerErrors(t *testing.T) {
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"The model `+"`toy`"+` does not exist."}}`, http.StatusNotFound)
	}))
	defer bad.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	model, _ := toyModel(t)
	cases := []struct {
		name, base string
		knobs      Knobs
		want       string
		recorded   []schemas.Call // what the recording proxy stores of the episode's calls
	}{
		{"model answers 404", bad.URL + "/v1", knobs, "404", []schemas.Call{{HTTPStatus: 404}}},
		{"model unreachable", dead.URL + "/v1", knobs, "connection refused", []schemas.Call{{HTTPStatus: 502}}},
		{"no api key", model.URL + "/v1", Knobs{ModelTimeout: time.Second, ServiceTimeout: time.Second}, "OPENAI_API_KEY", nil},
	}
	for _, c := range cases {
		_, _, _, urls := services(t, 0, 11, 0)
		cfg := config(t, c.base, 0, 11, urls)
		if code := Run(context.Background(), cfg, c.knobs, io.Discard); code != ExitPlanner {
			t.Errorf("%s: exit %d, want %d", c.name, code, ExitPlanner)
			continue
		}
		f := readFiles(t, cfg.OutputDir)
		if e, _ := f.transcript["error"].(string); !strings.Contains(e, c.want) {
			t.Errorf("%s: transcript error %q lacks %q", c.name, e, c.want)
		}
		res := outcome.Decide(rpentSpec, cfg.OutputDir, outcome.Exit{Code: ExitPlanner, Health: outcome.HealthOf(c.recorded)})
		if res.Valid || res.FailureClass != schemas.FailureInfra {
			t.Errorf("%s: outcome %+v", c.name, res)
		}
		// Without that evidence the same files are the planner's own failure.
		if res := outcome.Decide(rpentSpec, cfg.OutputDir, outcome.Exit{Code: ExitPlanner}); !res.Valid || res.FailureClass != schemas.FailureTask ||
			!strings.Contains(res.Termination, "planner error") {
			t.Errorf("%s without evidence: outcome %+v", c.name, res)
		}
	}
}

func TestParseArgs(t *testing.T) {
	good := []string{"--robot", "libero", "--libero-type", "pro", "--suite", "libero_object_swap", "--task", "2", "--seed", "12",
		"--planner", "api", "--model", "openai-chat:toy", "--base-url", "http://127.0.0.1:1/e/x/v1", "--max-turns", "100",
		"--output-dir", "/tmp/x", "--vla-endpoint", "http://127.0.0.1:2", "--sam3-endpoint", "127.0.0.1:3", "--max-episode-steps", "10000"}
	c, err := ParseArgs(good, io.Discard)
	if err != nil || c.Task != 2 || c.Seed != 12 || c.MaxTurns != 100 || c.SAM3Endpoint != "127.0.0.1:3" {
		t.Fatalf("ParseArgs = %+v, %v", c, err)
	}
	with := func(extra ...string) []string { return append(append([]string(nil), good...), extra...) }
	replace := func(flag, v string) []string {
		out := append([]string(nil), good...)
		for i := range out {
			if out[i] == flag {
				out[i+1] = v
			}
		}
		return out
	}
	for name, args := range map[string][]string{
		"unknown flag":   with("--max-turn", "5"),
		"other robot":    replace("--robot", "franka"),
		"other planner":  replace("--planner", "claude_code"),
		"bare model":     replace("--model", "toy"),
		"other mode":     with("--policy-mode", "python"),
		"no time limit":  with("--policy-mode", "code", "--code-timeout-s", "0"),
		"no calls":       with("--policy-mode", "code", "--code-max-calls", "0"),
		"stray argument": with("extra"),
		"no output dir":  replace("--output-dir", ""),
	} {
		if _, err := ParseArgs(args, io.Discard); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if c.PolicyMode != "tool" || c.CodeTimeoutS != 120 || c.CodeMaxCalls != 100 {
		t.Errorf("defaults: mode %q, code limits %gs and %d calls; want tool, RPent's 120 and 100", c.PolicyMode, c.CodeTimeoutS, c.CodeMaxCalls)
	}
	c, err = ParseArgs(with("--policy-mode", "code", "--code-timeout-s", "2.5", "--code-max-calls", "7"), io.Discard)
	if err != nil || c.PolicyMode != "code" || c.CodeTimeoutS != 2.5 || c.CodeMaxCalls != 7 {
		t.Errorf("code mode: %+v, %v", c, err)
	}
	for in, want := range map[string]string{"127.0.0.1:5": "http://127.0.0.1:5", "http://h:6/": "http://h:6"} {
		if got, err := ParseEndpoint(in); err != nil || got != want {
			t.Errorf("ParseEndpoint(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"socket://127.0.0.1:5", "127.0.0.1", "http://:5"} {
		if _, err := ParseEndpoint(in); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted", in)
		}
	}
}

func TestEnvIsSeededAndDeterministic(t *testing.T) {
	required := map[int]bool{}
	for seed := 0; seed < 50; seed++ {
		a, b := NewEnv("s", 3, seed, 400), NewEnv("s", 3, seed, 400)
		required[a.Required] = true
		for _, instr := range []string{"open the drawer", "pick up the ketchup", "open the drawer"} {
			ra, erra := a.Step(ChunkFor(instr))
			rb, errb := b.Step(ChunkFor(instr))
			if ra != rb || (erra == nil) != (errb == nil) {
				t.Fatalf("seed %d: same actions, different results %+v %+v", seed, ra, rb)
			}
			if erra != nil {
				break // terminated
			}
		}
	}
	if len(required) != 2 {
		t.Errorf("required progress takes %v, want 1 and 2 across seeds", required)
	}
	e := NewEnv("s", 0, 0, 10)
	e.Required = 1000
	var last StepResult
	for i := 0; i < 2; i++ {
		last, _ = e.Step(ChunkFor(fmt.Sprint(i)))
	}
	if !last.Truncated || last.Terminated {
		t.Errorf("max steps must truncate, got %+v", last)
	}
	if _, err := e.Step(ChunkFor("x")); err == nil {
		t.Error("a step after the end must fail")
	}
	if _, err := NewEnv("s", 0, 0, 10).Step([][]float64{{1, 2}}); err == nil {
		t.Error("a 2-dim action must be refused")
	}
}
