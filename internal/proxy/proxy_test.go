package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

type reqOpts struct {
	tools, stream, usage bool
	logprobs, tokenIDs   bool // the harness asks for them itself
	topLogprobs          int
}

// chatBody is a harness request, written by hand so that key order and
// spacing are the harness's own.
func chatBody(user string, o reqOpts) []byte {
	u, _ := json.Marshal(user)
	var b strings.Builder
	fmt.Fprintf(&b, `{"model": "toy", "messages": [{"role": "system", "content": "You plan robot actions."}, {"role": "user", "content": %s}], "temperature": 1.0`, u)
	if o.tools {
		b.WriteString(`, "tools": [{"type": "function", "function": {"name": "move_to", "parameters": {"type": "object"}}}], "tool_choice": "auto"`)
	}
	if o.stream {
		b.WriteString(`, "stream": true`)
	}
	if o.usage {
		b.WriteString(`, "stream_options": {"include_usage": true}`)
	}
	if o.logprobs {
		b.WriteString(`, "logprobs": true`)
	}
	if o.topLogprobs > 0 {
		fmt.Fprintf(&b, `, "top_logprobs": %d`, o.topLogprobs)
	}
	if o.tokenIDs {
		b.WriteString(`, "return_token_ids": true`)
	}
	b.WriteString("}")
	return []byte(b.String())
}

