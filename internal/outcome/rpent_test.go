package outcome

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// rpentDir writes an output dir shaped like RPent's: transcript_<tag>.json,
// states.json and run.log. A nil transcript or states leaves the file out.
func rpentDir(t *testing.T, transcript map[string]any, states any) string {
	t.Helper()
	dir := t.TempDir()
	put := func(name string, v any) {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if transcript != nil {
		put("transcript_20250101T120000Z.json", transcript)
	}
	if states != nil {
		put("states.json", states)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.log"), []byte("rpent: episode done\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// transcript is a realistic transcript: a tool call, its result, finish.
func transcript(finish any, errField any, toolResults ...any) map[string]any {
	msgs := []any{
		map[string]any{"role": "system", "content": "You control a Franka arm in LIBERO."},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "put the bowl on the plate"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgo="}},
		}},
	}
	for i, r := range toolResults {
		id := "call_" + string(rune('a'+i))
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": id, "type": "function", "function": map[string]any{"name": "execute_skill", "arguments": `{"instruction":"pick up the bowl"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": r})
	}
	return map[string]any{
		"finish":   finish,
		"stats":    map[string]any{"turns": len(toolResults), "model_calls": len(toolResults) + 1, "service_errors": 0},
		"error":    errField,
		"messages": msgs,
	}
}

func steps(terminated ...bool) map[string]any {
	var s []any
	for i, term := range terminated {
		s = append(s, map[string]any{"turn": i + 1, "tool": "execute_skill", "env_steps": 5 * (i + 1), "terminated": term, "truncated": false})
	}
	if s == nil {
		s = []any{}
	}
	return map[string]any{"suite": "libero_object_swap", "task": 2, "seed": 12, "steps": s}
}

