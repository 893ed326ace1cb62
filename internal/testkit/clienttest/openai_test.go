package clienttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/server"
	"github.com/roundhouse-rl/roundhouse/internal/proxy"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

const (
	weightsFile = "../../../harnesses/minimal/weights/w0/policy.json"
	clientSeed  = "42" // the toy model samples reproducibly under a seed
	httpTimeout = 30 * time.Second
)

// clientRun is what node/openai-client.mjs prints: the bodies the openai
// library sent and the objects it returned.
type clientRun struct {
	Sent   []string          `json:"sent"`
	Tools  json.RawMessage   `json:"tools"`
	Stream []json.RawMessage `json:"stream"`
	Plain  json.RawMessage   `json:"plain"`
}

func runClient(t *testing.T, baseURL string) clientRun {
	t.Helper()
	out := runNode(t, "openai-client.mjs", baseURL, clientSeed)
	var r clientRun
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("openai-client.mjs output: %v\n%s", err, out)
	}
	if len(r.Sent) != 3 {
		t.Fatalf("openai-client.mjs sent %d requests, want 3", len(r.Sent))
	}
	return r
}

// startToy serves the toy policy the way vLLM does (harnesses/minimal/server).
func startToy(t *testing.T) *httptest.Server {
	t.Helper()
	p, err := policy.Load(weightsFile)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(p, "toy", "w0").Handler())
	t.Cleanup(ts.Close)
	return ts
}

