package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// BenchmarkStreamed is BenchmarkProxy's saturated case for streamed chat
// completions (one tool call, 50 events): a bare httputil.ReverseProxy and
// the recording proxy in front of a stub that replays a vLLM stream event by
// event, 16 clients. Compare calls/s of the two; like BenchmarkProxy, all of
// it shares the machine's cores.
//
//	go test -run '^$' -bench Streamed -benchtime 3s ./internal/proxy/
func BenchmarkStreamed(b *testing.B) {
	up := &stub{mode: modeOK, tokenIDs: true, logprobs: true}
	up.srv = httptest.NewServer(up)
	defer up.srv.Close()
	req := chatBody("put the red cup into the top drawer", reqOpts{stream: true, tools: true})
	answer := func(body []byte) []byte {
		resp, err := http.Post(up.srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	plain := answer(req) // what the harness must see
	added, err := parseChatRequest(req)
	if err != nil {
		b.Fatal(err)
	}
	full := answer(added.upstreamBody()) // what the recording proxy gets
	replay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		out := plain
		if bytes.Contains(body, []byte(`"return_token_ids":true`)) {
			out = full
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for ev := range bytes.SplitAfterSeq(out, []byte("\n\n")) {
			_, _ = w.Write(ev)
			w.(http.Flusher).Flush()
		}
	}))
	defer replay.Close()
	upURL, _ := url.Parse(replay.URL)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	client := &http.Client{Transport: tr}

	b.Run("reverse", func(b *testing.B) {
		front := httptest.NewServer(&httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(upURL) },
			Transport: tr.Clone(),
		})
		defer front.Close()
		streamClients(b, client, func() (string, func()) { return front.URL + "/v1", func() {} }, plain)
	})
	b.Run("recording", func(b *testing.B) {
		p := New(Options{Logger: slog.New(slog.DiscardHandler)})
		p.SetUpstream(replay.URL)
		front := httptest.NewServer(p)
		defer front.Close()
		var episodes atomic.Int64
		streamClients(b, client, func() (string, func()) {
			ep := Episode{Key: schemas.EpisodeKey{Run: "bench", Group: int32(episodes.Add(1))}}
			id := ep.Key.ID()
			base := front.URL + p.Begin(ep)
			return base, func() {
				for _, c := range p.End(id) {
					if !c.Trainable {
						b.Errorf("record not trainable: %s", c.Error)
					}
				}
			}
		}, plain)
	})
}

// streamClients runs b.N streamed calls from 16 clients; each client uses
// begin's base URL for 50 calls, then calls end and begins anew.
func streamClients(b *testing.B, client *http.Client, begin func() (string, func()), want []byte) {
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		base, end := begin()
		calls := 0
		body := chatBody("put the red cup into the top drawer", reqOpts{stream: true, tools: true})
		for pb.Next() {
			if calls == 50 {
				end()
				base, end = begin()
				calls = 0
			}
			calls++
			resp, err := client.Post(base+"/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, want) {
				b.Errorf("harness got %d bytes (%v), want the upstream's %d", len(got), err, len(want))
				return
			}
		}
		end()
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkRelayWork is the proxy's own work on an answer, without the
// network: for a non-streamed answer, decoding, recording and stripping it;
// for a stream, the same for each of its events.
func BenchmarkRelayWork(b *testing.B) {
	var answer, stream []byte
	for _, r := range stubResponses() {
		// As the proxy asks: logprobs and token ids, no top logprobs.
		if answer == nil && bytes.Contains(r, []byte(`"prompt_token_ids":[`)) && bytes.Contains(r, []byte(`"tool_calls"`)) &&
			bytes.Contains(r, []byte(`"top_logprobs":[]`)) {
			answer = r
		}
	}
	up := &stub{tokenIDs: true, logprobs: true}
	req := stubRequest{Model: "toy", Logprobs: true, ReturnTokenIDs: true, Tools: []json.RawMessage{json.RawMessage(`{}`)}}
	req.Messages = append(req.Messages, struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}{"user", "put the red cup into the top drawer"})
	rr := httptest.NewRecorder()
	up.stream(rr, httptest.NewRequest("POST", "/v1/chat/completions", nil), req, generate(req), nil, nil)
	stream = rr.Body.Bytes()
	s := strip{tokenIDs: true, logprobs: true}
	b.Run("answer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var rec schemas.Call
			r, err := parseResponse(answer)
			if err != nil {
				b.Fatal(err)
			}
			recordCompletion(&rec, &r.chatResponse)
			if _, _, err := r.stripped(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		p := New(Options{})
		var out []byte
		for b.Loop() {
			var a streamAssembly
			out = out[:0]
			for ev := range bytes.SplitAfterSeq(stream, []byte("\n\n")) {
				out = p.forwardEvent(out, ev, &a, s)
			}
			var rec schemas.Call
			a.fill(&rec)
		}
	})
}
