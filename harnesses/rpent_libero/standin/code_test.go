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
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/outcome"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestParseSnippet(t *testing.T) {
	type call struct {
		target, tool string
		args         []any
		kwargs       map[string]any
	}
	flat := func(sts []statement) []call {
		var out []call
		for _, st := range sts {
			c := call{target: st.target, tool: st.call}
			for _, a := range append([]expr{st.value}, st.args...) {
				if a.name != "" {
					c.args = append(c.args, "$"+a.name)
				} else if a.lit != nil {
					c.args = append(c.args, a.lit)
				}
			}
			for _, kw := range st.kwargs {
				if c.kwargs == nil {
					c.kwargs = map[string]any{}
				}
				c.kwargs[kw.name] = kw.value.lit
			}
			out = append(out, c)
		}
		return out
	}
	good := map[string][]call{
		"pick_cube":  {{tool: "pick_cube"}},
		"  finish\n": {{tool: "finish"}},
		"# plan\nrobo.detect('basket')  # where is it\n\nrobo.execute_skill(instruction=\"pick up the \\\"cream\\\" cheese\")": {
			{tool: "detect", args: []any{"basket"}}, {tool: "execute_skill", kwargs: map[string]any{"instruction": `pick up the "cream" cheese`}}},
		"box = robo.detect( \"bowl\" , )\nn = 3\nx = -2.5e1\nok = True\nrobo.execute_skill(target)\nrobo.finish(False, summary='it\\'s done')": {
			{target: "box", tool: "detect", args: []any{"bowl"}}, {target: "n", args: []any{3}}, {target: "x", args: []any{-25.0}},
			{target: "ok", args: []any{true}}, {tool: "execute_skill", args: []any{"$target"}},
			{tool: "finish", args: []any{false}, kwargs: map[string]any{"summary": "it's done"}}},
		"robo.open_drawer()": {{tool: "open_drawer"}},
	}
	for code, want := range good {
		sts, err := ParseSnippet(code)
		if err != nil {
			t.Errorf("%q: %v", code, err)
			continue
		}
		if got := flat(sts); !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got  %+v\n want %+v", code, got, want)
		}
	}
	for code, want := range map[string]string{
		"for i in range(3):\n    robo.pick_cube()": "line 1",
		"robo.pick_cube()\nprint('hi')":            "line 2",
		"robo.detect('bowl'":                       "line 1",
		"robo.detect('bowl)":                       "unterminated string",
		"robo.finish(success=True, 'x')":           "positional argument follows keyword",
		"if robo.detect('x') == 1: robo.finish()":  "line 1",
		"robo.detect('a') robo.detect('b')":        "line 1",
		"x == robo.detect('a')":                    "line 1",
		"# only a comment":                         "no statement",
		"robot.pick_cube()":                        "line 1",
	} {
		if _, err := ParseSnippet(code); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one naming %q", code, err, want)
		}
	}
	for content, want := range map[string]string{
		"pick_cube": "pick_cube",
		"I will look first.\n```python\nrobo.detect('bowl')\n```\nThen act.": "robo.detect('bowl')",
		"```\nrobo.pick_cube()\n```":                                         "robo.pick_cube()",
		"```robo.pick_cube()```":                                             "robo.pick_cube()",
		"   ":                                                                "",
		"```python\n```":                                                     "",
		"```py\nrobo.a()\nrobo.b()\n":                                        "robo.a()\nrobo.b()",
	} {
		if got := SnippetCode(content); got != want {
			t.Errorf("SnippetCode(%q) = %q, want %q", content, got, want)
		}
	}
	if got := SnippetCode([]any{map[string]any{"type": "text", "text": "robo.a()"}}); got != "robo.a()" {
		t.Errorf("content parts: %q", got)
	}
	if got := SnippetCode(nil); got != "" {
		t.Errorf("null content: %q", got)
	}
}

