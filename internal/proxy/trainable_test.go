package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
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
