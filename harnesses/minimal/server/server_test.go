package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/episode"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
)

func setup(t *testing.T) (*policy.Policy, *httptest.Server) {
	t.Helper()
	p, err := policy.Load("../weights/w0/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(New(p, "toy", "w0").Handler())
	t.Cleanup(ts.Close)
	return p, ts
}

// chat returns a request body for the first turn of task 2, init id 45.
func chat(t *testing.T, extra map[string]any) (map[string]any, []policy.Message) {
	t.Helper()
	e, err := env.New(2, 45)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []policy.Message{{Role: "system", Content: env.SystemPrompt}, {Role: "user", Content: e.Instruction()}}
	body := map[string]any{"model": "toy", "messages": msgs, "tools": episode.Tools(), "temperature": 1.0}
	for k, v := range extra {
		body[k] = v
	}
	return body, msgs
}

func post(t *testing.T, ts *httptest.Server, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func ints(v any) []int {
	var out []int
	for _, x := range v.([]any) {
		out = append(out, int(x.(float64)))
	}
	return out
}

func TestHealthAndModels(t *testing.T) {
	_, ts := setup(t)
	resp, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health: %d", resp.StatusCode)
	}
	resp, err = http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Object != "list" || len(m.Data) != 1 || m.Data[0].ID != "toy" || m.Data[0].Object != "model" {
		t.Fatalf("/v1/models: %+v", m)
	}
}

func TestErrors(t *testing.T) {
	_, ts := setup(t)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e.Error.Code != 400 || e.Error.Type != "BadRequestError" || e.Error.Message == "" {
		t.Errorf("bad JSON: %d %+v", resp.StatusCode, e)
	}

	body, _ := chat(t, map[string]any{"model": "gpt-4"})
	status, out := post(t, ts, body)
	if status != 404 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "gpt-4") {
		t.Errorf("unknown model: %d %v", status, out)
	}
	for name, extra := range map[string]map[string]any{
		"top_logprobs without logprobs": {"top_logprobs": 2},
		"max_tokens 0":                  {"max_tokens": 0},
		"named tool not offered":        {"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "fly"}}},
		"unknown tool_choice":           {"tool_choice": "sometimes"},
		"no messages":                   {"messages": []any{}},
	} {
		body, _ := chat(t, extra)
		if status, out := post(t, ts, body); status != 400 {
			t.Errorf("%s: status %d %v, want 400", name, status, out)
		}
	}
}

func TestCompletion(t *testing.T) {
	p, ts := setup(t)
	body, msgs := chat(t, map[string]any{"logprobs": true, "top_logprobs": 3, "return_token_ids": true, "seed": 7})
	status, out := post(t, ts, body)
	if status != 200 {
		t.Fatalf("status %d: %v", status, out)
	}
	if !strings.HasPrefix(out["id"].(string), "chatcmpl-") || out["object"] != "chat.completion" || out["model"] != "toy" {
		t.Errorf("envelope: %v", out)
	}
	prompt, _, err := p.Render(msgs, episode.Tools())
	if err != nil {
		t.Fatal(err)
	}
	if got := ints(out["prompt_token_ids"]); !reflect.DeepEqual(got, prompt) {
		t.Errorf("prompt_token_ids differ from the template's rendering")
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	if ch["finish_reason"] != "tool_calls" || ch["stop_reason"] != nil {
		t.Errorf("finish_reason %v stop_reason %v", ch["finish_reason"], ch["stop_reason"])
	}
	msg := ch["message"].(map[string]any)
	if msg["role"] != "assistant" || msg["content"] != nil {
		t.Errorf("message: %v", msg)
	}
	tc := msg["tool_calls"].([]any)[0].(map[string]any)
	fn := tc["function"].(map[string]any)
	if !strings.HasPrefix(tc["id"].(string), "chatcmpl-tool-") || tc["type"] != "function" || fn["arguments"] != "{}" {
		t.Errorf("tool call: %v", tc)
	}
	action, ok := p.ActionIndex(fn["name"].(string))
	if !ok {
		t.Fatalf("tool call names %v, not an action", fn["name"])
	}
	ids := ints(ch["token_ids"])
	if !reflect.DeepEqual(ids, []int{p.Actions[action], p.ImEndID()}) {
		t.Errorf("token_ids %v", ids)
	}
	lp := ch["logprobs"].(map[string]any)["content"].([]any)
	if len(lp) != 2 {
		t.Fatalf("logprobs.content has %d entries, want 2", len(lp))
	}
	want := p.LogProbs(prompt)[action]
	first, second := lp[0].(map[string]any), lp[1].(map[string]any)
	if first["token"] != fn["name"] || math.Abs(first["logprob"].(float64)-want) > 1e-12 {
		t.Errorf("first logprob %v, want %s %v", first, fn["name"], want)
	}
	if second["token"] != policy.ImEnd || second["logprob"].(float64) != 0 {
		t.Errorf("second logprob %v, want forced <|im_end|> at 0", second)
	}
	top := first["top_logprobs"].([]any)
	if len(top) != 3 {
		t.Fatalf("top_logprobs has %d entries, want 3", len(top))
	}
	for i := 1; i < len(top); i++ {
		if top[i].(map[string]any)["logprob"].(float64) > top[i-1].(map[string]any)["logprob"].(float64) {
			t.Errorf("top_logprobs not sorted: %v", top)
		}
	}
	u := out["usage"].(map[string]any)
	if int(u["prompt_tokens"].(float64)) != len(prompt) || u["completion_tokens"].(float64) != 2 || int(u["total_tokens"].(float64)) != len(prompt)+2 {
		t.Errorf("usage %v", u)
	}

	// Without the extras the reply carries none of them.
	body, _ = chat(t, nil)
	_, out = post(t, ts, body)
	ch = out["choices"].([]any)[0].(map[string]any)
	if v, ok := out["prompt_token_ids"]; !ok || v != nil {
		t.Errorf("prompt_token_ids = %v (present %v), want null as vLLM writes it", v, ok)
	}
	if v, ok := ch["token_ids"]; !ok || v != nil {
		t.Errorf("token_ids = %v (present %v), want null as vLLM writes it", v, ok)
	}
	if v, ok := ch["logprobs"]; !ok || v != nil {
		t.Errorf("logprobs = %v, want null", v)
	}
}

func actionOf(t *testing.T, out map[string]any) string {
	t.Helper()
	msg := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if tcs, ok := msg["tool_calls"].([]any); ok && len(tcs) > 0 {
		return tcs[0].(map[string]any)["function"].(map[string]any)["name"].(string)
	}
	return msg["content"].(string)
}

// TestSampling checks seeded replies are reproducible and that, over many
// seeds, actions come at the policy's probabilities.
func TestSampling(t *testing.T) {
	p, ts := setup(t)
	_, msgs := chat(t, nil)
	prompt, _, _ := p.Render(msgs, episode.Tools())
	probs := p.LogProbs(prompt)
	const n = 1500
	counts := map[string]int{}
	for seed := range n {
		body, _ := chat(t, map[string]any{"seed": seed})
		_, out := post(t, ts, body)
		counts[actionOf(t, out)]++
		if seed < 5 {
			_, again := post(t, ts, body)
			if actionOf(t, again) != actionOf(t, out) {
				t.Errorf("seed %d: %s then %s", seed, actionOf(t, out), actionOf(t, again))
			}
		}
	}
	for k, lp := range probs {
		got := float64(counts[p.ActionName(k)]) / n
		if math.Abs(got-math.Exp(lp)) > 0.04 {
			t.Errorf("%s: frequency %.3f, probability %.3f", p.ActionName(k), got, math.Exp(lp))
		}
	}
}

// TestIgnoreSeed: a server told to ignore seeds answers one seeded request
// differently over repeats, as one that does not honour them does; the
// same server honouring them never does.
func TestIgnoreSeed(t *testing.T) {
	p, err := policy.Load("../weights/w0/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, ignore := range []bool{false, true} {
		s := New(p, "toy", "w0")
		s.IgnoreSeed = ignore
		ts := httptest.NewServer(s.Handler())
		body, _ := chat(t, map[string]any{"seed": 11})
		seen := map[string]bool{}
		for range 40 {
			_, out := post(t, ts, body)
			seen[actionOf(t, out)] = true
		}
		ts.Close()
		// w0 spreads its first action over several tools: 40 draws all
		// alike without a seed has odds far below 1e-6.
		if ignore != (len(seen) > 1) {
			t.Errorf("IgnoreSeed %v: 40 repeats of one seeded request gave actions %v", ignore, seen)
		}
	}
}

func TestToolChoiceAndLength(t *testing.T) {
	p, ts := setup(t)
	named := map[string]any{"type": "function", "function": map[string]any{"name": "pick_bowl"}}
	for range 5 {
		body, _ := chat(t, map[string]any{"tool_choice": named})
		_, out := post(t, ts, body)
		if a := actionOf(t, out); a != "pick_bowl" {
			t.Fatalf("named tool_choice: got %s", a)
		}
	}
	body, _ := chat(t, map[string]any{"tool_choice": "none"})
	_, out := post(t, ts, body)
	ch := out["choices"].([]any)[0].(map[string]any)
	msg := ch["message"].(map[string]any)
	if _, ok := p.ActionIndex(msg["content"].(string)); !ok || msg["tool_calls"] != nil || ch["finish_reason"] != "stop" {
		t.Errorf("tool_choice none: %v", ch)
	}
	body, _ = chat(t, map[string]any{"max_tokens": 1, "return_token_ids": true})
	_, out = post(t, ts, body)
	ch = out["choices"].([]any)[0].(map[string]any)
	if ch["finish_reason"] != "length" || len(ints(ch["token_ids"])) != 1 {
		t.Errorf("max_tokens 1: %v", ch)
	}
}

// TestStream checks the SSE chunks against the non-streamed reply of the
// same seed.
func TestStream(t *testing.T) {
	_, ts := setup(t)
	extra := map[string]any{"logprobs": true, "return_token_ids": true, "seed": 3}
	body, _ := chat(t, extra)
	_, plain := post(t, ts, body)
	pch := plain["choices"].([]any)[0].(map[string]any)

	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	b, _ := json.Marshal(body)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var chunks []map[string]any
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not an SSE data line", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		if c["object"] != "chat.completion.chunk" {
			t.Fatalf("chunk object %v", c["object"])
		}
		chunks = append(chunks, c)
	}
	if !done || len(chunks) != 4 {
		t.Fatalf("got %d chunks (done=%v), want role, 2 token chunks, usage, [DONE]", len(chunks), done)
	}
	if !reflect.DeepEqual(chunks[0]["prompt_token_ids"], plain["prompt_token_ids"]) {
		t.Error("first chunk's prompt_token_ids differ from the plain reply's")
	}
	if d := chunks[0]["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any); d["role"] != "assistant" {
		t.Errorf("first delta %v", d)
	}
	var ids []any
	var lps []any
	for _, c := range chunks[1:3] {
		ch := c["choices"].([]any)[0].(map[string]any)
		ids = append(ids, ch["token_ids"].([]any)...)
		lps = append(lps, ch["logprobs"].(map[string]any)["content"].([]any)...)
	}
	if !reflect.DeepEqual(ids, pch["token_ids"]) {
		t.Errorf("streamed token_ids %v, plain %v", ids, pch["token_ids"])
	}
	if !reflect.DeepEqual(lps, pch["logprobs"].(map[string]any)["content"]) {
		t.Errorf("streamed logprobs differ from plain")
	}
	tc := chunks[1]["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	if tc["function"].(map[string]any)["name"] != actionOf(t, plain) || tc["index"].(float64) != 0 {
		t.Errorf("tool call delta %v, plain action %s", tc, actionOf(t, plain))
	}
	if fr := chunks[2]["choices"].([]any)[0].(map[string]any)["finish_reason"]; fr != "tool_calls" {
		t.Errorf("last token chunk finish_reason %v", fr)
	}
	if u := chunks[3]; len(u["choices"].([]any)) != 0 || u["usage"] == nil {
		t.Errorf("usage chunk %v", u)
	}
}