func TestRPentLibero(t *testing.T) {
	ok := `{"status":"executed","instruction":"pick up the bowl","env_steps":5}`
	claimSuccess := map[string]any{"success": true, "summary": "the bowl is on the plate"}
	cases := []struct {
		name       string
		transcript map[string]any
		states     any
		exit       Exit
		want       Result
		why        []string // substrings of the termination text
	}{
		{"success from terminated", transcript(nil, nil, ok, ok), steps(false, true), Exit{},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 2}, []string{"terminated at step 2 of 2"}},
		{"steps after success: the first terminated step's turn", transcript(nil, nil, ok, ok, ok), steps(false, true, true), Exit{},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 2}, []string{"terminated at step 2 of 3"}},
		{"finish claim without terminated is a task failure", transcript(claimSuccess, nil, ok), steps(false), Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonFinishClaimed}, []string{"not terminated after 1 steps", "claimed success"}},
		{"giving up is a task failure", transcript(map[string]any{"success": false}, nil, ok), steps(false), Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonGaveUp}, []string{"claimed failure"}},
		{"no finish, no termination: ran out", transcript(nil, nil, ok), steps(false), Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: "not_terminated"}, []string{"not terminated after 1 steps"}},
		{"finish claiming failure does not hide success", transcript(map[string]any{"success": false}, nil, ok), steps(true), Exit{},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 1}, nil},
		{"steps without turns leave the success turn unknown", transcript(nil, nil, ok), map[string]any{"steps": []any{map[string]any{"terminated": true}}}, Exit{},
			Result{Valid: true, Success: true, Reward: 1}, nil},
		{"no steps at all", transcript(nil, nil), steps(), Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask}, []string{"after 0 steps"}},
		{"model server unreachable: infrastructure", transcript(nil, "APIConnectionError: connection refused", ok), steps(false),
			Exit{Code: 1, Health: Health{ModelFailures: 3, FirstModelFailure: "call 1: HTTP 502 connection refused"}},
			Result{FailureClass: schemas.FailureInfra}, []string{"model server failed 3 call(s)", "HTTP 502"}},
		{"planner error with a healthy model server: task", transcript(nil, "JSONDecodeError: tool arguments", ok), steps(false), Exit{Code: 1},
			Result{Valid: true, FailureClass: schemas.FailureTask}, []string{"planner error", "exit code 1", "JSONDecodeError"}},
		{"rate limited (429 recorded): infrastructure", transcript(nil, map[string]any{"type": "RateLimitError", "message": "429 from server"}), steps(),
			Exit{Code: 1, Health: Health{ModelFailures: 1, FirstModelFailure: "call 0: HTTP 429"}}, Result{FailureClass: schemas.FailureInfra}, []string{"HTTP 429"}},
		{"exit 1 after the env's success: success", transcript(nil, nil, ok), steps(true), Exit{Code: 1},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 1}, []string{"terminated at step 1"}},
		{"exit 1 without transcript error: task", transcript(nil, nil, ok), steps(false), Exit{Code: 1},
			Result{Valid: true, FailureClass: schemas.FailureTask}, []string{"code 1"}},
		{"service error before success", transcript(nil, nil, ok, `{"error":"vla: POST http://127.0.0.1:18300/call: connection refused"}`), steps(false, true), Exit{},
			Result{FailureClass: schemas.FailureInfra}, []string{"1 tool result", "call_b", "vla: POST"}},
		{"service error after success does not undo it", transcript(nil, nil, ok, `{"error":"sam3: 500"}`), steps(true, false), Exit{},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 1}, []string{"after success (not counted)", "sam3: 500"}},
		{"service down after the episode: infrastructure", transcript(nil, nil, ok), steps(false), Exit{Health: Health{ServicesDown: []string{"sam3"}}},
			Result{FailureClass: schemas.FailureInfra}, []string{"service(s) down: sam3"}},
		{"service error in text parts", transcript(nil, nil, []any{map[string]any{"type": "text", "text": `{"error": "sam3 timed out"}`}}), steps(false), Exit{},
			Result{FailureClass: schemas.FailureInfra}, []string{"sam3 timed out"}},
		{"null error field in a tool result is fine", transcript(nil, "", `{"status":"executed","error":null}`), steps(true), Exit{},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 1}, nil},
		{"plain-text tool result is fine", transcript(nil, false, "the bowl is grasped"), steps(false), Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask}, nil},
		{"no transcript", nil, steps(false), Exit{Code: 1},
			Result{FailureClass: schemas.FailureInfra}, []string{"no transcript_*.json", "exit code 1", "run.log"}},
		{"no transcript, but the env reported success", nil, steps(true), Exit{Code: 1},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 1}, nil},
		{"no states.json", transcript(nil, nil, ok), nil, Exit{},
			Result{FailureClass: schemas.FailureInfra}, []string{"no states.json"}},
		{"states without steps", transcript(nil, nil, ok), map[string]any{"suite": "x"}, Exit{},
			Result{FailureClass: schemas.FailureInfra}, []string{"no steps list"}},
		{"out of time, all healthy: task", transcript(nil, nil, ok), steps(false), Exit{TimedOut: true, Code: -1},
			Result{Valid: true, FailureClass: schemas.FailureTask}, []string{"ran out of time"}},
		{"out of time after the env's success: success", transcript(nil, nil, ok), steps(true), Exit{TimedOut: true, Code: -1},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 1}, nil},
		{"out of time with the model server failing", nil, nil, Exit{TimedOut: true, Code: -1, Health: Health{ModelFailures: 1, FirstModelFailure: "call 2: HTTP 504"}},
			Result{FailureClass: schemas.FailureInfra}, []string{"timed out", "HTTP 504"}},
	}
	spec := schemas.OutcomeSpec{Adapter: "rpent_libero"}
	for _, c := range cases {
		dir := rpentDir(t, c.transcript, c.states)
		got := Decide(spec, dir, c.exit)
		if got.Valid != c.want.Valid || got.Success != c.want.Success || got.Reward != c.want.Reward || got.FailureClass != c.want.FailureClass || got.SuccessTurn != c.want.SuccessTurn {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
		if got.Termination == "" {
			t.Errorf("%s: no termination text", c.name)
		}
		if got.Valid && !got.Success && c.want.Reason != "" && got.Reason != c.want.Reason {
			t.Errorf("%s: task failure reason %q, want %q", c.name, got.Reason, c.want.Reason)
		}
		if got.Valid && !got.Success && got.Reason == "" {
			t.Errorf("%s: a task failure without a reason", c.name)
		}
		for _, w := range c.why {
			if !strings.Contains(got.Termination, w) {
				t.Errorf("%s: termination %q lacks %q", c.name, got.Termination, w)
			}
		}
	}
}