// TestOpenAIClient runs the same three calls (tools, tools streamed, plain)
// with the official openai package once directly against the model server
// and once through the recording proxy, then checks that the client saw the
// same answers, that the proxy's records hold exactly what the model server
// returns when asked for token ids and logprobs, and that DuckDB reads those
// records back from Parquet unchanged.
func TestOpenAIClient(t *testing.T) {
	ensureNode(t)
	toy := startToy(t)

	direct := runClient(t, toy.URL+"/v1")

	p := proxy.New(proxy.Options{
		UpstreamTimeout: time.Minute,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	p.SetUpstream(toy.URL)
	ps := httptest.NewServer(p)
	t.Cleanup(ps.Close)
	ep := proxy.Episode{Key: schemas.EpisodeKey{Run: "clienttest", Round: 1, Phase: schemas.PhaseTrain,
		Group: 3, Attempt: 2, Retry: 1}, WeightsID: "w0"}
	via := runClient(t, ps.URL+p.Begin(ep))
	recs := p.End(ep.Key.ID())

	t.Run("client sees the upstream's answers", func(t *testing.T) {
		if !slices.Equal(direct.Sent, via.Sent) {
			t.Fatalf("the library sent different requests:\ndirect %q\nproxy  %q", direct.Sent, via.Sent)
		}
		same := func(name string, d, v json.RawMessage) {
			if diffs := jsonDiff(normalize(t, d), normalize(t, v), name); len(diffs) > 0 {
				t.Errorf("%s differs through the proxy (direct vs proxy):\n  %s", name, strings.Join(diffs, "\n  "))
			}
		}
		same("tools", direct.Tools, via.Tools)
		same("plain", direct.Plain, via.Plain)
		if len(direct.Stream) != len(via.Stream) {
			t.Errorf("stream: %d chunks direct, %d through the proxy", len(direct.Stream), len(via.Stream))
		}
		for i := range min(len(direct.Stream), len(via.Stream)) {
			same(fmt.Sprintf("stream[%d]", i), direct.Stream[i], via.Stream[i])
		}
	})

	t.Run("records hold the upstream's tokens", func(t *testing.T) {
		if len(recs) != 3 {
			t.Fatalf("proxy recorded %d calls, want 3", len(recs))
		}
		seen := []answer{
			fromCompletion(t, via.Tools),
			fromChunks(t, via.Stream),
			fromCompletion(t, via.Plain),
		}
		for i, rec := range recs {
			checkRecord(t, i, rec, ep, via.Sent[i], seen[i], reference(t, toy.URL, via.Sent[i]))
		}
	})

	t.Run("DuckDB reads the records", func(t *testing.T) { checkDuckDB(t, recs) })
}

// checkRecord compares one record with the episode, the request the client
// sent, the answer the client saw and the upstream's reference answer.
func checkRecord(t *testing.T, i int, rec schemas.Call, ep proxy.Episode, sent string, seen, ref answer) {
	t.Helper()
	check := func(field string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("call %d: record %s = %v, want %v", i, field, got, want)
		}
	}
	check("episode", [7]any{rec.EpisodeID, rec.Run, rec.Round, rec.Phase, rec.Group, rec.Attempt, rec.Retry},
		[7]any{ep.Key.ID(), ep.Key.Run, ep.Key.Round, ep.Key.Phase, ep.Key.Group, ep.Key.Attempt, ep.Key.Retry})
	check("weights_id", rec.WeightsID, ep.WeightsID)
	check("call_index", rec.CallIndex, int32(i))
	check("request (as the client sent it)", rec.Request, sent)
	check("stream", rec.Stream, i == 1)
	check("model", rec.Model, "toy")
	check("http_status", rec.HTTPStatus, int32(http.StatusOK))
	check("error", rec.Error, "")
	check("trainable", rec.Trainable, true)

	check("prompt_token_ids (upstream)", rec.PromptTokenIDs, ref.prompt)
	check("completion_token_ids (upstream)", rec.CompletionTokenIDs, ref.completion)
	check("completion_logprobs (upstream)", rec.CompletionLogprobs, ref.logprobs)
	check("prompt_tokens", rec.PromptTokens, int32(len(ref.prompt)))
	check("completion_tokens", rec.CompletionTokens, int32(len(ref.completion)))

	check("finish_reason (client)", rec.FinishReason, seen.finish)
	check("finish_reason (upstream)", rec.FinishReason, ref.finish)
	check("content (client)", rec.Content, seen.content)
	check("content (upstream)", rec.Content, ref.content)
	var calls []toolCall
	if rec.ToolCalls != "" {
		if err := json.Unmarshal([]byte(rec.ToolCalls), &calls); err != nil {
			t.Errorf("call %d: record tool_calls %q: %v", i, rec.ToolCalls, err)
		}
	}
	// The client saw the very response recorded, tool call ids included; the
	// reference is a second sampling with the same seed, so ids differ.
	check("tool_calls (client)", calls, seen.calls)
	check("tool_calls (upstream, ids aside)", withoutIDs(calls), withoutIDs(ref.calls))
	t.Logf("call %d (stream %t): %d prompt ids, completion ids %v, logprobs %v, finish %q, content %q, tool_calls %s",
		i, rec.Stream, len(rec.PromptTokenIDs), rec.CompletionTokenIDs, rec.CompletionLogprobs, rec.FinishReason, rec.Content, rec.ToolCalls)
	if i < 2 && len(calls) == 0 {
		t.Errorf("call %d: no tool call recorded; the toy model always calls a tool under tool_choice auto", i)
	}
}

// answer is one chat completion reduced to what a record holds.
type answer struct {
	prompt, completion []int32
	logprobs           []float32
	finish, content    string
	calls              []toolCall
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func withoutIDs(calls []toolCall) []toolCall {
	out := slices.Clone(calls)
	for i := range out {
		out[i].ID = ""
	}
	return out
}

// completion is a chat completion or stream chunk as vLLM sends it.
type completion struct {
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Choices        []struct {
		Index    int  `json:"index"`
		Message  *msg `json:"message"` // non-streamed
		Delta    *msg `json:"delta"`   // streamed
		Logprobs *struct {
			Content []struct {
				Logprob float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
		TokenIDs     []int32 `json:"token_ids"`
	} `json:"choices"`
}

type msg struct {
	Content   *string `json:"content"`
	ToolCalls []struct {
		Index int `json:"index"`
		toolCall
	} `json:"tool_calls"`
}

func decode(t *testing.T, raw []byte) completion {
	t.Helper()
	var c completion
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return c
}

// add folds one completion or chunk (choice 0) into a.
func (a *answer) add(c completion) {
	a.prompt = append(a.prompt, c.PromptTokenIDs...)
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		a.completion = append(a.completion, ch.TokenIDs...)
		if ch.Logprobs != nil {
			for _, l := range ch.Logprobs.Content {
				a.logprobs = append(a.logprobs, float32(l.Logprob))
			}
		}
		if ch.FinishReason != nil {
			a.finish = *ch.FinishReason
		}
		if m := ch.Message; m != nil {
			if m.Content != nil {
				a.content = *m.Content
			}
			for _, tc := range m.ToolCalls {
				a.calls = append(a.calls, tc.toolCall)
			}
		}
		if d := ch.Delta; d != nil {
			if d.Content != nil {
				a.content += *d.Content
			}
			// OpenAI streaming: the first delta of a call carries its id, type
			// and name; later ones append argument text.
			for _, tc := range d.ToolCalls {
				for tc.Index >= len(a.calls) {
					a.calls = append(a.calls, toolCall{})
				}
				c := &a.calls[tc.Index]
				c.ID += tc.ID
				c.Type += tc.Type
				c.Function.Name += tc.Function.Name
				c.Function.Arguments += tc.Function.Arguments
			}
		}
	}
}

func fromCompletion(t *testing.T, raw []byte) answer {
	var a answer
	a.add(decode(t, raw))
	return a
}

func fromChunks(t *testing.T, chunks []json.RawMessage) answer {
	var a answer
	for _, c := range chunks {
		a.add(decode(t, c))
	}
	return a
}

// reference sends the client's request straight to the model server with
// "logprobs" and "return_token_ids" set, as a training-data reader would, and
// returns what came back (streamed when the request streams). The seed makes
// the model sample the same completion again.
func reference(t *testing.T, upstream, sent string) answer {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(sent))
	dec.UseNumber()
	var body map[string]any
	if err := dec.Decode(&body); err != nil {
		t.Fatal(err)
	}
	body["logprobs"], body["return_token_ids"] = true, true
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), httpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, upstream+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("reference request: %s: %s", resp.Status, msg)
	}
	var a answer
	if body["stream"] != true {
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		a.add(decode(t, raw))
		return a
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if ok && data != "[DONE]" {
			a.add(decode(t, []byte(data)))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return a
}

// normalize decodes a client-side object and blanks what differs between two
// requests by design: every "id" (completion, chunk and tool call ids are
// random per request) and "created" (a clock reading).
func normalize(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				switch k {
				case "id":
					v[k] = "<id>"
				case "created":
					v[k] = "<created>"
				default:
					walk(x)
				}
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return v
}

// jsonDiff lists the paths where two decoded JSON values differ, telling an
// absent key from a null one.
func jsonDiff(a, b any, path string) []string {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range a {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		var out []string
		for k := range keys {
			av, aok := a[k]
			bv, bok := bm[k]
			switch {
			case !aok:
				out = append(out, fmt.Sprintf("%s.%s: absent vs %s", path, k, show(bv)))
			case !bok:
				out = append(out, fmt.Sprintf("%s.%s: %s vs absent", path, k, show(av)))
			default:
				out = append(out, jsonDiff(av, bv, path+"."+k)...)
			}
		}
		sort.Strings(out)
		return out
	case []any:
		bs, ok := b.([]any)
		if !ok || len(a) != len(bs) {
			break
		}
		var out []string
		for i := range a {
			out = append(out, jsonDiff(a[i], bs[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %s vs %s", path, show(a), show(b))}
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