// ReadyAfter: 503 to /health and to a completion while "loading", then
// served as usual.
func TestReadyAfter(t *testing.T) {
	p, err := policy.Load("../weights/w0/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	s := New(p, "toy", "w0")
	s.ReadyAfter(300 * time.Millisecond)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	health := func() int {
		t.Helper()
		resp, err := http.Get(ts.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := health(); got != http.StatusServiceUnavailable {
		t.Fatalf("/health while loading: %d, want 503", got)
	}
	body, _ := chat(t, nil)
	if code, out := post(t, ts, body); code != http.StatusServiceUnavailable || out["error"] == nil {
		t.Fatalf("completion while loading: %d %v, want 503 with an error", code, out)
	}
	time.Sleep(400 * time.Millisecond)
	if got := health(); got != http.StatusOK {
		t.Fatalf("/health after loading: %d, want 200", got)
	}
	if code, out := post(t, ts, body); code != http.StatusOK {
		t.Fatalf("completion after loading: %d %v", code, out)
	}
}

// With sleep mode, the server sleeps (completions 503), reloads its
// weights through its loader and wakes, as vLLM's endpoints do; without,
// those endpoints do not exist.
func TestSleepModeReloadsWeights(t *testing.T) {
	p, err := policy.Load("../weights/w0/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	loads := 0
	s := New(p, "toy", "w0")
	s.EnableSleepMode(func() (*policy.Policy, error) { loads++; return policy.Load("../weights/w0/policy.json") })
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	call := func(method, path, body string) int {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := call("POST", "/sleep?level=2", ""); got != 200 {
		t.Fatalf("sleep: %d", got)
	}
	body, _ := chat(t, nil)
	if status, _ := post(t, ts, body); status != http.StatusServiceUnavailable {
		t.Errorf("a completion while asleep: %d, want 503", status)
	}
	if got := call("POST", "/collective_rpc", `{"method":"reload_weights"}`); got != 200 || loads != 1 {
		t.Errorf("reload_weights: %d, %d loads", got, loads)
	}
	if got := call("POST", "/collective_rpc", `{"method":"update_config"}`); got != 400 {
		t.Errorf("an unknown method: %d, want 400", got)
	}
	if got := call("POST", "/wake_up?tags=weights", ""); got != 200 {
		t.Fatalf("wake_up: %d", got)
	}
	if status, _ := post(t, ts, body); status != http.StatusOK {
		t.Errorf("a completion after waking: %d", status)
	}
	_, plain := setup(t)
	req, _ := http.NewRequest("POST", plain.URL+"/sleep", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 404 {
		t.Errorf("sleep without sleep mode: %v %v", resp.StatusCode, err)
	}
}