// scriptedCode answers each chat request with the next content of script,
// then with a snippet that gives up, and records the requests.
func scriptedCode(t *testing.T, script ...string) (*httptest.Server, func() []map[string]any) {
	t.Helper()
	var mu sync.Mutex
	var reqs []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		reqs = append(reqs, req)
		content := "robo.finish(False, 'out of ideas')"
		if len(reqs) <= len(script) {
			content = script[len(reqs)-1]
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}},
			"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
		})
	}))
	t.Cleanup(srv.Close)
	return srv, func() []map[string]any { mu.Lock(); defer mu.Unlock(); return append([]map[string]any(nil), reqs...) }
}

func codeConfig(t *testing.T, baseURL string, task, seed int, urls [3]string) Config {
	c := config(t, baseURL, task, seed, urls)
	c.PolicyMode, c.CodeTimeoutS, c.CodeMaxCalls = "code", 30, 100
	return c
}

func readSnippets(t *testing.T, dir string) []Snippet {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "code_policy", "snippet_*.json"))
	var out []Snippet
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var s Snippet
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if want := fmt.Sprintf("snippet_%03d.json", i+1); filepath.Base(p) != want || s.Snippet != i+1 {
			t.Errorf("%s holds snippet %d, want %s", p, s.Snippet, want)
		}
		code, err := os.ReadFile(strings.TrimSuffix(p, ".json") + ".py")
		if err != nil || string(code) != s.Code+"\n" {
			t.Errorf("%s: .py file %q (%v), record's code %q", p, code, err, s.Code)
		}
		out = append(out, s)
	}
	return out
}

// idle finds an instruction whose chunk makes no progress from the env's
// start, so a scripted episode goes on after it.
func idle(t *testing.T, task, seed int) string {
	t.Helper()
	for i := 0; i < 50; i++ {
		instr := fmt.Sprintf("nudge the plate %d", i)
		env := NewEnv("libero_object_swap", task, seed, 400)
		if r, _ := env.Step(ChunkFor(instr)); r.Progress == 0 {
			return instr
		}
	}
	t.Fatal("no idle instruction in 50")
	return ""
}

// Against the toy model, code mode asks without tools, gets one action word
// as content (the shorthand for robo.<word>()), and runs it through the
// same steps as tool mode: a snippet per turn, a step per primitive, and
// the env alone decides.
func TestCodeModeAgainstTheToyModel(t *testing.T) {
	model, requests := toyModel(t)
	for seed := 11; seed < 23; seed++ {
		_, vla, _, urls := services(t, seed%3, seed, 0)
		cfg := codeConfig(t, model.URL+"/v1", seed%3, seed, urls)
		if code := Run(context.Background(), cfg, knobs, io.Discard); code != ExitOK {
			t.Fatalf("seed %d: exit %d", seed, code)
		}
		f := readFiles(t, cfg.OutputDir)
		snippets := readSnippets(t, cfg.OutputDir)
		st := f.transcript["stats"].(map[string]any)
		if f.transcript["policy_mode"] != "code" || len(snippets) == 0 || int(st["code_snippets"].(float64)) != len(snippets) ||
			int(st["model_calls"].(float64)) != len(snippets) {
			t.Fatalf("seed %d: mode %v, %d snippets, stats %v: want one snippet per model call", seed, f.transcript["policy_mode"], len(snippets), st)
		}
		steps := 0
		for i, s := range snippets {
			if s.Turn != i+1 || len(s.Calls) != 1 || s.Calls[0].Tool != s.Code || s.Error != nil || s.Calls[0].Result == nil {
				t.Errorf("seed %d snippet %d: %+v, want the bare word run as one robo call on turn %d", seed, i+1, s, i+1)
			}
			if s.Code != "finish" {
				if steps >= len(f.steps) || f.steps[steps].Tool != s.Code || f.steps[steps].Turn != s.Turn {
					t.Errorf("seed %d snippet %d (%s): no states.json step of its turn", seed, i+1, s.Code)
				}
				steps++
			}
			// Only the last snippet ends the episode, unless the turns ran
			// out after it (the toy samples: some seeds never finish).
			last := i == len(snippets)-1
			if s.EpisodeEnd != "" && !last || last && s.EpisodeEnd == "" && len(snippets) < cfg.MaxTurns {
				t.Errorf("seed %d snippet %d of %d (max turns %d): episode_end %q", seed, i+1, len(snippets), cfg.MaxTurns, s.EpisodeEnd)
			}
		}
		if steps != len(f.steps) || vla.calls != len(f.steps) {
			t.Errorf("seed %d: %d primitives run, %d steps, %d VLA calls", seed, steps, len(f.steps), vla.calls)
		}
		res := outcome.Decide(rpentSpec, cfg.OutputDir, outcome.Exit{})
		if !res.Valid || res.Success != terminated(f.steps) || (!res.Success && res.Reason == "") {
			t.Errorf("seed %d: outcome %+v but states terminated=%v", seed, res, terminated(f.steps))
		}
	}
	for _, r := range requests() {
		_, tools := r["tools"]
		_, choice := r["tool_choice"]
		sys := r["messages"].([]any)[0].(map[string]any)["content"]
		if tools || choice || sys != CodeSystemPrompt(30, 100) {
			t.Fatalf("code mode request: tools %v tool_choice %v system %q", tools, choice, sys)
		}
	}
}

