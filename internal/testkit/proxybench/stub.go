// Package proxybench measures the recording proxy (internal/proxy) against a
// bare httputil.ReverseProxy and against no proxy at all, all three in front
// of the same fast vLLM-shaped stub (issue 3, "Performance"). It is used by
// BenchmarkProxy in internal/proxy and by the table printer
// internal/testkit/loadgen (`go tool task bench`).
package proxybench

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

// Shape of the simulated planner call: a prompt of a few hundred tokens, a
// completion of ~50 tokens that is one tool call.
const (
	PromptTokens     = 350
	CompletionTokens = 50
	// variants of requests and answers, so that stored rows are not all
	// identical (which would flatter Parquet's compression).
	variants = 64
)

// Stub is a stand-in for vLLM's OpenAI server that answers from precomputed
// bodies: it should cost as little CPU as possible, because on a small
// machine it shares the cores with the proxy under test and the load
// generator. Answers have the shape of vLLM >= 0.10.2 (see stub_test.go in
// internal/proxy): unrequested fields are present as null, and
// "return_token_ids"/"logprobs" add prompt_token_ids, choices[].token_ids and
// choices[].logprobs.
type Stub struct {
	// answers[v][k]: variant v; k bit 0 = logprobs asked, bit 1 = token ids asked.
	answers [variants][4][]byte
	// streams[v][k]: the same completion streamed, one SSE event per
	// element (a chunk per token, then data: [DONE]).
	streams [variants][4][][]byte
	// streamed[v] is streams[v][0] joined: what a harness reads.
	streamed [variants][]byte

	// hold, when set, keeps every request waiting after its body is read
	// until the channel is closed; arrived counts those waiting.
	hold    atomic.Pointer[chan struct{}]
	arrived atomic.Int64
}

// NewStub precomputes the answers (deterministic).
func NewStub() *Stub {
	s := &Stub{}
	rng := rand.New(rand.NewPCG(1, 2))
	for v := range variants {
		prompt := make([]int32, PromptTokens)
		for i := range prompt {
			prompt[i] = rng.Int32N(151_000) // a Qwen-sized vocabulary
		}
		completion := make([]int32, CompletionTokens)
		lps := make([]logprobEntry, CompletionTokens)
		for i := range completion {
			completion[i] = rng.Int32N(151_000)
			tok := "t" + strconv.Itoa(int(completion[i]))
			lps[i] = logprobEntry{Token: tok, Logprob: -rng.ExpFloat64() * 0.3, Bytes: []byte(tok), TopLogprobs: []struct{}{}}
		}
		args := fmt.Sprintf(`{"action": "click", "x": %d, "y": %d, "reason": "open the drawer"}`, rng.IntN(1280), rng.IntN(800))
		for k := range 4 {
			s.answers[v][k] = answer(v, prompt, completion, lps, args, k&1 != 0, k&2 != 0)
			s.streams[v][k] = stream(v, prompt, completion, lps, args, k&1 != 0, k&2 != 0)
		}
		s.streamed[v] = bytes.Join(s.streams[v][0], nil)
	}
	return s
}

// Answer is the body the stub returns for request variant v when the client
// asked for neither logprobs nor token ids: what a harness without the proxy
// receives, and so what it must receive through the proxy too.
func (s *Stub) Answer(v int) []byte { return s.answers[v%variants][0] }

// StreamAnswer is Answer for a streamed request: the events' bytes in order.
func (s *Stub) StreamAnswer(v int) []byte { return s.streamed[v%variants] }

func (s *Stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	// vLLM parses the whole request too; this is the cheapest honest stand-in.
	var req struct {
		Seed           int  `json:"seed"`
		Stream         bool `json:"stream"`
		Logprobs       bool `json:"logprobs"`
		ReturnTokenIDs bool `json:"return_token_ids"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"BadRequestError","param":null,"code":400}}`, http.StatusBadRequest)
		return
	}
	if h := s.hold.Load(); h != nil {
		s.arrived.Add(1)
		<-*h
	}
	k := 0
	if req.Logprobs {
		k |= 1
	}
	if req.ReturnTokenIDs {
		k |= 2
	}
	if req.Stream {
		// As vLLM: an event per token, each written and flushed on its own.
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		fl := w.(http.Flusher)
		for _, ev := range s.streams[req.Seed%variants][k] {
			if _, err := w.Write(ev); err != nil {
				return
			}
			fl.Flush()
		}
		return
	}
	out := s.answers[req.Seed%variants][k]
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out)
}