func TestRPentLiberoUnreadableFiles(t *testing.T) {
	dir := rpentDir(t, nil, nil)
	os.WriteFile(filepath.Join(dir, "transcript_x.json"), []byte(`{"finish":`), 0o644)
	spec := schemas.OutcomeSpec{Adapter: "rpent_libero"}
	if got := Decide(spec, dir, Exit{}); got.Valid || !strings.Contains(got.Termination, "transcript_x.json") {
		t.Errorf("truncated transcript: %+v", got)
	}
	dir = rpentDir(t, transcript(nil, nil), nil)
	os.WriteFile(filepath.Join(dir, "states.json"), []byte(`{"steps":[{"terminated":tru`), 0o644)
	if got := Decide(spec, dir, Exit{}); got.Valid || !strings.Contains(got.Termination, "states.json") {
		t.Errorf("truncated states.json: %+v", got)
	}
	// A second transcript's error counts even if the first is clean.
	dir = rpentDir(t, transcript(nil, nil), steps(false))
	b, _ := json.Marshal(transcript(nil, "model 404"))
	os.WriteFile(filepath.Join(dir, "transcript_zz.json"), b, 0o644)
	if got := Decide(spec, dir, Exit{}); !strings.Contains(got.Termination, "model 404") {
		t.Errorf("second transcript's error ignored: %+v", got)
	}
}

// snippet is a code_policy/snippet_NNN.json record (README "Code as
// policy"): the calls' results as tool mode's, error and error_kind null
// unless given.
func snippet(n, turn int, kind, msg string, results ...string) map[string]any {
	calls := []any{}
	for _, r := range results {
		var res any
		if r != "" {
			res = json.RawMessage(r)
		}
		calls = append(calls, map[string]any{"tool": "execute_skill", "args": map[string]any{"instruction": "pick up the bowl"}, "result": res})
	}
	s := map[string]any{"snippet": n, "turn": turn, "code": "robo.execute_skill('pick up the bowl')", "calls": calls,
		"error": nil, "error_kind": nil, "finished": false, "duration_s": 0.1}
	if kind != "" {
		s["error_kind"] = kind
	}
	if msg != "" {
		s["error"] = msg
	}
	return s
}

