// Package server serves the toy policy over OpenAI Chat Completions the way
// vLLM (≥ 0.10.2, hermes-style tool parsing) does, so the recording proxy
// and the harness meet the same wire format as in production:
//
//   - GET /health → 200; GET /v1/models → the served name. After
//     ReadyAfter(d), every request is answered 503 for d, as a model
//     server that is still loading its weights fails its readiness check.
//   - POST /v1/chat/completions honours model (404 unless the served name),
//     messages, tools, tool_choice (auto, required, none, named), temperature,
//     top_p, top_k, min_p, repetition_penalty (presence_penalty and
//     frequency_penalty are checked and count output tokens only, so they
//     cannot touch the toy's one decision), seed (reproducible sampling,
//     unless IgnoreSeed), max_tokens / max_completion_tokens, logprobs +
//     top_logprobs, return_token_ids, stream + stream_options. Sampling
//     follows vLLM's sampler (policy.SampleWith): temperature 0 is greedy
//     (and drops top_k, top_p and min_p), a temperature below 0.01 is raised
//     to 0.01, as vLLM does.
//   - Omitted sampling fields take Defaults, vLLM's defaults from the
//     weights' generation_config.json (--generation-config auto;
//     GenerationConfig), else the neutral ones: temperature 1, top_p 1,
//     top_k off, min_p 0, repetition_penalty 1.
//   - Logprobs are LogprobsMode's: raw_logprobs (vLLM's default) reports
//     log softmax of the logits as the model gives them, whatever the
//     request's sampling settings; processed_logprobs reports them under
//     the distribution the token was drawn from (penalised, tempered,
//     truncated and renormalised; a greedy request's without temperature
//     or truncation, as vLLM's all-greedy batch). Truncated alternatives
//     in top_logprobs read -9999.0, vLLM's stand-in for -inf.
//   - The reply is one tool call (finish_reason "tool_calls") whose token ids
//     are [action, <|im_end|>]; logprobs.content has one entry per completion
//     token; token_ids (in the choice) and prompt_token_ids (top level; in
//     streaming, in the first chunk) appear only when return_token_ids is set.
//
// Without tools or with tool_choice "none" the action word is returned as
// content (finish_reason "stop"); max_tokens 1 cuts the reply after the
// action (finish_reason "length", content only, as an unparsed tool call).
package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
)

// MaxModelLen is the context length the server reports and enforces.
const MaxModelLen = 32768

// maxTopLogprobs is vLLM's default --max-logprobs.
const maxTopLogprobs = 20

// Server answers for one policy under one served model name.
type Server struct {
	p       atomic.Pointer[policy.Policy] // replaced by reload_weights
	name    string
	root    string
	created int64

	mu  sync.Mutex
	rng *rand.Rand // for requests without a seed

	readyAt time.Time // 503 to every request before this (ReadyAfter)

	// IgnoreSeed samples every request from the shared generator, seed or
	// not: a server that does not honour per-request seeds, which the
	// recording proxy's seed check must catch. Set before serving.
	IgnoreSeed bool

	// LogprobsMode is what logprobs report, vLLM's --logprobs-mode (empty:
	// raw_logprobs). Set before serving.
	LogprobsMode LogprobsMode

	// Defaults fill the sampling fields a request omits, as vLLM fills
	// them from generation_config.json (GenerationConfig). Read once at
	// start: reload_weights does not change them, as in vLLM, which reads
	// the generation config with the model config. Set before serving.
	Defaults Defaults

	// Sleep mode (EnableSleepMode): vLLM's endpoints for swapping weights
	// in a running server.
	sleepMode bool
	load      func() (*policy.Policy, error)
	asleep    atomic.Int32 // 0 awake, else the level
}

