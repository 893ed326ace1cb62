package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// stub is a deterministic model server that answers like vLLM >= 0.10.2
// (vllm/entrypoints/openai/chat_completion/{protocol,serving}.py):
//   - non-streamed: ChatCompletionResponse.model_dump(), so unrequested
//     fields are present as null: top-level prompt_token_ids, choices[].token_ids
//     and choices[].logprobs;
//   - streamed: chunk.model_dump_json(exclude_unset=True); the first chunk
//     passes prompt_token_ids explicitly (null when not requested), every token
//     chunk passes logprobs and token_ids explicitly, and a token that yields no
//     delta (the tool-call control token) produces an empty-delta chunk only
//     when logprobs or token ids were requested.
type stub struct {
	srv      *httptest.Server
	mode     stubMode
	tokenIDs bool // understands return_token_ids
	logprobs bool // understands logprobs

	mu        sync.Mutex
	bodies    [][]byte // chat completion bodies received
	lastQuery string   // query of the last /v1/models call
	gate      chan struct{}
	firstSent chan struct{} // closed after the first streamed event when gate is set
}

type stubMode int

const (
	modeOK   stubMode = iota
	modeFail          // 500 with a vLLM ErrorResponse
	modeHang          // never answers; returns when the request is canceled
)

func newStub(t *testing.T, mode stubMode) *stub {
	s := &stub{mode: mode, tokenIDs: true, logprobs: true}
	s.srv = httptest.NewServer(s)
	t.Cleanup(s.srv.Close)
	return s
}

// pauseStreams makes streams stop after their first event until release is
// called; firstSent is closed when a paused stream has sent its first event.
func (s *stub) pauseStreams() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
	s.firstSent = make(chan struct{})
	g := s.gate
	return sync.OnceFunc(func() { close(g) })
}

func (s *stub) chatBodies() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.bodies...)
}

func (s *stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		s.mu.Lock()
		s.lastQuery = r.URL.RawQuery
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"toy","object":"model","created":1700000000,"owned_by":"vllm","root":"toy","parent":null,"max_model_len":4096,"permission":[]}]}`))
	case "/v1/chat/completions":
		s.chat(w, r)
	case "/health":
		w.WriteHeader(http.StatusOK)
	case "/tokenize":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"count":2,"max_model_len":4096,"tokens":[7,8]}`))
	default:
		http.NotFound(w, r)
	}
}

type stubRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Tools         []json.RawMessage `json:"tools"`
	Stream        bool              `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Logprobs       bool `json:"logprobs"`
	TopLogprobs    int  `json:"top_logprobs"`
	ReturnTokenIDs bool `json:"return_token_ids"`
}

type stubToken struct {
	id   int
	text string // "" for the control token, which yields no delta
}

type generation struct {
	id, callID string
	prompt     []int
	tokens     []stubToken
	tool       bool
	args       string
}

func tokenize(s string) []int {
	ids := make([]int, len(s))
	for i := range len(s) {
		ids[i] = 1000 + int(s[i])
	}
	return ids
}

// stubLogprob is the logprob of the i-th completion token.
func stubLogprob(i int) float64 { return -0.1 * float64(i+1) }

// generate depends only on the conversation, not on the output options, so
// the same conversation asked for with or without the added fields yields the
// same completion (as with greedy decoding).
func generate(req stubRequest) generation {
	conv, _ := json.Marshal([]any{req.Messages, len(req.Tools)})
	sum := sha256.Sum256(conv)
	h := hex.EncodeToString(sum[:])
	g := generation{id: "chatcmpl-" + h[:16], callID: "call_" + h[16:24]}
	last := ""
	for _, m := range req.Messages {
		g.prompt = append(g.prompt, 1)
		g.prompt = append(g.prompt, tokenize(m.Role+": "+m.Content)...)
		if m.Role == "user" {
			last = m.Content
		}
	}
	g.prompt = append(g.prompt, 2)
	text := "ok: " + last
	if len(req.Tools) > 0 {
		g.tool = true
		target, _ := json.Marshal(last)
		g.args = `{"target":` + string(target) + `}`
		g.tokens = append(g.tokens, stubToken{id: 7}) // <tool_call>
		text = g.args
	}
	for i := range len(text) {
		g.tokens = append(g.tokens, stubToken{id: 1000 + int(text[i]), text: text[i : i+1]})
	}
	return g
}

func (s *stub) chat(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	gate, firstSent := s.gate, s.firstSent
	s.mu.Unlock()
	switch s.mode {
	case modeFail:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":{"message":"engine crashed","type":"InternalServerError","param":null,"code":500}}`))
		return
	case modeHang:
		<-r.Context().Done()
		return
	}
	var req stubRequest
	if err := json.Unmarshal(body, &req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	req.ReturnTokenIDs = req.ReturnTokenIDs && s.tokenIDs
	req.Logprobs = req.Logprobs && s.logprobs
	g := generate(req)
	if req.Stream {
		s.stream(w, r, req, g, gate, firstSent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.completion(req, g))
}

func (s *stub) logprobEntry(req stubRequest, i int) json.RawMessage {
	tops := []json.RawMessage{}
	for k := range req.TopLogprobs {
		tops = append(tops, obj("token", fmt.Sprintf("t%d", k), "logprob", stubLogprob(i)-float64(k), "bytes", []int{116}))
	}
	tok := fmt.Sprintf("tok%d", i)
	var utf8 []int // as vLLM: the token's UTF-8 bytes as numbers
	for _, c := range []byte(tok) {
		utf8 = append(utf8, int(c))
	}
	return obj("token", tok, "logprob", stubLogprob(i), "bytes", utf8, "top_logprobs", tops)
}

func (s *stub) completion(req stubRequest, g generation) []byte {
	var ids []int
	var lps []json.RawMessage
	text := ""
	for i, tk := range g.tokens {
		ids = append(ids, tk.id)
		lps = append(lps, s.logprobEntry(req, i))
		text += tk.text
	}
	var content any = text
	message := []any{"role", "assistant", "content", content, "refusal", nil, "annotations", nil, "audio", nil, "function_call", nil}
	finish := "stop"
	if g.tool {
		message[3] = nil
		tc := obj("id", g.callID, "type", "function", "function", obj("name", "move_to", "arguments", g.args))
		message = append(message, "tool_calls", arr(tc))
		finish = "tool_calls"
	}
	message = append(message, "reasoning", nil)
	var logprobs, tokenIDs, promptIDs any
	if req.Logprobs {
		logprobs = obj("content", arr(lps...))
	}
	if req.ReturnTokenIDs {
		tokenIDs, promptIDs = ids, g.prompt
	}
	choice := obj("index", 0, "message", obj(message...), "logprobs", logprobs, "finish_reason", finish,
		"stop_reason", nil, "token_ids", tokenIDs, "routed_experts", nil)
	return obj("id", g.id, "object", "chat.completion", "created", 1700000000, "model", "toy",
		"choices", arr(choice), "service_tier", nil, "system_fingerprint", nil,
		"usage", obj("prompt_tokens", len(g.prompt), "total_tokens", len(g.prompt)+len(ids),
			"completion_tokens", len(ids), "prompt_tokens_details", nil),
		"prompt_logprobs", nil, "prompt_token_ids", promptIDs, "prompt_text", nil, "kv_transfer_params", nil)
}

func (s *stub) stream(w http.ResponseWriter, r *http.Request, req stubRequest, g generation, gate, firstSent chan struct{}) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	fl := w.(http.Flusher)
	send := func(chunk []byte) {
		fmt.Fprintf(w, "data: %s\n\n", chunk)
		fl.Flush()
	}
	head := []any{"id", g.id, "object", "chat.completion.chunk", "created", 1700000000, "model", "toy"}
	chunk := func(choices json.RawMessage, extra ...any) []byte {
		return obj(append(append(append([]any{}, head...), "choices", choices), extra...)...)
	}
	var promptIDs any
	if req.ReturnTokenIDs {
		promptIDs = g.prompt
	}
	send(chunk(arr(obj("index", 0, "delta", obj("role", "assistant", "content", ""), "logprobs", nil, "finish_reason", nil)),
		"prompt_token_ids", promptIDs, "prompt_text", nil))
	if gate != nil {
		close(firstSent)
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	argsSent := false
	for i, tk := range g.tokens {
		var delta json.RawMessage
		switch {
		case tk.text == "": // control token: no delta
			delta = obj()
		case g.tool && !argsSent:
			argsSent = true
			delta = obj("tool_calls", arr(obj("id", g.callID, "type", "function", "index", 0,
				"function", obj("name", "move_to", "arguments", tk.text))))
		case g.tool:
			delta = obj("tool_calls", arr(obj("index", 0, "function", obj("arguments", tk.text))))
		default:
			delta = obj("content", tk.text)
		}
		last := i == len(g.tokens)-1
		if tk.text == "" && !last && !req.Logprobs && !req.ReturnTokenIDs {
			continue // vLLM skips a delta-less chunk unless logprobs/token ids are on
		}
		var logprobs, tokenIDs any
		if req.Logprobs {
			logprobs = obj("content", arr(s.logprobEntry(req, i)))
		}
		if req.ReturnTokenIDs {
			tokenIDs = []int{tk.id}
		}
		choice := []any{"index", 0, "delta", delta, "logprobs", logprobs, "finish_reason", nil}
		if last {
			finish := "stop"
			if g.tool {
				finish = "tool_calls"
			}
			choice = []any{"index", 0, "delta", delta, "logprobs", logprobs, "finish_reason", finish, "stop_reason", nil}
		}
		choice = append(choice, "token_ids", tokenIDs)
		send(chunk(arr(obj(choice...))))
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		n := len(g.tokens)
		send(chunk(arr(), "usage", obj("prompt_tokens", len(g.prompt), "total_tokens", len(g.prompt)+n, "completion_tokens", n)))
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// obj builds a JSON object with keys in the given order; nil values are null.
func obj(kv ...any) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv[i].(string))
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(kv[i+1])
		if err != nil {
			panic(err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func arr(vs ...json.RawMessage) json.RawMessage {
	if len(vs) == 0 {
		return json.RawMessage("[]")
	}
	return encodeArray(vs)
}