// The structs below marshal in vLLM's key order (ChatCompletionResponse.model_dump()).
type completionBody struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []choiceBody `json:"choices"`
	ServiceTier       any          `json:"service_tier"`
	SystemFingerprint any          `json:"system_fingerprint"`
	Usage             usageBody    `json:"usage"`
	PromptLogprobs    any          `json:"prompt_logprobs"`
	PromptTokenIDs    []int32      `json:"prompt_token_ids"` // nil: null
	PromptText        any          `json:"prompt_text"`
	KVTransferParams  any          `json:"kv_transfer_params"`
}

type choiceBody struct {
	Index        int           `json:"index"`
	Message      messageBody   `json:"message"`
	Logprobs     *logprobsBody `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
	StopReason   any           `json:"stop_reason"`
	TokenIDs     []int32       `json:"token_ids"` // nil: null
}

type messageBody struct {
	Role         string     `json:"role"`
	Content      *string    `json:"content"`
	Refusal      any        `json:"refusal"`
	Annotations  any        `json:"annotations"`
	Audio        any        `json:"audio"`
	FunctionCall any        `json:"function_call"`
	ToolCalls    []toolCall `json:"tool_calls"`
	Reasoning    any        `json:"reasoning"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type logprobsBody struct {
	Content []logprobEntry `json:"content"`
}

type logprobEntry struct {
	Token       string     `json:"token"`
	Logprob     float64    `json:"logprob"`
	Bytes       []byte     `json:"-"`
	TopLogprobs []struct{} `json:"top_logprobs"`
}

// MarshalJSON writes bytes as a list of numbers, as vLLM does (not base64).
func (e logprobEntry) MarshalJSON() ([]byte, error) {
	tok, _ := json.Marshal(e.Token)
	var b strings.Builder
	fmt.Fprintf(&b, `{"token":%s,"logprob":%s,"bytes":[`, tok, strconv.FormatFloat(e.Logprob, 'g', -1, 64))
	for i, c := range e.Bytes {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(c)))
	}
	b.WriteString(`],"top_logprobs":[]}`)
	return []byte(b.String()), nil
}

type usageBody struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails any `json:"prompt_tokens_details"`
}

func answer(v int, prompt, completion []int32, lps []logprobEntry, args string, logprobs, tokenIDs bool) []byte {
	tc := toolCall{ID: fmt.Sprintf("chatcmpl-tool-%08x", v), Type: "function"}
	tc.Function.Name, tc.Function.Arguments = "computer", args
	c := choiceBody{
		Message:      messageBody{Role: "assistant", ToolCalls: []toolCall{tc}},
		FinishReason: "tool_calls",
	}
	body := completionBody{
		ID: fmt.Sprintf("chatcmpl-%032x", v), Object: "chat.completion", Created: 1700000000, Model: "toy",
		Usage: usageBody{PromptTokens: len(prompt), TotalTokens: len(prompt) + len(completion), CompletionTokens: len(completion)},
	}
	if logprobs {
		c.Logprobs = &logprobsBody{Content: lps}
	}
	if tokenIDs {
		c.TokenIDs, body.PromptTokenIDs = completion, prompt
	}
	body.Choices = []choiceBody{c}
	out, err := json.Marshal(body)
	if err != nil {
		panic(err) // fixed shapes: cannot happen
	}
	return out
}