// New serves p as model name; root is reported by /v1/models (the weights).
func New(p *policy.Policy, name, root string) *Server {
	s := &Server{name: name, root: root, created: time.Now().Unix(),
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	s.p.Store(p)
	return s
}

func (s *Server) pol() *policy.Policy { return s.p.Load() }

// EnableSleepMode serves vLLM's sleep-mode endpoints, as vLLM does with
// --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1 (0.10.2 and later for
// reload_weights): POST /sleep?level=1|2, POST /wake_up (?tags= accepted),
// GET /is_sleeping and POST /collective_rpc {"method": "reload_weights"},
// which reads the weights again through load (from the same path, where a
// rollout host has put other weights). While asleep, completions are
// answered 503. Call it before Handler.
func (s *Server) EnableSleepMode(load func() (*policy.Policy, error)) {
	s.sleepMode, s.load = true, load
}

func (s *Server) sleep(w http.ResponseWriter, r *http.Request) {
	level := 1
	if v := r.URL.Query().Get("level"); v == "2" {
		level = 2
	} else if v != "" && v != "1" {
		apiError(w, http.StatusBadRequest, "", "level %q: give 1 or 2", v)
		return
	}
	s.asleep.Store(int32(level))
	w.WriteHeader(http.StatusOK)
}

func (s *Server) wake(w http.ResponseWriter, _ *http.Request) {
	s.asleep.Store(0)
	w.WriteHeader(http.StatusOK)
}

func (s *Server) isSleeping(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"is_sleeping": s.asleep.Load() != 0})
}