// A snippet of real code: variables persist between snippets, robo.finish
// stops the snippet (the call after it does not run), and its claim is not
// success.
func TestCodeModeRunsCode(t *testing.T) {
	_, vla, sam3, urls := services(t, 1, 20, 0)
	instr := idle(t, 1, 20)
	model, requests := scriptedCode(t,
		fmt.Sprintf("I will set the instruction first.\n```python\ninstr = %q\n```", instr),
		"```python\n# look, then act\nbox = robo.detect(\"basket\")\nrobo.execute_skill(instr)\nrobo.finish(success=True, summary=\"placed\")\nrobo.execute_skill('never runs')\n```")
	cfg := codeConfig(t, model.URL+"/v1", 1, 20, urls)
	if code := Run(context.Background(), cfg, knobs, io.Discard); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	f := readFiles(t, cfg.OutputDir)
	sn := readSnippets(t, cfg.OutputDir)
	if len(sn) != 2 || len(sn[0].Calls) != 0 || sn[0].Error != nil || sn[0].Code != fmt.Sprintf("instr = %q", instr) {
		t.Fatalf("snippet 1 (an assignment): %+v", sn)
	}
	s := sn[1]
	var tools []string
	for _, c := range s.Calls {
		tools = append(tools, c.Tool)
	}
	if !reflect.DeepEqual(tools, []string{"detect", "execute_skill", "finish"}) || !s.Finished || s.EpisodeEnd != "finish_called" || s.Error != nil || s.Turn != 2 {
		t.Fatalf("snippet 2: calls %v finished %v end %q error %v turn %d", tools, s.Finished, s.EpisodeEnd, s.Error, s.Turn)
	}
	if s.Calls[1].Args["instruction"] != instr || s.Calls[1].Result["instruction"] != instr || s.Calls[0].Result["status"] != "ok" {
		t.Errorf("the variable did not reach the call, or results are missing: %+v", s.Calls)
	}
	if vla.calls != 1 || sam3.calls != 2 || len(f.steps) != 1 || f.steps[0].Turn != 2 || f.steps[0].Instruction != instr {
		t.Errorf("vla %d sam3 %d calls, steps %+v: want one step, the call after finish not run", vla.calls, sam3.calls, f.steps)
	}
	if f.transcript["termination"] != "finish_called" || f.transcript["finish"].(map[string]any)["success"] != true {
		t.Errorf("termination %v finish %v", f.transcript["termination"], f.transcript["finish"])
	}
	// The result went back to the model after each snippet.
	reqs := requests()
	last := reqs[1]["messages"].([]any)
	if m := last[len(last)-1].(map[string]any); m["role"] != "user" || !strings.HasPrefix(m["content"].(string), "Code result: ") {
		t.Errorf("snippet 1's result did not reach the model: %v", m)
	}
	res := outcome.Decide(rpentSpec, cfg.OutputDir, outcome.Exit{})
	if !res.Valid || res.Success || res.Reason != outcome.ReasonFinishClaimed || !strings.Contains(res.Termination, "claimed success") {
		t.Errorf("robo.finish(success=True) without terminated: %+v", res)
	}
}