// codeDir is rpentDir plus code_policy/ with the snippets.
func codeDir(t *testing.T, transcript map[string]any, states any, snippets ...map[string]any) string {
	t.Helper()
	dir := rpentDir(t, transcript, states)
	if err := os.MkdirAll(filepath.Join(dir, "code_policy"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range snippets {
		b, _ := json.Marshal(s)
		name := filepath.Join(dir, "code_policy", fmt.Sprintf("snippet_%03d.json", s["snippet"]))
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Code mode (--policy-mode code): the snippets' records decide whose a
// failure was; success is still states.json's alone.
func TestRPentLiberoCodePolicy(t *testing.T) {
	ok := `{"status":"executed","instruction":"pick up the bowl","env_steps":5}`
	vlaDown := `{"error":"vla predict_action: 500 Internal Server Error: CUDA error"}`
	// Snippet results go back to the model; a harness that sends them as
	// tool results shows the planner's exception as a tool result error.
	codeResult := `{"error":"NameError: name 'bowl' is not defined","error_kind":"exception"}`
	claim := map[string]any{"success": true, "summary": "done"}
	cases := []struct {
		name     string
		tr       map[string]any
		states   any
		snippets []map[string]any
		exit     Exit
		want     Result
		why      []string
	}{
		{"the last snippet raised: the planner's code", transcript(nil, nil), steps(false),
			[]map[string]any{snippet(1, 1, "", "", ok), snippet(2, 2, "exception", "NameError: name 'bowl' is not defined")}, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonCodeError}, []string{"1 of 2 code snippet(s) failed", "snippet 2 (turn 2) exception", "NameError"}},
		{"the last snippet ran out of time", transcript(nil, nil), steps(false),
			[]map[string]any{snippet(1, 1, "timeout", "TimeoutError: past its 120s limit", "")}, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonCodeTimeout}, []string{"timeout", "120s"}},
		{"the last snippet made too many calls", transcript(nil, nil), steps(false, false),
			[]map[string]any{snippet(1, 1, "max_calls", "a snippet may make 2", ok, ok)}, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonCodeMaxCalls}, []string{"max_calls"}},
		{"an error kind the adapter does not know is the planner's", transcript(nil, nil), steps(false),
			[]map[string]any{snippet(1, 1, "recursion", "RecursionError")}, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonCodeError}, []string{"recursion", "RecursionError"}},
		{"a failed snippet the planner recovered from: out of turns", transcript(nil, nil), steps(false),
			[]map[string]any{snippet(1, 1, "exception", "SyntaxError: line 1"), snippet(2, 2, "", "", ok)}, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: "not_terminated"}, []string{"1 of 2 code snippet(s) failed", "SyntaxError"}},
		{"a snippet's result as a tool result error is not a service error", transcript(nil, nil, codeResult), steps(),
			[]map[string]any{snippet(1, 1, "exception", "NameError: name 'bowl' is not defined")}, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonCodeError}, []string{"NameError"}},
		{"robo.finish claiming success is not success", transcript(claim, nil), steps(false),
			[]map[string]any{snippet(1, 1, "", "", ok)}, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonFinishClaimed}, []string{"claimed success (not counted)"}},
		{"a robo call met a service error: infrastructure", transcript(nil, nil), steps(false),
			[]map[string]any{snippet(1, 1, "", "", ok), snippet(2, 2, "service", "line 1: robo.execute_skill: vla predict_action: 500", vlaDown)}, Exit{},
			Result{FailureClass: schemas.FailureInfra}, []string{"snippet 2 (turn 2)", "service error", "vla predict_action: 500"}},
		{"a service error kind without a message names the failed call", transcript(nil, nil), steps(false),
			[]map[string]any{snippet(1, 3, "service", "", ok, vlaDown)}, Exit{},
			Result{FailureClass: schemas.FailureInfra}, []string{"turn 3", "robo.execute_skill: vla predict_action: 500"}},
		{"a snippet that went on past a failed call still met it", transcript(nil, nil), steps(false),
			[]map[string]any{snippet(1, 1, "", "", vlaDown, ok)}, Exit{},
			Result{FailureClass: schemas.FailureInfra}, []string{"CUDA error"}},
		{"a service error before the env's success: infrastructure", transcript(nil, nil), steps(false, true),
			[]map[string]any{snippet(1, 1, "service", "robo.detect: sam3 segment: 500", vlaDown), snippet(2, 2, "", "", ok)}, Exit{},
			Result{FailureClass: schemas.FailureInfra}, []string{"service error before success", "sam3 segment"}},
		{"a service error after the env's success does not undo it", transcript(nil, nil), steps(true),
			[]map[string]any{snippet(1, 1, "", "", ok), snippet(2, 2, "service", "robo.detect: sam3 segment: 500")}, Exit{},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 1}, []string{"after success (not counted)"}},
		{"success stands against the planner's code errors", transcript(nil, nil), steps(false, true),
			[]map[string]any{snippet(1, 1, "exception", "TypeError"), snippet(2, 2, "timeout", "TimeoutError", ok)}, Exit{},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 2}, []string{"terminated at step 2 of 2"}},
		{"a code error with the model server failing: infrastructure", transcript(nil, nil), steps(false),
			[]map[string]any{snippet(1, 1, "exception", "SyntaxError")}, Exit{Health: Health{ModelFailures: 1, FirstModelFailure: "call 1: HTTP 502"}},
			Result{FailureClass: schemas.FailureInfra}, []string{"HTTP 502"}},
		{"a code error and the episode's timeout: out of time", transcript(nil, nil), steps(false),
			[]map[string]any{snippet(1, 1, "timeout", "TimeoutError")}, Exit{TimedOut: true, Code: -1},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonOutOfTime}, []string{"ran out of time"}},
	}
	spec := schemas.OutcomeSpec{Adapter: "rpent_libero"}
	for _, c := range cases {
		got := Decide(spec, codeDir(t, c.tr, c.states, c.snippets...), c.exit)
		if got.Valid != c.want.Valid || got.Success != c.want.Success || got.Reward != c.want.Reward || got.FailureClass != c.want.FailureClass ||
			got.SuccessTurn != c.want.SuccessTurn || got.Reason != c.want.Reason {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
		for _, w := range c.why {
			if !strings.Contains(got.Termination, w) {
				t.Errorf("%s: termination %q lacks %q", c.name, got.Termination, w)
			}
		}
	}
	// Without code_policy/ the same transcript's tool result error is a
	// service error, as in tool mode.
	if got := Decide(spec, rpentDir(t, transcript(nil, nil, codeResult), steps()), Exit{}); got.Valid {
		t.Errorf("tool mode: a tool result error must be a service error, got %+v", got)
	}
	// An unreadable snippet record is a missing output, named.
	dir := codeDir(t, transcript(nil, nil), steps(false))
	os.WriteFile(filepath.Join(dir, "code_policy", "snippet_001.json"), []byte(`{"turn":`), 0o644)
	if got := Decide(spec, dir, Exit{}); got.Valid || !strings.Contains(got.Termination, "snippet_001.json") {
		t.Errorf("truncated snippet record: %+v", got)
	}
}