func (s *Server) rpc(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Method string `json:"method"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "", "body: %v", err)
		return
	}
	if req.Method != "reload_weights" {
		apiError(w, http.StatusBadRequest, "", "method %q: this server knows reload_weights", req.Method)
		return
	}
	p, err := s.load()
	if err != nil {
		apiError(w, http.StatusInternalServerError, "", "reload_weights: %v", err)
		return
	}
	s.p.Store(p)
	writeJSON(w, http.StatusOK, map[string]any{"results": []any{nil}})
}

// ReadyAfter makes the server answer every request, /health included,
// with 503 for d from now: a stand-in for a big model's load time, which
// a rollout host waits out in its readiness check. Call it before Handler.
func (s *Server) ReadyAfter(d time.Duration) {
	s.readyAt = time.Now().Add(d)
}

// Handler routes the endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		if s.asleep.Load() != 0 {
			apiError(w, http.StatusServiceUnavailable, "", "the model is asleep (POST /wake_up)")
			return
		}
		s.chat(w, r)
	})
	if s.sleepMode {
		mux.HandleFunc("POST /sleep", s.sleep)
		mux.HandleFunc("POST /wake_up", s.wake)
		mux.HandleFunc("GET /is_sleeping", s.isSleeping)
		mux.HandleFunc("POST /collective_rpc", s.rpc)
	}
	readyAt := s.readyAt
	if readyAt.IsZero() {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if left := time.Until(readyAt); left > 0 {
			apiError(w, http.StatusServiceUnavailable, "", "the model is still loading (ready in %s)", left.Round(100*time.Millisecond))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.name, "object": "model", "created": s.created, "owned_by": "vllm",
			"root": s.root, "parent": nil, "max_model_len": MaxModelLen,
		}},
	})
}

// apiError is vLLM's error body: {"error": {message, type, param, code}}.
func apiError(w http.ResponseWriter, status int, param, format string, args ...any) {
	typ := map[int]string{400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}[status]
	if typ == "" {
		typ = "InternalServerError"
	}
	var p any
	if param != "" {
		p = param
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": fmt.Sprintf(format, args...), "type": typ, "param": p, "code": status,
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // the client went away if this fails; nothing to do
}

type request struct {
	Model               string           `json:"model"`
	Messages            []policy.Message `json:"messages"`
	Tools               []policy.Tool    `json:"tools"`
	ToolChoice          json.RawMessage  `json:"tool_choice"`
	Temperature         *float64         `json:"temperature"`
	TopP                *float64         `json:"top_p"`
	TopK                *int             `json:"top_k"`
	MinP                *float64         `json:"min_p"`
	RepetitionPenalty   *float64         `json:"repetition_penalty"`
	PresencePenalty     *float64         `json:"presence_penalty"`
	FrequencyPenalty    *float64         `json:"frequency_penalty"`
	Seed                *int64           `json:"seed"`
	MaxTokens           *int             `json:"max_tokens"`
	MaxCompletionTokens *int             `json:"max_completion_tokens"`
	Logprobs            bool             `json:"logprobs"`
	TopLogprobs         *int             `json:"top_logprobs"`
	ReturnTokenIDs      bool             `json:"return_token_ids"`
	N                   *int             `json:"n"`
	Stream              bool             `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// plan is what one request asks for, checked.
type plan struct {
	prompt    []int
	images    [][]float64 // features of the prompt's images, in order
	sampling  policy.Sampling
	force     int  // action index of a named tool_choice, else -1
	callTools bool // reply with a tool call (else content)
	named     bool
	maxTokens int
	topK      int
	rng       *rand.Rand
}

func (s *Server) parse(r *request) (plan, string, error) {
	pl := plan{force: -1, maxTokens: 2}
	if len(r.Messages) == 0 {
		return pl, "messages", errors.New("messages must not be empty")
	}
	if r.N != nil && *r.N != 1 {
		return pl, "n", errors.New("only n=1 is supported by the toy model")
	}
	smp, param, err := s.sampling(r)
	if err != nil {
		return pl, param, err
	}
	pl.sampling = smp
	maxTokens := []*int{r.MaxTokens, r.MaxCompletionTokens}
	if r.MaxTokens == nil && r.MaxCompletionTokens == nil {
		maxTokens = []*int{s.Defaults.MaxTokens} // generation_config's max_new_tokens
	}
	for _, mt := range maxTokens {
		if mt != nil {
			if *mt < 1 {
				return pl, "max_tokens", errors.New("max_tokens must be at least 1")
			}
			pl.maxTokens = min(pl.maxTokens, *mt)
		}
	}
	if r.TopLogprobs != nil {
		switch {
		case *r.TopLogprobs < 0:
			return pl, "top_logprobs", errors.New("top_logprobs must be non-negative")
		case *r.TopLogprobs > 0 && !r.Logprobs:
			return pl, "top_logprobs", errors.New("when using `top_logprobs`, `logprobs` must be set to true")
		case *r.TopLogprobs > maxTopLogprobs:
			return pl, "top_logprobs", fmt.Errorf("top_logprobs must be at most %d", maxTopLogprobs)
		}
		pl.topK = *r.TopLogprobs
	}
	choice := "auto"
	if c := strings.TrimSpace(string(r.ToolChoice)); c != "" && c != "null" {
		var named struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(r.ToolChoice, &choice) != nil {
			if err := json.Unmarshal(r.ToolChoice, &named); err != nil || named.Function.Name == "" {
				return pl, "tool_choice", errors.New(`tool_choice must be "none", "auto", "required" or {"type":"function","function":{"name":…}}`)
			}
			choice = "named"
			if !slices.ContainsFunc(r.Tools, func(t policy.Tool) bool { return t.Function.Name == named.Function.Name }) {
				return pl, "tool_choice", fmt.Errorf("tool_choice names %q, which is not in tools", named.Function.Name)
			}
			k, ok := s.pol().ActionIndex(named.Function.Name)
			if !ok {
				return pl, "tool_choice", fmt.Errorf("the toy model cannot call %q: not one of its action tokens", named.Function.Name)
			}
			pl.force, pl.named = k, true
		}
	}
	switch choice {
	case "auto", "none", "required", "named":
	default:
		return pl, "tool_choice", fmt.Errorf("unknown tool_choice %q", choice)
	}
	if (choice == "required" || choice == "named") && len(r.Tools) == 0 {
		return pl, "tool_choice", fmt.Errorf("tool_choice %q needs tools", choice)
	}
	pl.callTools = len(r.Tools) > 0 && choice != "none"
	prompt, images, err := s.pol().Render(r.Messages, r.Tools)
	if err != nil {
		return pl, "messages", err
	}
	if len(prompt)+pl.maxTokens > MaxModelLen {
		return pl, "messages", fmt.Errorf("this model's maximum context length is %d tokens; the messages have %d", MaxModelLen, len(prompt))
	}
	pl.prompt, pl.images = prompt, images
	if r.Seed != nil && !s.IgnoreSeed {
		pl.rng = rand.New(rand.NewPCG(uint64(*r.Seed), 0))
	}
	return pl, "", nil
}

func (s *Server) sample(pl plan) policy.Completion {
	if pl.rng != nil {
		return s.pol().SampleWith(pl.prompt, pl.sampling, pl.force, pl.rng, pl.images...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pol().SampleWith(pl.prompt, pl.sampling, pl.force, s.rng, pl.images...)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req request
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		apiError(w, http.StatusBadRequest, "", "read body: %v", err)
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		apiError(w, http.StatusBadRequest, "", "invalid JSON body: %v", err)
		return
	}
	if req.Model != s.name {
		apiError(w, http.StatusNotFound, "model", "The model `%s` does not exist.", req.Model)
		return
	}
	pl, param, err := s.parse(&req)
	if err != nil {
		apiError(w, http.StatusBadRequest, param, "%v", err)
		return
	}
	c := s.sample(pl)
	rep := s.reply(pl, c)
	if req.Stream {
		s.stream(w, &req, pl, rep)
		return
	}
	choice := map[string]any{
		"index":         0,
		"message":       rep.message,
		"logprobs":      nil,
		"finish_reason": rep.finish,
		"stop_reason":   nil,
	}
	// Fields that were not asked for are null, not absent, as vLLM's
	// model_dump() writes them.
	choice["logprobs"], choice["token_ids"] = nil, nil
	if req.Logprobs {
		choice["logprobs"] = map[string]any{"content": rep.logprobs}
	}
	if req.ReturnTokenIDs {
		choice["token_ids"] = rep.ids
	}
	resp := map[string]any{
		"id":      rep.id,
		"object":  "chat.completion",
		"created": rep.created,
		"model":   s.name,
		"choices": []any{choice},
		"usage":   usage(len(pl.prompt), len(rep.ids)),
		// null unless asked for, like vLLM
		"prompt_token_ids": nil,
	}
	if req.ReturnTokenIDs {
		resp["prompt_token_ids"] = pl.prompt
	}
	writeJSON(w, http.StatusOK, resp)
}

func usage(prompt, completion int) map[string]int {
	return map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
}

// reply is a generated answer in wire terms.
type reply struct {
	id, callID string
	created    int64
	ids        []int
	logprobs   []logprob
	message    map[string]any
	action     string
	finish     string
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type logprob struct {
	topLogprob
	TopLogprobs []topLogprob `json:"top_logprobs"`
}

func (s *Server) reply(pl plan, c policy.Completion) reply {
	rep := reply{
		id:      fmt.Sprintf("chatcmpl-%016x%016x", rand.Uint64(), rand.Uint64()),
		callID:  fmt.Sprintf("chatcmpl-tool-%016x%016x", rand.Uint64(), rand.Uint64()),
		created: time.Now().Unix(),
		ids:     c.IDs[:pl.maxTokens],
		action:  s.pol().ActionName(c.Action),
	}
	dist := c.Dist
	if s.LogprobsMode == ProcessedLogprobs {
		dist = c.Processed
	}
	for i := range rep.ids {
		rep.logprobs = append(rep.logprobs, s.logprob(c, dist, i, pl.topK))
	}
	switch {
	case len(rep.ids) < len(c.IDs):
		// Cut before <|im_end|>: the tool call is unfinished, so the parser
		// leaves the text as content.
		rep.finish = "length"
		rep.message = map[string]any{"role": "assistant", "content": rep.action}
	case pl.callTools:
		rep.finish = "tool_calls"
		if pl.named {
			rep.finish = "stop" // vLLM reports a named function call as a plain stop
		}
		rep.message = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": rep.callID, "type": "function",
			"function": map[string]any{"name": rep.action, "arguments": "{}"},
		}}}
	default:
		rep.finish = "stop"
		rep.message = map[string]any{"role": "assistant", "content": rep.action}
	}
	return rep
}