// stream is answer as vLLM streams it (chunk.model_dump_json(exclude_unset=
// True), see stub_test.go in internal/proxy): a first chunk with the role
// and prompt_token_ids (null unless asked), then a chunk per completion
// token carrying a piece of the tool call's arguments with its logprobs and
// token_ids (null unless asked), the last with the finish reason, then
// data: [DONE].
func stream(v int, prompt, completion []int32, lps []logprobEntry, args string, logprobs, tokenIDs bool) [][]byte {
	head := fmt.Sprintf(`{"id":"chatcmpl-%032x","object":"chat.completion.chunk","created":1700000000,"model":"toy","choices":[`, v)
	event := func(chunk string) []byte { return []byte("data: " + chunk + "\n\n") }
	promptIDs := "null"
	if tokenIDs {
		promptIDs = mustJSON(prompt)
	}
	out := [][]byte{event(head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":` +
		promptIDs + `,"prompt_text":null}`)}
	for i, id := range completion {
		// Token i carries args' i-th of len(completion) pieces; the first
		// also names the call.
		piece := args[i*len(args)/len(completion) : (i+1)*len(args)/len(completion)]
		call := `{"index":0,"function":{"arguments":` + mustJSON(piece) + `}}`
		if i == 0 {
			call = fmt.Sprintf(`{"id":"chatcmpl-tool-%08x","type":"function","index":0,"function":{"name":"computer","arguments":%s}}`, v, mustJSON(piece))
		}
		lp, ids := "null", "null"
		if logprobs {
			lp = `{"content":[` + mustJSON(lps[i]) + `]}`
		}
		if tokenIDs {
			ids = mustJSON([]int32{id})
		}
		finish := `null`
		if i == len(completion)-1 {
			finish = `"tool_calls","stop_reason":null`
		}
		out = append(out, event(head+`{"index":0,"delta":{"tool_calls":[`+call+`]},"logprobs":`+lp+
			`,"finish_reason":`+finish+`,"token_ids":`+ids+`}]}`))
	}
	return append(out, []byte("data: [DONE]\n\n"))
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // fixed shapes: cannot happen
	}
	return string(b)
}

// requestBody is a planner's request for variant v, spaced like Python's
// json.dumps (what the openai package sends): a system prompt, tool
// definitions and a short history, a few hundred tokens in all.
func requestBody(v int, streamed bool, image []byte) []byte {
	system := strings.Repeat("You control a robot arm in a kitchen through the computer tool. "+
		"Look at the observation, reason briefly, then call exactly one tool. ", 8)
	msgs := []map[string]any{
		{"role": "system", "content": system},
		{"role": "user", "content": fmt.Sprintf("Task %d: put the red cup into the top drawer.", v)},
		{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": fmt.Sprintf("call_%d", v), "type": "function",
			"function": map[string]any{"name": "computer", "arguments": `{"action": "click", "x": 300, "y": 410}`}}}},
		{"role": "tool", "tool_call_id": fmt.Sprintf("call_%d", v), "content": "The drawer is now open. The red cup is on the counter, left of the sink."},
		{"role": "user", "content": fmt.Sprintf("Step %d. Continue.", v%7+2)},
	}
	if image != nil {
		msgs[len(msgs)-1]["content"] = []any{
			map[string]any{"type": "text", "text": msgs[len(msgs)-1]["content"]},
			map[string]any{"type": "image_url", "image_url": map[string]any{
				"url": "data:image/png;base64," + base64.StdEncoding.EncodeToString(image)}},
		}
	}
	tools := []any{}
	for _, name := range []string{"computer", "wait", "done"} {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
			"name": name, "description": "Perform " + name + " on the robot's screen.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{
				"action": map[string]any{"type": "string", "enum": []string{"click", "type", "scroll"}},
				"x":      map[string]any{"type": "integer"}, "y": map[string]any{"type": "integer"},
			}, "required": []string{"action"}},
		}})
	}
	req := []any{"model", "toy", "messages", msgs, "tools", tools, "tool_choice", "auto",
		"temperature", 1.0, "max_tokens", 256, "seed", v}
	if streamed {
		req = append(req, "stream", true)
	}
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < len(req); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %s", req[i], pyJSON(req[i+1]))
	}
	b.WriteByte('}')
	return []byte(b.String())
}

// pyJSON re-spaces compact JSON the way Python's json.dumps does (", " and
// ": " outside strings).
func pyJSON(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	inStr, esc := false, false
	for _, c := range string(raw) {
		b.WriteRune(c)
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case !inStr && (c == ',' || c == ':'):
			b.WriteByte(' ')
		}
	}
	return b.String()
}