// The planner's own code failing (an exception, its time limit, its call
// limit) is recorded with its kind, goes back to the model, and is a task
// failure; a service failing under a robo call is infrastructure.
func TestCodeModeFailures(t *testing.T) {
	type want struct {
		kind, msg string
		calls     int
		outcome   string // task reason, or "infrastructure"
	}
	cases := []struct {
		name     string
		script   []string
		setup    func(cfg *Config, vla *Service, urls *[3]string)
		want     []want // per snippet
		vlaCalls int
	}{
		{"exceptions", []string{"for i in range(3):\n    robo.pick_cube()", "robo.detect('a', 'b')", "robo.request_scene_reset()",
			"robo.detect('bowl')\nrobo.execute_skill(target)", "robo.detect(object='cup')"}, nil,
			[]want{{CodeException, "SyntaxError: line 1", 0, ""}, {CodeException, "TypeError", 0, ""}, {CodeException, "operator requests", 0, ""},
				{CodeException, "NameError: line 2", 1, ""}, {"", "", 1, "not_terminated"}}, 0},
		{"exception last", []string{"robo.detect('bowl')", "robo.finish(maybe=True)"}, nil,
			[]want{{"", "", 1, ""}, {CodeException, "unexpected keyword argument \"maybe\"", 0, outcome.ReasonCodeError}}, 0},
		{"max calls", []string{"robo.detect('a')\nrobo.detect('b')\nrobo.detect('c')"},
			func(cfg *Config, _ *Service, _ *[3]string) { cfg.CodeMaxCalls = 2 },
			[]want{{CodeMaxCalls, "would be call 3; a snippet may make 2", 2, outcome.ReasonCodeMaxCalls}}, 0},
		{"time limit", []string{"robo.detect('basket')\nrobo.execute_skill('pick up the cream cheese')\nrobo.detect('never')"},
			func(cfg *Config, _ *Service, urls *[3]string) {
				cfg.CodeTimeoutS = 0.2
				// A VLA that answers only when the caller gives up (the server
				// notices that once the body is read), or after a minute.
				hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					select {
					case <-r.Context().Done():
					case <-time.After(time.Minute):
					}
				}))
				t.Cleanup(hung.Close)
				urls[1], cfg.VLAEndpoint = hung.URL, hung.URL
			},
			[]want{{CodeTimeout, "during robo.execute_skill (line 2)", 2, outcome.ReasonCodeTimeout}}, 0},
		{"service error", []string{"robo.detect('basket')\nrobo.execute_skill('pick up the cream cheese')\nrobo.detect('never')"},
			func(_ *Config, vla *Service, _ *[3]string) { vla.FailEvery = 1 },
			[]want{{CodeService, "line 2: robo.execute_skill: vla predict_action: 500", 2, "infrastructure"}}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, vla, _, urls := services(t, 1, 20, 0)
			model, _ := scriptedCode(t, c.script...)
			cfg := codeConfig(t, model.URL+"/v1", 1, 20, urls)
			cfg.MaxTurns = len(c.script)
			if c.setup != nil {
				c.setup(&cfg, vla, &urls)
			}
			if code := Run(context.Background(), cfg, knobs, io.Discard); code != ExitOK {
				t.Fatalf("exit %d: the planner's code failing does not stop rpent", code)
			}
			f := readFiles(t, cfg.OutputDir)
			sn := readSnippets(t, cfg.OutputDir)
			if len(sn) != len(c.want) {
				t.Fatalf("%d snippets, want %d", len(sn), len(c.want))
			}
			for i, w := range c.want {
				s := sn[i]
				kind, msg := "", ""
				if s.ErrorKind != nil {
					kind, msg = *s.ErrorKind, *s.Error
				}
				if kind != w.kind || !strings.Contains(msg, w.msg) || len(s.Calls) != w.calls {
					t.Errorf("snippet %d: %s %q with %d calls, want %s %q with %d", i+1, kind, msg, len(s.Calls), w.kind, w.msg, w.calls)
				}
			}
			last := sn[len(sn)-1]
			switch {
			case c.name == "time limit" && last.Calls[1].Result != nil:
				t.Errorf("the call the time limit cut has a result: %v", last.Calls[1].Result)
			case c.name == "service error" && last.Calls[1].Result["error"] == nil:
				t.Errorf("the failed call's result carries no error: %v", last.Calls[1].Result)
			}
			if vla.calls != c.vlaCalls {
				t.Errorf("%d VLA calls, want %d", vla.calls, c.vlaCalls)
			}
			if st := f.transcript["stats"].(map[string]any); (st["service_errors"].(float64) > 0) != (c.name == "service error") {
				t.Errorf("stats.service_errors %v", st["service_errors"])
			}
			res := outcome.Decide(rpentSpec, cfg.OutputDir, outcome.Exit{})
			w := c.want[len(c.want)-1].outcome
			if w == "infrastructure" {
				if res.Valid || res.FailureClass != schemas.FailureInfra || !strings.Contains(res.Termination, "turn 1") {
					t.Errorf("outcome %+v, want infrastructure at turn 1", res)
				}
			} else if !res.Valid || res.FailureClass != schemas.FailureTask || res.Reason != w {
				t.Errorf("outcome %+v, want a task failure, reason %s", res, w)
			}
		})
	}
}

