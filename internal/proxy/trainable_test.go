package proxy

import (
	"cmp"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/sampling"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// A response whose ids disagree with its own usage (tokens lost by the
// server) is recorded but never trainable.
func TestIDsMustMatchUsage(t *testing.T) {
	for _, c := range []struct {
		name, usage string
		trainable   bool
	}{
		{"consistent", `{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}`, true},
		{"completion ids lost", `{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}`, false},
		{"prompt ids lost", `{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}`, false},
	} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","model":"toy","prompt_token_ids":[1,2],` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop","token_ids":[7,8],` +
				`"logprobs":{"content":[{"token":"o","logprob":-0.5,"bytes":[111],"top_logprobs":[]},{"token":"k","logprob":-0.1,"bytes":[107],"top_logprobs":[]}]}}],` +
				`"usage":` + c.usage + `}`))
		}))
		p, srv := newProxy(t, nil, Options{})
		p.SetUpstream(up.URL)
		prefix := p.Begin(named("u"))
		if status, _, b := post(t, srv.URL+prefix+"/chat/completions", chatBody("hi", reqOpts{})); status != 200 {
			t.Fatalf("%s: status %d %s", c.name, status, b)
		}
		recs := p.End(idOf("u"))
		up.Close()
		if len(recs) != 1 || recs[0].Trainable != c.trainable {
			t.Errorf("%s: trainable = %v, want %v", c.name, recs[0].Trainable, c.trainable)
		}
		if len(recs[0].CompletionTokenIDs) != 2 {
			t.Errorf("%s: ids must be recorded as the server sent them, got %v", c.name, recs[0].CompletionTokenIDs)
		}
	}
}

// Each call records its effective sampling settings, the request's and
// the server's defaults for the rest, and trains only under the rule of
// docs/design.md §3 ("Sampling settings"); the body goes upstream as sent.
func TestSamplingRecorded(t *testing.T) {
	qwen := schemas.Sampling{Temperature: 0.1, TopP: 0.001, TopK: 1, RepetitionPenalty: 1.05, LogprobsMode: schemas.LogprobsRaw}
	processed := sampling.Neutral
	processed.LogprobsMode = schemas.LogprobsProcessed
	all := sampling.Settings
	for _, c := range []struct {
		name      string
		extra     string // members added to a request that gives no setting
		defaults  schemas.Sampling
		temp      float64
		topK      int32
		defaulted []string
		reason    string
	}{
		{"temperature 1, vLLM defaults", `"temperature": 1`, schemas.Sampling{}, 1, 0, all[1:], ""},
		{"nothing given, neutral defaults", ``, schemas.Sampling{}, 1, 0, all, ""},
		{"nothing given, a checkpoint's near-greedy defaults", ``, qwen, 0.1, 1, all,
			"temperature_raw,top_p,top_k,repetition_penalty"},
		{"null is left out", `"temperature": null, "top_p": null`, qwen, 0.1, 1, all,
			"temperature_raw,top_p,top_k,repetition_penalty"},
		{"every setting given neutrally over such defaults", `"temperature": 1.0, "top_p": 1, "top_k": -1, "min_p": 0, ` +
			`"repetition_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0`, qwen, 1, 0, nil, ""},
		{"temperature 0.7, raw logprobs", `"temperature": 0.7`, schemas.Sampling{}, 0.7, 0, all[1:], "temperature_raw"},
		{"temperature 0.7, processed logprobs", `"temperature": 0.7`, processed, 0.7, 0, all[1:], ""},
		{"greedy", `"temperature": 0`, processed, 0, 0, all[1:], "greedy"},
		{"top_k 20 and a presence penalty", `"top_k": 20, "presence_penalty": 0.5`, processed, 1, 20,
			[]string{"temperature", "top_p", "min_p", "repetition_penalty", "frequency_penalty"}, "top_k,presence_penalty"},
		{"tool_choice required", `"temperature": 1, "tool_choice": "required"`, processed, 1, 0, all[1:], "structured_output"},
		{"a named tool", `"temperature": 1, "tool_choice": {"type": "function", "function": {"name": "move_to"}}`, processed, 1, 0, all[1:], "structured_output"},
		{"tool_choice auto, text format, empty bias", `"temperature": 1, "tool_choice": "auto", "response_format": {"type": "text"}, "logit_bias": { }`,
			processed, 1, 0, all[1:], ""},
		{"json schema, logit bias, min_tokens", `"temperature": 1, "response_format": {"type": "json_schema", "json_schema": {}}, ` +
			`"logit_bias": {"5": -100}, "min_tokens": 3`, processed, 1, 0, all[1:], "structured_output,logit_bias,min_tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sent []byte
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sent, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","model":"toy","prompt_token_ids":[1,2],` +
					`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop","token_ids":[7],` +
					`"logprobs":{"content":[{"token":"o","logprob":-0.5}]}}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`))
			}))
			defer up.Close()
			p, srv := newProxy(t, nil, Options{})
			p.SetUpstream(up.URL)
			ep := named("s")
			ep.Sampling = c.defaults
			prefix := p.Begin(ep)
			body := `{"model": "toy", "messages": [{"role": "user", "content": "hi"}], "logprobs": true, "return_token_ids": true`
			if c.extra != "" {
				body += ", " + c.extra
			}
			body += "}"
			if status, _, b := post(t, srv.URL+prefix+"/chat/completions", []byte(body)); status != 200 {
				t.Fatalf("status %d %s", status, b)
			}
			recs := p.End(idOf("s"))
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			r := recs[0]
			if string(sent) != body {
				t.Errorf("sent upstream %s, want the body as given %s", sent, body)
			}
			if r.Temperature != c.temp || r.TopK != c.topK || !slices.Equal(r.Defaulted, c.defaulted) {
				t.Errorf("recorded temperature %v top_k %d defaulted %v, want %v %d %v", r.Temperature, r.TopK, r.Defaulted, c.temp, c.topK, c.defaulted)
			}
			wantMode := cmp.Or(c.defaults.LogprobsMode, schemas.LogprobsRaw)
			if r.LogprobsMode != wantMode {
				t.Errorf("logprobs mode %q, want %q", r.LogprobsMode, wantMode)
			}
			if r.UntrainableReason != c.reason || r.Trainable != (c.reason == "") {
				t.Errorf("trainable %v, reason %q; want reason %q", r.Trainable, r.UntrainableReason, c.reason)
			}
		})
	}
}