func byteList(s string) []int {
	out := make([]int, 0, len(s))
	for _, b := range []byte(s) {
		out = append(out, int(b))
	}
	return out
}

// logprob is the logprobs entry of completion token i with its top k
// alternatives, dist being log π over the actions at the decision (raw or
// processed). Tokens the model cannot emit there, or that truncation
// removed, have probability 0, reported as -9999.0 the way vLLM clamps
// -inf.
func (s *Server) logprob(c policy.Completion, dist []float64, i, k int) logprob {
	tok := s.pol().Token(c.IDs[i])
	own := c.Logprobs[i] // forced tokens: 0
	if i == 0 {
		own = clampInf(dist[c.Action])
	}
	e := logprob{topLogprob: topLogprob{tok, own, byteList(tok)}, TopLogprobs: []topLogprob{}}
	if k == 0 {
		return e
	}
	lp := make([]float64, len(s.pol().Vocab))
	for id := range lp {
		lp[id] = -9999.0
	}
	if i == 0 {
		for a, id := range s.pol().Actions {
			lp[id] = clampInf(dist[a])
		}
	} else {
		lp[c.IDs[i]] = 0 // forced
	}
	ids := make([]int, len(lp))
	for id := range ids {
		ids[id] = id
	}
	slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(lp[b], lp[a]) })
	for _, id := range ids[:min(k, len(ids))] {
		t := s.pol().Token(id)
		e.TopLogprobs = append(e.TopLogprobs, topLogprob{t, lp[id], byteList(t)})
	}
	return e
}