// RPENT_STANDIN_MODEL_SEED makes episodes reproducible: each request
// carries a seed from the knob, the output dir's name and the turn, so the
// same name replays the same episode and another attempt's differs.
func TestModelSeedReproducesEpisodes(t *testing.T) {
	model, requests := toyModel(t)
	seed := int64(7)
	k := knobs
	k.ModelSeed = &seed
	play := func(name string) (codes []string, seeds []any) {
		before := len(requests())
		_, _, _, urls := services(t, 2, 12, 0)
		cfg := codeConfig(t, model.URL+"/v1", 2, 12, urls)
		cfg.OutputDir = filepath.Join(t.TempDir(), name)
		if code := Run(context.Background(), cfg, k, io.Discard); code != ExitOK {
			t.Fatalf("exit %d", code)
		}
		for _, s := range readSnippets(t, cfg.OutputDir) {
			codes = append(codes, s.Code)
		}
		for _, r := range requests()[before:] {
			seeds = append(seeds, r["seed"])
		}
		return codes, seeds
	}
	codes, seeds := play("r1-train-g000-a00-try0")
	again, seedsAgain := play("r1-train-g000-a00-try0")
	_, other := play("r1-train-g000-a01-try0")
	if !reflect.DeepEqual(codes, again) || !reflect.DeepEqual(seeds, seedsAgain) || len(seeds) != len(codes) {
		t.Errorf("same seed and name, different episodes: %v (seeds %v) and %v (seeds %v)", codes, seeds, again, seedsAgain)
	}
	for i, s := range seeds {
		if s == nil || (i > 0 && s == seeds[i-1]) {
			t.Errorf("request %d seed %v: want one per turn", i, s)
		}
	}
	if reflect.DeepEqual(seeds[0], other[0]) {
		t.Errorf("two attempts share their first seed %v", seeds[0])
	}
	t.Setenv("RPENT_STANDIN_RPC_SERVICE", "/bin/true")
	t.Setenv("RPENT_STANDIN_MODEL_SEED", "seven")
	if _, err := KnobsFromEnv(); err == nil || !strings.Contains(err.Error(), "RPENT_STANDIN_MODEL_SEED") {
		t.Errorf("a seed that is not a number: %v", err)
	}
	t.Setenv("RPENT_STANDIN_MODEL_SEED", "7")
	if got, err := KnobsFromEnv(); err != nil || got.ModelSeed == nil || *got.ModelSeed != 7 {
		t.Errorf("KnobsFromEnv: %+v, %v", got, err)
	}
}