func newProxy(t *testing.T, up *stub, opts Options) (*Proxy, *httptest.Server) {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	p := New(opts)
	if up != nil {
		p.SetUpstream(up.srv.URL + "/")
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

func post(t *testing.T, url string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, resp.Header, b
}

// direct asks the stub itself, bypassing the proxy.
func direct(t *testing.T, up *stub, body []byte) []byte {
	t.Helper()
	status, _, b := post(t, up.srv.URL+"/v1/chat/completions", body)
	if status != http.StatusOK {
		t.Fatalf("stub answered %d: %s", status, b)
	}
	return b
}

// truth is what the upstream returns when asked for everything.
type truth struct {
	prompt, completion []int32
	logprobs           []float32
	toolCalls          string
	content            string
	promptTokens       int32
	completionTokens   int32
}

func upstreamTruth(t *testing.T, up *stub, user string, o reqOpts) truth {
	t.Helper()
	o.stream, o.usage, o.logprobs, o.tokenIDs = false, false, true, true
	var r struct {
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		Choices        []struct {
			Message struct {
				Content   *string         `json:"content"`
				ToolCalls json.RawMessage `json:"tool_calls"`
			} `json:"message"`
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				Content []struct {
					Logprob float64 `json:"logprob"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage respUsage `json:"usage"`
	}
	if err := json.Unmarshal(direct(t, up, chatBody(user, o)), &r); err != nil {
		t.Fatal(err)
	}
	c := r.Choices[0]
	tr := truth{prompt: r.PromptTokenIDs, completion: c.TokenIDs,
		promptTokens: r.Usage.PromptTokens, completionTokens: r.Usage.CompletionTokens}
	for _, l := range c.Logprobs.Content {
		tr.logprobs = append(tr.logprobs, float32(l.Logprob))
	}
	if c.Message.Content != nil {
		tr.content = *c.Message.Content
	}
	if len(c.Message.ToolCalls) > 0 {
		tr.toolCalls = string(c.Message.ToolCalls)
	}
	if len(tr.prompt) == 0 || len(tr.completion) == 0 || len(tr.logprobs) != len(tr.completion) {
		t.Fatalf("stub truth incomplete: %+v", tr)
	}
	return tr
}

func checkTrained(t *testing.T, c schemas.Call, want truth) {
	t.Helper()
	if !slices.Equal(c.PromptTokenIDs, want.prompt) {
		t.Errorf("PromptTokenIDs = %v, want %v", c.PromptTokenIDs, want.prompt)
	}
	if !slices.Equal(c.CompletionTokenIDs, want.completion) {
		t.Errorf("CompletionTokenIDs = %v, want %v", c.CompletionTokenIDs, want.completion)
	}
	if !slices.Equal(c.CompletionLogprobs, want.logprobs) {
		t.Errorf("CompletionLogprobs = %v, want %v", c.CompletionLogprobs, want.logprobs)
	}
	if c.ToolCalls != want.toolCalls {
		t.Errorf("ToolCalls = %s, want %s", c.ToolCalls, want.toolCalls)
	}
	if c.Content != want.content {
		t.Errorf("Content = %q, want %q", c.Content, want.content)
	}
	if c.PromptTokens != want.promptTokens || c.CompletionTokens != want.completionTokens {
		t.Errorf("tokens = %d/%d, want %d/%d", c.PromptTokens, c.CompletionTokens, want.promptTokens, want.completionTokens)
	}
	if c.HTTPStatus != 200 || c.Error != "" || !c.Trainable {
		t.Errorf("status=%d error=%q trainable=%v, want 200, no error, trainable", c.HTTPStatus, c.Error, c.Trainable)
	}
}

func endOne(t *testing.T, p *Proxy, id string) schemas.Call {
	t.Helper()
	recs := p.End(id)
	if len(recs) != 1 {
		t.Fatalf("End(%q) returned %d records, want 1", id, len(recs))
	}
	return recs[0]
}

var testEpisode = Episode{Key: schemas.EpisodeKey{Run: "run1", Round: 2, Phase: schemas.PhaseTrain,
	Group: 5, Attempt: 3, Retry: 1}, WeightsID: "w-0002"}

// named is an episode told apart from the others of a test by its phase.
func named(phase string) Episode {
	return Episode{Key: schemas.EpisodeKey{Run: "test", Round: 1, Phase: phase}}
}

// idOf is the episode id of named(phase).
func idOf(phase string) string { return named(phase).Key.ID() }

func TestNonStreamedToolCall(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	user := "pick up the red block"
	body := chatBody(user, reqOpts{tools: true})
	want := direct(t, up, body) // what the harness gets without the proxy
	tr := upstreamTruth(t, up, user, reqOpts{tools: true})

	prefix := p.Begin(testEpisode)
	if prefix != "/e/r2-train-g005-a03/v1" {
		t.Fatalf("Begin = %q", prefix)
	}
	before := time.Now().UnixMilli()
	status, hdr, got := post(t, srv.URL+prefix+"/chat/completions", body)
	after := time.Now().UnixMilli()
	if status != 200 {
		t.Fatalf("status %d: %s", status, got)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("harness got\n%s\nwant (upstream without proxy)\n%s", got, want)
	}
	if hdr.Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type = %q", hdr.Get("Content-Type"))
	}
	// The upstream was asked for ids and logprobs.
	var sent map[string]any
	bodies := up.chatBodies()
	if err := json.Unmarshal(bodies[len(bodies)-1], &sent); err != nil {
		t.Fatal(err)
	}
	if sent["logprobs"] != true || sent["return_token_ids"] != true {
		t.Errorf("upstream request lacks logprobs/return_token_ids: %s", bodies[len(bodies)-1])
	}

	c := endOne(t, p, testEpisode.Key.ID())
	checkTrained(t, c, tr)
	if c.ToolCalls == "" || c.FinishReason != "tool_calls" {
		t.Errorf("tool call not recorded: ToolCalls=%q FinishReason=%q", c.ToolCalls, c.FinishReason)
	}
	if c.Request != string(body) {
		t.Errorf("Request = %s, want the harness's body %s", c.Request, body)
	}
	wantMeta := schemas.Call{Run: "run1", Round: 2, Phase: "train", EpisodeID: testEpisode.Key.ID(), Group: 5,
		Attempt: 3, Retry: 1, CallIndex: 0, WeightsID: "w-0002", Model: "toy", Stream: false}
	gotMeta := schemas.Call{Run: c.Run, Round: c.Round, Phase: c.Phase, EpisodeID: c.EpisodeID, Group: c.Group,
		Attempt: c.Attempt, Retry: c.Retry, CallIndex: c.CallIndex, WeightsID: c.WeightsID, Model: c.Model, Stream: c.Stream}
	if !reflectEqual(gotMeta, wantMeta) {
		t.Errorf("attribution = %+v, want %+v", gotMeta, wantMeta)
	}
	if c.StartedAtMS < before || c.StartedAtMS > after || c.LatencyMS < 0 {
		t.Errorf("StartedAtMS=%d not in [%d,%d] or LatencyMS=%v", c.StartedAtMS, before, after, c.LatencyMS)
	}
}

func reflectEqual(a, b schemas.Call) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// Whatever the harness asked for itself reaches it unchanged.
func TestHarnessOwnFieldsKept(t *testing.T) {
	for _, o := range []reqOpts{
		{logprobs: true},
		{tokenIDs: true},
		{logprobs: true, topLogprobs: 2, tokenIDs: true},
		{logprobs: true, tools: true, stream: true},
		{tokenIDs: true, tools: true, stream: true},
		{logprobs: true, topLogprobs: 1, tokenIDs: true, stream: true, usage: true},
	} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			up := newStub(t, modeOK)
			p, srv := newProxy(t, up, Options{})
			body := chatBody("open the drawer", o)
			want := direct(t, up, body)
			prefix := p.Begin(named("e"))
			_, _, got := post(t, srv.URL+prefix+"/chat/completions", body)
			if !bytes.Equal(got, want) {
				t.Fatalf("harness got\n%s\nwant\n%s", got, want)
			}
			c := endOne(t, p, idOf("e"))
			checkTrained(t, c, upstreamTruth(t, up, "open the drawer", o))
		})
	}
}

func TestStreamed(t *testing.T) {
	for _, o := range []reqOpts{
		{stream: true},
		{stream: true, tools: true},
		{stream: true, tools: true, usage: true},
	} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			up := newStub(t, modeOK)
			p, srv := newProxy(t, up, Options{})
			user := "put the bowl on the plate"
			body := chatBody(user, o)
			want := direct(t, up, body)
			prefix := p.Begin(testEpisode)
			status, hdr, got := post(t, srv.URL+prefix+"/chat/completions", body)
			if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d, Content-Type %q", status, hdr.Get("Content-Type"))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("harness got\n%s\nwant\n%s", got, want)
			}
			c := endOne(t, p, testEpisode.Key.ID())
			checkTrained(t, c, upstreamTruth(t, up, user, o))
			wantFinish := "stop"
			if o.tools {
				wantFinish = "tool_calls"
			}
			if !c.Stream || c.FinishReason != wantFinish || c.Model != "toy" {
				t.Errorf("Stream=%v FinishReason=%q Model=%q", c.Stream, c.FinishReason, c.Model)
			}
		})
	}
}

// readEvent reads one SSE event (up to its blank line).
func readEvent(br *bufio.Reader) (string, error) {
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		ev.WriteString(line)
		if err != nil {
			return ev.String(), err
		}
		if line == "\n" || line == "\r\n" {
			return ev.String(), nil
		}
	}
}

// The first event reaches the harness while the upstream is still generating.
func TestStreamFlushesEachEvent(t *testing.T) {
	up := newStub(t, modeOK)
	release := up.pauseStreams()
	defer release()
	p, srv := newProxy(t, up, Options{})
	prefix := p.Begin(named("e"))
	resp, err := http.Post(srv.URL+prefix+"/chat/completions", "application/json", bytes.NewReader(chatBody("go", reqOpts{stream: true})))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first := make(chan string, 1)
	go func() {
		ev, _ := readEvent(br)
		first <- ev
	}()
	select {
	case ev := <-first:
		// The added prompt_token_ids is hidden on the first chunk too.
		if !strings.Contains(ev, `"role":"assistant"`) || !strings.Contains(ev, `"prompt_token_ids":null`) {
			t.Fatalf("first event = %q", ev)
		}
	case <-time.After(10 * time.Second): // a guard against hanging, not a timing assumption
		t.Fatal("first event not delivered while the upstream stream was open: not flushed")
	}
	release()
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest of stream: %q, %v", rest, err)
	}
	if c := endOne(t, p, idOf("e")); !c.Trainable || c.Content != "ok: go" {
		t.Errorf("record: trainable=%v content=%q err=%q", c.Trainable, c.Content, c.Error)
	}
}

func TestUpstreamWithoutTokenIDs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		logprobs bool
		o        reqOpts
	}{
		{"no ids or logprobs", false, reqOpts{}},
		{"no ids or logprobs streamed", false, reqOpts{stream: true}},
		{"logprobs but no ids (vLLM < 0.10.2)", true, reqOpts{tools: true}},
		{"logprobs but no ids streamed", true, reqOpts{stream: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newStub(t, modeOK)
			up.tokenIDs, up.logprobs = false, tc.logprobs
			p, srv := newProxy(t, up, Options{})
			body := chatBody("stack the cubes", tc.o)
			want := direct(t, up, body)
			prefix := p.Begin(named("e"))
			status, _, got := post(t, srv.URL+prefix+"/chat/completions", body)
			if status != 200 || !bytes.Equal(got, want) {
				t.Fatalf("status %d, harness got\n%s\nwant\n%s", status, got, want)
			}
			c := endOne(t, p, idOf("e"))
			if c.Trainable || len(c.PromptTokenIDs) != 0 || len(c.CompletionTokenIDs) != 0 {
				t.Errorf("Trainable=%v prompt=%v completion=%v: ids must never be invented", c.Trainable, c.PromptTokenIDs, c.CompletionTokenIDs)
			}
			if tc.logprobs != (len(c.CompletionLogprobs) > 0) {
				t.Errorf("CompletionLogprobs = %v", c.CompletionLogprobs)
			}
			if c.HTTPStatus != 200 || c.Error != "" || c.Request != string(body) {
				t.Errorf("status=%d error=%q request=%q", c.HTTPStatus, c.Error, c.Request)
			}
		})
	}
}

func TestUpstream500(t *testing.T) {
	up := newStub(t, modeFail)
	p, srv := newProxy(t, up, Options{})
	body := chatBody("go", reqOpts{})
	_, _, want := post(t, up.srv.URL+"/v1/chat/completions", body)
	prefix := p.Begin(named("e"))
	status, _, got := post(t, srv.URL+prefix+"/chat/completions", body)
	if status != 500 || !bytes.Equal(got, want) {
		t.Fatalf("harness got %d %s, want 500 %s", status, got, want)
	}
	c := endOne(t, p, idOf("e"))
	if c.HTTPStatus != 500 || !strings.Contains(c.Error, "engine crashed") || c.Trainable || c.Request != string(body) {
		t.Errorf("record: status=%d error=%q trainable=%v", c.HTTPStatus, c.Error, c.Trainable)
	}
}

func checkOpenAIError(t *testing.T, body []byte, typ string, contains ...string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Type != typ {
		t.Fatalf("error body %s: want type %q (%v)", body, typ, err)
	}
	for _, s := range contains {
		if !strings.Contains(e.Error.Message, s) {
			t.Errorf("error message %q lacks %q", e.Error.Message, s)
		}
	}
}

func TestUpstreamUnreachableAndTimeout(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		p, srv := newProxy(t, nil, Options{})
		p.SetUpstream(dead.URL)
		prefix := p.Begin(named("e"))
		status, _, got := post(t, srv.URL+prefix+"/chat/completions", chatBody("go", reqOpts{}))
		if status != http.StatusBadGateway {
			t.Fatalf("status %d", status)
		}
		checkOpenAIError(t, got, "upstream_error", "unreachable")
		if c := endOne(t, p, idOf("e")); c.HTTPStatus != 502 || c.Error == "" || c.Trainable {
			t.Errorf("record: %+v", c)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		up := newStub(t, modeHang)
		p, srv := newProxy(t, up, Options{UpstreamTimeout: 200 * time.Millisecond})
		prefix := p.Begin(named("e"))
		status, _, got := post(t, srv.URL+prefix+"/chat/completions", chatBody("go", reqOpts{}))
		if status != http.StatusGatewayTimeout {
			t.Fatalf("status %d: %s", status, got)
		}
		checkOpenAIError(t, got, "upstream_timeout", "200ms")
		if c := endOne(t, p, idOf("e")); c.HTTPStatus != 504 || c.Error == "" || c.Trainable {
			t.Errorf("record: %+v", c)
		}
	})
}

func TestUnknownOrEndedEpisode404(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	status, _, got := post(t, srv.URL+"/e/nope/v1/chat/completions", chatBody("go", reqOpts{}))
	if status != 404 {
		t.Fatalf("status %d", status)
	}
	checkOpenAIError(t, got, "not_found", `"nope"`, "Begin")

	prefix := p.Begin(named("done"))
	if recs := p.End(idOf("done")); len(recs) != 0 {
		t.Fatalf("End of an unused episode = %v", recs)
	}
	status, _, got = post(t, srv.URL+prefix+"/chat/completions", chatBody("go", reqOpts{}))
	if status != 404 {
		t.Fatalf("ended episode: status %d", status)
	}
	checkOpenAIError(t, got, "not_found", `"`+idOf("done")+`"`)
	resp, err := http.Get(srv.URL + prefix + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("pass-through on ended episode: %d", resp.StatusCode)
	}
	status, _, got = post(t, srv.URL+"/v1/chat/completions", chatBody("go", reqOpts{}))
	if status != 404 {
		t.Fatalf("path outside /e/: status %d", status)
	}
	checkOpenAIError(t, got, "not_found", "/e/<episode>/")
	if n := len(up.chatBodies()); n != 0 {
		t.Errorf("upstream got %d calls for unknown episodes", n)
	}
	if recs := p.End(idOf("done")); recs != nil {
		t.Errorf("records after End: %v", recs)
	}
}

func TestBadJSON400(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	prefix := p.Begin(named("e"))
	for _, bad := range []string{`{"model": "toy", "messages": [`, `[1, 2]`} {
		status, _, got := post(t, srv.URL+prefix+"/chat/completions", []byte(bad))
		if status != 400 {
			t.Fatalf("%s: status %d", bad, status)
		}
		checkOpenAIError(t, got, "invalid_request_error")
	}
	post(t, srv.URL+prefix+"/chat/completions", chatBody("go", reqOpts{}))
	recs := p.End(idOf("e"))
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	for i, c := range recs[:2] {
		if c.CallIndex != int32(i) || c.HTTPStatus != 400 || c.Error == "" || c.Trainable || c.Request == "" {
			t.Errorf("bad call %d: %+v", i, c)
		}
	}
	if recs[0].Request != `{"model": "toy", "messages": [` {
		t.Errorf("Request = %q", recs[0].Request)
	}
	if recs[2].CallIndex != 2 || !recs[2].Trainable {
		t.Errorf("good call after bad ones: %+v", recs[2])
	}
	if n := len(up.chatBodies()); n != 1 {
		t.Errorf("upstream got %d calls, want 1", n)
	}
}

func TestBodyLimit413(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{MaxBodyBytes: 64})
	prefix := p.Begin(named("e"))
	status, _, got := post(t, srv.URL+prefix+"/chat/completions", chatBody(strings.Repeat("x", 100), reqOpts{}))
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d", status)
	}
	checkOpenAIError(t, got, "invalid_request_error", "64 bytes")
	if c := endOne(t, p, idOf("e")); c.HTTPStatus != 413 || c.Trainable {
		t.Errorf("record %+v", c)
	}
}

func TestPassThroughNotRecorded(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	prefix := p.Begin(named("e"))
	resp, err := http.Get(srv.URL + prefix + "/models?verbose=1")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp, err = http.Get(up.srv.URL + "/v1/models?verbose=1")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, want) {
		t.Errorf("models: got %s want %s", got, want)
	}
	if up.lastQuery != "verbose=1" {
		t.Errorf("query = %q", up.lastQuery)
	}
	if recs := p.End(idOf("e")); len(recs) != 0 {
		t.Errorf("pass-through recorded: %v", recs)
	}
}

// Episodes run concurrently; every record lands in its own episode with the
// upstream's exact ids, in arrival order.
func TestConcurrentEpisodes(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	const episodes, calls = 8, 6
	type result struct {
		recs   []schemas.Call
		truths []truth
		bodies [][]byte
	}
	results := make([]result, episodes)
	var wg sync.WaitGroup
	for e := range episodes {
		ep := Episode{Key: schemas.EpisodeKey{Run: "r", Phase: fmt.Sprintf("ep%d", e), Group: int32(e / 2), Attempt: int32(e % 2)}}
		id := ep.Key.ID()
		prefix := p.Begin(ep)
		wg.Go(func() {
			res := &results[e]
			for i := range calls {
				user := fmt.Sprintf("ep=%s call=%d", id, i)
				o := reqOpts{stream: i%2 == 1, tools: i%3 == 0}
				body := chatBody(user, o)
				if status, _, got := post(t, srv.URL+prefix+"/chat/completions", body); status != 200 {
					t.Errorf("%s call %d: %d %s", id, i, status, got)
				}
				res.bodies = append(res.bodies, body)
				res.truths = append(res.truths, upstreamTruth(t, up, user, o))
			}
			res.recs = p.End(id)
		})
	}
	wg.Wait()
	for e, res := range results {
		if len(res.recs) != calls {
			t.Fatalf("ep%d: %d records, want %d", e, len(res.recs), calls)
		}
		for i, c := range res.recs {
			if c.EpisodeID != schemas.EpisodeID(0, fmt.Sprintf("ep%d", e), int32(e/2), int32(e%2)) || c.Group != int32(e/2) || c.Attempt != int32(e%2) || c.CallIndex != int32(i) {
				t.Errorf("ep%d record %d attributed to %s g%d a%d #%d", e, i, c.EpisodeID, c.Group, c.Attempt, c.CallIndex)
			}
			if c.Request != string(res.bodies[i]) {
				t.Errorf("ep%d record %d has request %s", e, i, c.Request)
			}
			checkTrained(t, c, res.truths[i])
		}
	}
}

func TestConcurrentCallsInOneEpisode(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	prefix := p.Begin(named("e"))
	const n = 12
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			post(t, srv.URL+prefix+"/chat/completions", chatBody(fmt.Sprintf("call %d", i), reqOpts{stream: i%2 == 0}))
		})
	}
	wg.Wait()
	recs := p.End(idOf("e"))
	if len(recs) != n {
		t.Fatalf("%d records", len(recs))
	}
	for i, c := range recs {
		if c.CallIndex != int32(i) {
			t.Fatalf("records not ordered by a dense CallIndex: %d at %d", c.CallIndex, i)
		}
		var req stubRequest
		if err := json.Unmarshal([]byte(c.Request), &req); err != nil {
			t.Fatal(err)
		}
		checkTrained(t, c, upstreamTruth(t, up, req.Messages[1].Content, reqOpts{stream: req.Stream}))
	}
}

func TestEndWaitsForInFlightCall(t *testing.T) {
	up := newStub(t, modeOK)
	release := up.pauseStreams()
	defer release()
	p, srv := newProxy(t, up, Options{})
	prefix := p.Begin(named("e"))
	resp, err := http.Post(srv.URL+prefix+"/chat/completions", "application/json", bytes.NewReader(chatBody("go", reqOpts{stream: true})))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-up.firstSent // the call is in flight

	ended := make(chan []schemas.Call, 1)
	go func() { ended <- p.End(idOf("e")) }()
	for p.lookup("e") != nil { // End has stopped accepting calls
		runtime.Gosched()
	}
	if status, _, _ := post(t, srv.URL+prefix+"/chat/completions", chatBody("late", reqOpts{})); status != 404 {
		t.Errorf("call after End: %d, want 404", status)
	}
	select {
	case recs := <-ended:
		t.Fatalf("End returned %d records while a call was in flight", len(recs))
	default:
	}
	release()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	recs := <-ended
	if len(recs) != 1 || !recs[0].Trainable || recs[0].FinishReason != "stop" {
		t.Fatalf("End = %+v", recs)
	}
}

func TestBeginReusedIDStartsFresh(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	first, second := named("e"), named("e")
	second.Key.Retry = 1
	prefix := p.Begin(first)
	post(t, srv.URL+prefix+"/chat/completions", chatBody("a", reqOpts{}))
	prefix = p.Begin(second)
	post(t, srv.URL+prefix+"/chat/completions", chatBody("b", reqOpts{}))
	c := endOne(t, p, idOf("e"))
	if c.Retry != 1 || c.CallIndex != 0 || !strings.Contains(c.Request, `"b"`) {
		t.Errorf("record %+v", c)
	}
}

func TestEpisodeIDEscaping(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	ep := named("run 1/r2 g#5")
	id := ep.Key.ID()
	prefix := p.Begin(ep)
	if status, _, got := post(t, srv.URL+prefix+"/chat/completions", chatBody("go", reqOpts{})); status != 200 {
		t.Fatalf("status %d: %s", status, got)
	}
	if c := endOne(t, p, id); c.EpisodeID != id {
		t.Errorf("EpisodeID = %q", c.EpisodeID)
	}
}

func TestStripResponseKeepsEverythingElse(t *testing.T) {
	in := `{"b":1,"prompt_token_ids":[1,2],"a":{"x" : [1, 2]},"choices":[{"index":0,"logprobs":{"content":[]},"token_ids":[3]},{"index":1,"token_ids":null}]}`
	for _, tc := range []struct {
		s    strip
		want string
	}{
		{strip{}, in},
		{strip{tokenIDs: true}, `{"b":1,"prompt_token_ids":null,"a":{"x" : [1, 2]},"choices":[{"index":0,"logprobs":{"content":[]},"token_ids":null},{"index":1,"token_ids":null}]}`},
		{strip{logprobs: true}, `{"b":1,"prompt_token_ids":[1,2],"a":{"x" : [1, 2]},"choices":[{"index":0,"logprobs":null,"token_ids":[3]},{"index":1,"token_ids":null}]}`},
	} {
		got, _, err := stripResponse([]byte(in), tc.s)
		if err != nil || string(got) != tc.want {
			t.Errorf("strip %+v:\n got %s (%v)\nwant %s", tc.s, got, err, tc.want)
		}
		r, err := parseResponse([]byte(in))
		if err != nil || !r.walked {
			t.Fatalf("parseResponse: walked %v, %v", r.walked, err)
		}
		if got, _, err := r.stripped(tc.s); err != nil || string(got) != tc.want {
			t.Errorf("spliced %+v:\n got %s (%v)\nwant %s", tc.s, got, err, tc.want)
		}
	}
	// Absent fields stay absent; nothing to change leaves the bytes alone.
	plain := `{ "choices": [ {"index": 0} ] }`
	if got, changed, _ := stripResponse([]byte(plain), strip{true, true}); changed || string(got) != plain {
		t.Errorf("unchanged input rewritten: %s", got)
	}
	// Splicing keeps even the whitespace around the hidden values.
	spaced := `{ "choices": [ {"index": 0, "token_ids" : [1, 2] } ] }`
	r, _ := parseResponse([]byte(spaced))
	if got, changed, _ := r.stripped(strip{tokenIDs: true}); !changed || string(got) != `{ "choices": [ {"index": 0, "token_ids" : null } ] }` {
		t.Errorf("spliced: %s", got)
	}
}

func TestMediaTypeAndReadBody(t *testing.T) {
	for ct, want := range map[string]string{
		"application/json": "application/json", "application/json; charset=utf-8": "application/json",
		"Application/JSON": "application/json", "text/event-stream; charset=utf-8": "text/event-stream",
		"text/plain": "text/plain", "application/json;;": "",
	} {
		if got := mediaType(ct); got != want {
			t.Errorf("mediaType(%q) = %q, want %q", ct, got, want)
		}
	}
	// The announced length only sizes the buffer: a longer or shorter body
	// is read whole, as io.ReadAll does.
	for _, n := range []int64{-1, 0, 5, 11, 100} {
		if b, err := readBody(strings.NewReader("hello world"), n); err != nil || string(b) != "hello world" {
			t.Errorf("readBody(n=%d) = %q, %v", n, b, err)
		}
	}
}

// On a host with several model servers each episode's calls go to its
// own: the one its Episode names, else the proxy's.
func TestEpisodeUpstream(t *testing.T) {
	a, b := newStub(t, modeOK), newStub(t, modeOK)
	p, srv := newProxy(t, a, Options{})
	ea := p.Begin(named("a"))
	eb := named("b")
	eb.Upstream = b.srv.URL
	pb := p.Begin(eb)
	for _, prefix := range []string{ea, pb} {
		if status, _, body := post(t, srv.URL+prefix+"/chat/completions", chatBody("hello", reqOpts{})); status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
	}
	if _, err := http.Get(srv.URL + pb + "/models?from=b"); err != nil {
		t.Fatal(err)
	}
	if len(a.chatBodies()) != 1 || len(b.chatBodies()) != 1 {
		t.Errorf("calls: %d to a, %d to b; want one each", len(a.chatBodies()), len(b.chatBodies()))
	}
	if b.lastQuery != "from=b" || a.lastQuery != "" {
		t.Errorf("pass-through went to a %q, b %q; want b", a.lastQuery, b.lastQuery)
	}
	for _, id := range []string{idOf("a"), idOf("b")} {
		if recs := p.End(id); len(recs) != 1 || !recs[0].Trainable {
			t.Errorf("episode %s recorded %+v", id, recs)
		}
	}
}

// A harness that sends a streamed call and stops reading must not hold End
// past UpstreamTimeout: the relay's writes to it fail at the call's deadline.
func TestHarnessStopsReadingStream(t *testing.T) {
	chunk := []byte(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"toy","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("x", 4000) + `"},"logprobs":null,"finish_reason":null,"token_ids":[1]}]}` + "\n\n")
	called := make(chan struct{})
	var once sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		once.Do(func() { close(called) })
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for range 1 << 16 { // 256 MiB at most; the proxy stops reading long before
			if _, err := w.Write(chunk); err != nil || rc.Flush() != nil {
				return
			}
		}
	}))
	t.Cleanup(up.Close)
	p, srv := newProxy(t, nil, Options{UpstreamTimeout: 300 * time.Millisecond})
	p.SetUpstream(up.URL)
	prefix := p.Begin(named("e"))

	conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body := chatBody("go", reqOpts{stream: true})
	req := fmt.Sprintf("POST %s/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		prefix, len(body), body)
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	// The harness never reads from conn.
	select {
	case <-called:
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not reach the model server in 20 s")
	}
	ended := make(chan []schemas.Call, 1)
	go func() { ended <- p.End(idOf("e")) }()
	select {
	case recs := <-ended:
		// Normally the write to the harness fails at the deadline; on a
		// machine too slow to fill the connection's buffers by then, the
		// upstream read does first. Either way End returned.
		if len(recs) != 1 || recs[0].Trainable ||
			!strings.Contains(recs[0].Error, "stopped reading") && !strings.Contains(recs[0].Error, "UpstreamTimeout") {
			t.Errorf("records: %+v", recs)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("End still waiting 20 s after a 300 ms UpstreamTimeout: the relay is stuck writing to a harness that does not read")
	}
}

// A stream's headers reach the harness even while the model server has not
// sent a first event (a long prefill): the proxy sends them on their own
// when no event follows them soon (headerDelay).
func TestStreamHeadersBeforeFirstEvent(t *testing.T) {
	gotHeaders := make(chan struct{})
	chunk := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"toy","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":"stop","token_ids":[1]}],"prompt_token_ids":[2]}` + "\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select { // the first event comes only once the harness has seen the headers
		case <-gotHeaders:
		case <-time.After(20 * time.Second):
		}
		_, _ = io.WriteString(w, chunk+"data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	p, srv := newProxy(t, nil, Options{})
	p.SetUpstream(up.URL)
	prefix := p.Begin(named("e"))

	done := make(chan error, 1)
	go func() {
		resp, err := http.Post(srv.URL+prefix+"/chat/completions", "application/json",
			bytes.NewReader(chatBody("go", reqOpts{stream: true})))
		if err != nil {
			done <- err
			return
		}
		close(gotHeaders)
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		done <- err
	}()
	select {
	case <-gotHeaders:
	case <-time.After(10 * time.Second):
		t.Fatal("no response headers 10 s after the model server sent its own: the proxy holds them until the first event")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c := endOne(t, p, idOf("e")); c.Content != "hi" || c.Error != "" {
		t.Errorf("record: %+v", c)
	}
}