// stream writes the reply as vLLM's server-sent events: a role chunk (with
// prompt_token_ids when asked), one chunk per completion token (the tool call
// or content with the first, finish_reason with the last), an optional usage
// chunk, then [DONE].
func (s *Server) stream(w http.ResponseWriter, req *request, pl plan, rep reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(v any) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if enc.Encode(v) != nil {
			return
		}
		fmt.Fprintf(w, "data: %s\n\n", bytes.TrimSpace(b.Bytes()))
		if flusher != nil {
			flusher.Flush()
		}
	}
	chunk := func(choices []any) map[string]any {
		return map[string]any{"id": rep.id, "object": "chat.completion.chunk", "created": rep.created, "model": s.name, "choices": choices}
	}
	// vLLM passes prompt_token_ids and token_ids explicitly, so they appear
	// as null in chunks even when not requested.
	first := chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "logprobs": nil, "finish_reason": nil, "token_ids": nil}})
	first["prompt_token_ids"] = nil
	if req.ReturnTokenIDs {
		first["prompt_token_ids"] = pl.prompt
	}
	send(first)
	for i, id := range rep.ids {
		delta := map[string]any{}
		if i == 0 {
			if rep.finish == "tool_calls" || (rep.finish == "stop" && pl.named) {
				delta["tool_calls"] = []any{map[string]any{
					"id": rep.callID, "type": "function", "index": 0,
					"function": map[string]any{"name": rep.action, "arguments": "{}"},
				}}
			} else {
				delta["content"] = rep.action
			}
		}
		ch := map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": nil, "token_ids": nil}
		if req.Logprobs {
			ch["logprobs"] = map[string]any{"content": rep.logprobs[i : i+1]}
		}
		if req.ReturnTokenIDs {
			ch["token_ids"] = []int{id}
		}
		if i == len(rep.ids)-1 {
			ch["finish_reason"], ch["stop_reason"] = rep.finish, nil
		}
		send(chunk([]any{ch}))
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := chunk([]any{})
		u["usage"] = usage(len(pl.prompt), len(rep.ids))
		send(u)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}
