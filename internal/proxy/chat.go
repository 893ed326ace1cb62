package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/roundhouse-rl/roundhouse/internal/sampling"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Field placement (vLLM >= 0.10.2, vllm/entrypoints/openai/chat_completion/
// protocol.py and serving.py): request "return_token_ids": true makes the
// response carry "prompt_token_ids" at the top level and "token_ids" on each
// choice; in a stream, prompt_token_ids comes on the first chunk only and each
// chunk's choices[].token_ids holds that chunk's delta tokens. "logprobs": true
// fills choices[].logprobs.content[*].logprob (per chunk when streaming).

// chatRequest is what the proxy needs from the harness's request.
type chatRequest struct {
	model        string
	stream       bool
	wantLogprobs bool // the harness itself set "logprobs": true
	wantTokenIDs bool // the harness itself set "return_token_ids": true
	// seed is the integer "seed" the request goes upstream with, the
	// harness's own or the injected one; nil when it goes without.
	seed         *int64
	seedInjected bool
	// given and constraints are the request's sampling settings and what
	// else in it shapes the distribution (sampling.Effective).
	given       sampling.Given
	constraints []string
	// upstream is the body sent upstream in pieces: runs of the harness's
	// body and the proxy's edits between them, so that the body (with its
	// images, up to MaxBodyBytes) is not copied to be sent.
	upstream [][]byte
}

// upstreamBody is the body sent upstream, joined.
func (r chatRequest) upstreamBody() []byte { return bytes.Join(r.upstream, nil) }

// upstreamLen is the length of the body sent upstream.
func (r chatRequest) upstreamLen() int64 { return piecesLen(r.upstream) }

func piecesLen(pieces [][]byte) int64 {
	n := 0
	for _, b := range pieces {
		n += len(b)
	}
	return int64(n)
}

// upstreamReader reads the body sent upstream. A body up to
// joinedUpstream bytes is joined into one bytes.Reader: the transport sends
// the headers and such a body in one write, but flushes the headers on
// their own before a body it does not know to be in memory, a system call
// more than the copy costs. A larger one (images) is sent from its pieces.
func (r chatRequest) upstreamReader() io.ReadCloser { return piecesReader(r.upstream) }

func piecesReader(pieces [][]byte) io.ReadCloser {
	switch {
	case len(pieces) == 1:
		return io.NopCloser(bytes.NewReader(pieces[0]))
	case piecesLen(pieces) <= joinedUpstream:
		return io.NopCloser(bytes.NewReader(bytes.Join(pieces, nil)))
	}
	b := net.Buffers(slices.Clone(pieces)) // Read consumes the pieces
	return io.NopCloser(&b)
}

const joinedUpstream = 64 << 10

// parseChatRequest is parseChatRequestSeeded without a seed to inject.
func parseChatRequest(body []byte) (chatRequest, error) {
	return parseChatRequestSeeded(body, nil)
}

// parseChatRequestSeeded reads the harness's body and builds the one sent
// upstream: the same bytes with "logprobs" and "return_token_ids" set to
// true, by overwriting the values the harness gave them (every occurrence)
// or adding them before the closing brace, and, when inject is set and the
// request has no "seed" (absent or null), with "seed" set to *inject. A
// seed of the harness's own is never changed. One scan finds the fields
// and validates the body. Of a key given twice the last counts, as in the
// model server's JSON parser. top_logprobs is forwarded as the harness set
// it: when the harness did not ask for logprobs the whole logprobs object
// is hidden from it again anyway.
func parseChatRequestSeeded(body []byte, inject *int64) (chatRequest, error) {
	req := chatRequest{upstream: [][]byte{body}}
	s := scanner{b: body}
	if s.peek() != '{' {
		if validJSON(body) {
			return req, fmt.Errorf("request body: %w", errNotObject)
		}
		return req, errors.New("request body is not valid JSON")
	}
	// values of logprobs and return_token_ids, and a null seed
	var forcedMem [4]edit
	forced := forcedMem[:0]
	var hasLogprobs, hasTokenIDs, hasSeed bool
	var nullSeeds []span
	allTrue := true // every occurrence of them, whichever one the server takes
	members := 0
	s.open('{')
	for first := true; s.next('}', first); first = false {
		k, plain := s.key()
		start := s.at()
		v := s.value()
		if s.err != nil {
			break
		}
		members++
		switch decodeKey(k, plain) {
		case "model":
			req.model = stringValue(v) // a non-string model is the server's to reject
		case "stream":
			req.stream = isTrue(v)
		case "logprobs":
			hasLogprobs, req.wantLogprobs = true, isTrue(v)
			forced = append(forced, edit{span{start: start, end: s.i}, trueJSON})
			allTrue = allTrue && req.wantLogprobs
		case "return_token_ids":
			hasTokenIDs, req.wantTokenIDs = true, isTrue(v)
			forced = append(forced, edit{span{start: start, end: s.i}, trueJSON})
			allTrue = allTrue && req.wantTokenIDs
		case "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty":
			// A value that is not a number is the server's to reject; null
			// is left out, as in vLLM.
			i := sampling.Index(decodeKey(k, plain))
			f, err := strconv.ParseFloat(string(v), 64)
			req.given.Set[i], req.given.Value[i] = err == nil, f
		case "tool_choice":
			// "required" and a named function make vLLM constrain decoding
			// to the tools' JSON schema; "auto" and "none" do not.
			req.constrain("structured_output", string(v) == `"required"` || (len(v) > 0 && v[0] == '{'))
		case "response_format":
			req.constrain("structured_output", structuredFormat(v))
		case "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar":
			req.constrain("structured_output", !isNull(v))
		case "logit_bias", "bad_words", "allowed_token_ids":
			req.constrain(decodeKey(k, plain), !isNull(v) && !isEmpty(v))
		case "min_tokens":
			f, err := strconv.ParseFloat(string(v), 64)
			req.constrain("min_tokens", err == nil && f > 0)
		case "seed":
			// The last one counts; null means no seed, as in vLLM.
			hasSeed, req.seed = !isNull(v), nil
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
				req.seed = &n
			}
			if isNull(v) {
				nullSeeds = append(nullSeeds, span{start: start, end: s.i})
			}
		}
	}
	closing := s.i - 1 // the object's closing brace
	if s.end() != nil {
		return req, errors.New("request body is not valid JSON")
	}
	addSeed := inject != nil && !hasSeed
	if hasLogprobs && hasTokenIDs && allTrue && !addSeed {
		return req, nil
	}
	if addSeed {
		seed := strconv.AppendInt(nil, *inject, 10)
		req.seed, req.seedInjected = inject, true
		for _, sp := range nullSeeds {
			forced = append(forced, edit{sp, seed})
		}
		slices.SortFunc(forced, func(a, b edit) int { return a.start - b.start })
	}
	out := make([][]byte, 0, 2*len(forced)+7)
	last := 0
	for _, e := range forced {
		out = append(out, body[last:e.start], e.value)
		last = e.end
	}
	out = append(out, body[last:closing])
	for _, add := range [...]struct {
		member  []byte
		present bool
	}{{logprobsMember, hasLogprobs}, {tokenIDsMember, hasTokenIDs}, {nil, !addSeed || len(nullSeeds) > 0}} {
		if add.present {
			continue
		}
		if add.member == nil {
			add.member = strconv.AppendInt([]byte(`"seed":`), req.seedOr0(), 10)
		}
		if members > 0 {
			out = append(out, comma)
		}
		out = append(out, add.member)
		members++
	}
	req.upstream = append(out, body[closing:])
	return req, nil
}

// The pieces the request rewrite adds; the upstream body only reads them.
var (
	comma          = []byte(",")
	trueJSON       = []byte("true")
	logprobsMember = []byte(`"logprobs":true`)
	tokenIDsMember = []byte(`"return_token_ids":true`)
)

// edit replaces the bytes of a span with value.
type edit struct {
	span
	value []byte
}

// constrain records that the request shapes the distribution by name.
func (r *chatRequest) constrain(name string, on bool) {
	if on && !slices.Contains(r.constraints, name) {
		r.constraints = append(r.constraints, name)
	}
}

// structuredFormat: a response_format other than {"type":"text"} makes
// vLLM constrain decoding to it.
func structuredFormat(v []byte) bool {
	if isNull(v) {
		return false
	}
	var f struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(v, &f) != nil || (f.Type != "" && f.Type != "text")
}

// isEmpty: an empty JSON object or array, spaces allowed.
func isEmpty(v []byte) bool {
	t := bytes.TrimSpace(v)
	return len(t) >= 2 && (t[0] == '{' || t[0] == '[') && len(bytes.TrimSpace(t[1:len(t)-1])) == 0
}

func (r chatRequest) seedOr0() int64 {
	if r.seed == nil {
		return 0
	}
	return *r.seed
}

// stringValue decodes a JSON string value, "" for any other value.
func stringValue(v []byte) string {
	s := scanner{b: v}
	if s.peek() != '"' {
		return ""
	}
	str := s.text()
	if s.end() != nil {
		return ""
	}
	return str
}

// chatResponse is the part of a chat completion (or stream chunk) the record
// needs.
type chatResponse struct {
	Model          string          `json:"model"`
	Choices        []respChoice    `json:"choices"`
	Usage          *respUsage      `json:"usage"`
	PromptTokenIDs []int32         `json:"prompt_token_ids"`
	Error          json.RawMessage `json:"error"` // vLLM streams errors as {"error":{...}}
}

type respChoice struct {
	Index        int             `json:"index"`
	Message      json.RawMessage `json:"message"` // non-streamed
	Delta        json.RawMessage `json:"delta"`   // streamed
	Logprobs     *respLogprobs   `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	TokenIDs     []int32         `json:"token_ids"`
}

type respMessage struct {
	Content   *string         `json:"content"`
	ToolCalls json.RawMessage `json:"tool_calls"`
}

type respLogprobs struct {
	Content []respLogprob `json:"content"`
	spare   []respLogprob // memory for Content when decoded again (walkResponse)
}

type respLogprob struct {
	Logprob float64 `json:"logprob"`
}

type respUsage struct {
	PromptTokens     int32 `json:"prompt_tokens"`
	CompletionTokens int32 `json:"completion_tokens"`
}

// toolCall is one assembled tool call, in the shape (and key order) of a
// non-streamed vLLM message.tool_calls entry.
type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
	// args gathers a streamed call's argument pieces (Function.Arguments
	// once the stream ends): a string grown by += copied all of it per event.
	args strings.Builder
}

type toolFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type toolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id"`
	Type     string        `json:"type"`
	Function *toolFunction `json:"function"`
}

// handleChat forwards one chat completion and fills rec. Only choice index 0
// is recorded (a planner asks for n=1). It returns the seed check to run
// once the record is complete, or nil.
func (p *Proxy) handleChat(w http.ResponseWriter, r *http.Request, rec *schemas.Call, start time.Time, ep *episode) (check func()) {
	root := ep.meta.Upstream
	defer func() {
		rec.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
		rec.UntrainableReason = untrainable(rec)
		rec.Trainable = rec.UntrainableReason == ""
		p.logCall(r.Context(), rec)
	}()

	n := r.ContentLength
	var src io.Reader = r.Body // a length within the limit bounds the read itself
	if n < 0 || n > p.opts.MaxBodyBytes {
		n = -1 // no buffer of the limit's size for a body that fails anyway
		src = http.MaxBytesReader(w, r.Body, p.opts.MaxBodyBytes)
	}
	body, err := readBody(src, n)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			p.fail(w, rec, http.StatusRequestEntityTooLarge, "invalid_request_error",
				fmt.Sprintf("request body exceeds the proxy limit of %d bytes (Options.MaxBodyBytes)", tooBig.Limit))
			return
		}
		p.fail(w, rec, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("read request body: %v", err))
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mediaType(ct) != "application/json" {
			rec.Request = string(body)
			p.fail(w, rec, http.StatusUnsupportedMediaType, "invalid_request_error",
				fmt.Sprintf("Content-Type %q is not supported: send the chat completion as application/json", ct))
			return
		}
	}
	var onBlob func(string, []byte)
	if p.opts.OnBlob != nil {
		key := schemas.EpisodeKey{Run: rec.Run, Round: rec.Round, Phase: rec.Phase, Group: rec.Group,
			Attempt: rec.Attempt, Retry: rec.Retry}
		onBlob = func(name string, data []byte) {
			rec.Images = append(rec.Images, name)
			p.opts.OnBlob(key, name, data)
		}
	}
	// The record keeps the bytes read rather than a copy: nothing writes to
	// body, or to what extractImages returns, after this (the upstream body
	// is sent from pieces of it).
	reqBytes := extractImages(body, onBlob)
	rec.Request = unsafe.String(unsafe.SliceData(reqBytes), len(reqBytes))
	var inject *int64
	if sd := ep.meta.Seeds; sd != nil {
		seed := sd.of(ep.meta.Key.Attempt, rec.CallIndex)
		inject = &seed
	}
	req, err := parseChatRequestSeeded(body, inject)
	if err != nil {
		p.fail(w, rec, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	rec.Model, rec.Stream = req.model, req.stream
	rec.Seed, rec.SeedInjected = req.seed, req.seedInjected
	rec.Sampling = sampling.Effective(req.given, req.constraints, ep.meta.samplingDefaults())

	target, err := p.chatURL(root, r.URL.RawQuery)
	if err != nil {
		p.fail(w, rec, http.StatusBadGateway, "upstream_error", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.opts.UpstreamTimeout)
	defer cancel()

	upReq, err := http.NewRequestWithContext(ctx, http.MethodPost, target, req.upstreamReader())
	if err != nil {
		p.fail(w, rec, http.StatusBadGateway, "upstream_error", fmt.Sprintf("build upstream request: %v", err))
		return
	}
	// As http.NewRequest does for a bytes.Reader: the length, and a way to
	// send the body again when a kept-alive connection turns out closed.
	upReq.ContentLength = req.upstreamLen()
	pieces := req.upstream // not req: the closure would move all of it to the heap
	upReq.GetBody = func() (io.ReadCloser, error) { return piecesReader(pieces), nil }
	// Accept-Encoding is left to the transport so that it decompresses for us.
	copyHeaders(upReq.Header, r.Header, "Content-Length", "Accept-Encoding", "Host")
	if upReq.Header.Get("Content-Type") == "" {
		upReq.Header.Set("Content-Type", "application/json")
	}
	// The transport itself, as a reverse proxy does: what http.Client adds
	// (redirects, which the proxy does not follow anyway; cookies; the
	// url.Error wrapper) costs a few allocations a call.
	resp, err := p.client.Transport.RoundTrip(upReq)
	if err != nil {
		p.failUpstream(w, r, ctx, rec, err)
		return
	}
	defer resp.Body.Close()

	rc := http.NewResponseController(w)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer boundWrites(ctx, rc)()
		p.relayUpstreamError(w, resp, rec)
		return
	}
	s := strip{tokenIDs: !req.wantTokenIDs, logprobs: !req.wantLogprobs}
	if mediaType(resp.Header.Get("Content-Type")) == "text/event-stream" {
		defer boundWrites(ctx, rc)()
		p.relayStream(w, r, ctx, rc, resp, rec, s)
	} else {
		p.relayJSON(w, r, ctx, rc, resp, rec, s)
	}
	if ep.meta.Seeds == nil || rec.Seed == nil {
		return nil
	}
	server := upReq.URL.Scheme + "://" + upReq.URL.Host
	ep.usedServer(server)
	if rec.Error != "" {
		return nil
	}
	return func() {
		p.checkSeed(r.Context(), server, target, func() []byte { return bytes.Join(pieces, nil) }, rec)
	}
}

// logCall logs a failed call as a warning and, when debug logging is on, a
// recorded one. The arguments are built only then: this runs on every call.
func (p *Proxy) logCall(ctx context.Context, rec *schemas.Call) {
	level, msg := slog.LevelDebug, "proxy: call recorded"
	if rec.Error != "" {
		level, msg = slog.LevelWarn, "proxy: call failed"
	}
	if !p.log.Enabled(ctx, level) {
		return
	}
	args := []any{"episode", rec.EpisodeID, "call", rec.CallIndex, "status", rec.HTTPStatus,
		"stream", rec.Stream, "latency_ms", rec.LatencyMS, "trainable", rec.Trainable}
	if rec.Error != "" {
		args = append(args, "err", rec.Error)
	}
	p.log.Log(ctx, level, msg, args...)
}

// mediaType is the media type of a Content-Type value, "" when it does not
// parse. The values OpenAI clients and vLLM send skip mime.ParseMediaType
// and its map of parameters.
func mediaType(ct string) string {
	switch ct {
	case "application/json", "text/event-stream":
		return ct
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return mt
}

// readBody is io.ReadAll, but with the announced length n (-1: unknown) it
// allocates once instead of growing from 512 bytes.
func readBody(r io.Reader, n int64) ([]byte, error) {
	return readBodyInto(nil, r, n)
}

// decodedAnswers holds responses for relayJSON to decode answers into:
// parse reuses their choices, spans and logprobs, which an 8 KB answer
// otherwise grew afresh each call.
var decodedAnswers = sync.Pool{New: func() any { return new(response) }}

// answerBufs holds buffers for model server answers, which relayJSON
// reads whole and lets go once written; answers past maxPooledAnswer
// (an image-heavy request's echo, say) are left to the collector.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

const maxPooledAnswer = 1 << 20

// readBodyInto is readBody appending to b (empty, with whatever capacity
// it has): a body of n bytes (n < 0: unknown) fits without growing when
// b's capacity is over n.
func readBodyInto(b []byte, r io.Reader, n int64) ([]byte, error) {
	// One byte more than announced, so that the read that sees EOF (or a
	// body longer than announced) has room without growing the buffer.
	switch {
	case n >= 0 && int64(cap(b)) < n+1:
		b = make([]byte, 0, n+1)
	case cap(b) == 0: // unknown length, no buffer: start as io.ReadAll does
		b = make([]byte, 0, 512)
	}
	for {
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// fail answers the harness with an OpenAI-style error and records it.
func (p *Proxy) fail(w http.ResponseWriter, rec *schemas.Call, status int, typ, msg string) {
	rec.HTTPStatus = int32(status)
	rec.Error = msg
	writeError(w, status, typ, msg)
}

// statusClientClosed records a call whose harness went away before the answer
// (nginx's "client closed request"); nothing is written back.
const statusClientClosed = 499

// failUpstream handles a request that got no (complete) upstream response.
func (p *Proxy) failUpstream(w http.ResponseWriter, r *http.Request, ctx context.Context, rec *schemas.Call, err error) {
	switch {
	case r.Context().Err() != nil:
		rec.HTTPStatus = statusClientClosed
		rec.Error = fmt.Sprintf("harness disconnected before the model server answered: %v", err)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		p.fail(w, rec, http.StatusGatewayTimeout, "upstream_timeout",
			fmt.Sprintf("model server did not answer within %s (Options.UpstreamTimeout): %v", p.opts.UpstreamTimeout, err))
	default:
		p.fail(w, rec, http.StatusBadGateway, "upstream_error", fmt.Sprintf("model server unreachable: %v", err))
	}
}

// relayUpstreamError passes a non-2xx answer through unchanged and records it.
func (p *Proxy) relayUpstreamError(w http.ResponseWriter, resp *http.Response, rec *schemas.Call) {
	body, readErr := io.ReadAll(resp.Body)
	copyHeaders(w.Header(), resp.Header, "Content-Length")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	rec.HTTPStatus = int32(resp.StatusCode)
	const max = 4096
	snippet := body
	if len(snippet) > max {
		snippet = snippet[:max]
	}
	rec.Error = fmt.Sprintf("model server answered %d: %s", resp.StatusCode, snippet)
	if readErr != nil {
		rec.Error += fmt.Sprintf(" (body read failed: %v)", readErr)
	}
}

// relayJSON records a non-streamed completion and returns it minus what the
// proxy added.
func (p *Proxy) relayJSON(w http.ResponseWriter, r *http.Request, ctx context.Context, rc *http.ResponseController, resp *http.Response, rec *schemas.Call, s strip) {
	buf := answerBufs.Get().(*[]byte)
	body, err := readBodyInto((*buf)[:0], resp.Body, resp.ContentLength)
	// Nothing keeps the answer's bytes once it is written: the record's
	// fields are decoded copies (the scanner's strings and slices are new).
	defer func() {
		if cap(body) <= maxPooledAnswer {
			*buf = body[:0]
			answerBufs.Put(buf)
		}
	}()
	if err != nil {
		p.failUpstream(w, r, ctx, rec, fmt.Errorf("read response: %w", err))
		return
	}
	rec.HTTPStatus = int32(resp.StatusCode)
	out := body
	cr := decodedAnswers.Get().(*response)
	defer func() {
		cr.reset()
		decodedAnswers.Put(cr)
	}()
	if err := cr.parse(body); err != nil {
		// Not a chat completion: hand it over untouched, keep it out of training.
		rec.Error = fmt.Sprintf("model server response is not a chat completion: %v", err)
	} else {
		recordCompletion(rec, &cr.chatResponse)
		outBuf := answerBufs.Get().(*[]byte)
		stripped, changed, err := cr.appendStripped((*outBuf)[:0], s)
		defer func() {
			if cap(stripped) <= maxPooledAnswer {
				*outBuf = stripped[:0]
				answerBufs.Put(outBuf)
			}
		}()
		switch {
		case err != nil:
			rec.Error = fmt.Sprintf("strip proxy-added fields: %v", err)
		case changed:
			out = stripped
		}
	}
	copyHeaders(w.Header(), resp.Header, "Content-Length")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	if len(out) > unblockedAnswer {
		defer boundWrites(ctx, rc)()
	}
	w.WriteHeader(resp.StatusCode)
	_, err = w.Write(out)
	if err == nil {
		// Sent now, not once the handler returns: what is left of the call
		// (its record, OnCall) does not delay the answer.
		err = rc.Flush()
	}
	if err != nil {
		rec.Error = fmt.Sprintf("harness disconnected before reading the response: %v", err)
	}
}

// boundWrites makes the handler's writes to the harness fail at the call's
// deadline, so that a harness that stops reading cannot hold End past
// UpstreamTimeout either, and returns what clears the deadline again (it
// would otherwise stay on the kept-alive connection).
func boundWrites(ctx context.Context, rc *http.ResponseController) (clear func()) {
	deadline, ok := ctx.Deadline()
	if !ok || rc.SetWriteDeadline(deadline) != nil {
		return func() {}
	}
	return func() { _ = rc.SetWriteDeadline(time.Time{}) }
}

// unblockedAnswer is the largest answer relayJSON writes without a write
// deadline: the harness has read all before it sent the request, so the
// connection's send buffer (16 KiB at least on Linux) takes it whole, and
// the write cannot wait on the harness. (Smaller ones are not even written
// before the handler returns, but buffered by the server.)
const unblockedAnswer = 16 << 10

func recordCompletion(rec *schemas.Call, cr *chatResponse) {
	if cr.Model != "" {
		rec.Model = cr.Model
	}
	rec.PromptTokenIDs = cr.PromptTokenIDs
	if cr.Usage != nil {
		rec.PromptTokens, rec.CompletionTokens = cr.Usage.PromptTokens, cr.Usage.CompletionTokens
	}
	if !isNull(cr.Error) {
		rec.Error = "model server error: " + string(cr.Error)
	}
	i := slices.IndexFunc(cr.Choices, func(c respChoice) bool { return c.Index == 0 })
	if i < 0 {
		return
	}
	c := cr.Choices[i]
	rec.CompletionTokenIDs = c.TokenIDs
	rec.CompletionLogprobs = logprobs(c.Logprobs)
	if c.FinishReason != nil {
		rec.FinishReason = *c.FinishReason
	}
	var m respMessage
	if !isNull(c.Message) && parseMessage(c.Message, &m) == nil {
		if m.Content != nil {
			rec.Content = *m.Content
		}
		if !isNull(m.ToolCalls) {
			if tc, ok := compactJSON(m.ToolCalls); ok && tc != "[]" {
				rec.ToolCalls = tc
			}
		}
	}
}

// compactJSON is raw (JSON the scan validated) without insignificant
// whitespace, as json.Compact writes it. vLLM's tool calls come compact
// already, so raw is first only checked: json.Compact costs a state machine
// step per byte.
func compactJSON(raw []byte) (string, bool) {
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped, inString = c == '\\', c != '"'
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r': // whitespace to drop
			var buf bytes.Buffer
			if json.Compact(&buf, raw) != nil {
				return "", false
			}
			return buf.String(), true
		}
	}
	return string(raw), true
}

func logprobs(l *respLogprobs) []float32 {
	if l == nil {
		return nil
	}
	return appendLogprobs(make([]float32, 0, len(l.Content)), l)
}

func appendLogprobs(out []float32, l *respLogprobs) []float32 {
	if l != nil {
		for _, c := range l.Content {
			out = append(out, float32(c.Logprob))
		}
	}
	return out
}

// untrainable says why a call cannot train, "" when it can. Only a
// complete, successful call whose upstream returned the prompt ids, the
// completion ids and one logprob per completion token can; the proxy never
// reconstructs ids itself. Of those, only calls whose distribution the
// trainer can reproduce (sampling.Reasons).
//
// When the server reports usage, the id counts must match it: vLLM builds
// with a tool or reasoning parser have dropped the ids of buffered stream
// chunks (vllm#29074, #37737), and such a call would train on a completion
// the model did not produce.
func untrainable(c *schemas.Call) string {
	switch {
	case c.Error != "" || c.HTTPStatus < 200 || c.HTTPStatus > 299:
		return "failed"
	case len(c.PromptTokenIDs) == 0 || len(c.CompletionTokenIDs) == 0:
		return "no_token_ids"
	case len(c.CompletionLogprobs) != len(c.CompletionTokenIDs):
		return "no_logprobs"
	case (c.PromptTokens != 0 && int(c.PromptTokens) != len(c.PromptTokenIDs)) ||
		(c.CompletionTokens != 0 && int(c.CompletionTokens) != len(c.CompletionTokenIDs)):
		return "token_count_mismatch"
	}
	return sampling.Reasons(c.Sampling)
}

// hopHeaders are connection-level headers a proxy must not forward.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// copyHeaders shares the values' slices: neither side's are changed in
// place afterwards (Set replaces a key's slice, the transport only reads).
func copyHeaders(dst, src http.Header, skip ...string) {
	for k, vs := range src {
		if slices.Contains(hopHeaders, k) || slices.ContainsFunc(skip, func(s string) bool { return strings.EqualFold(s, k) }) {
			continue
		}
		dst[k] = vs
	}
}

// streamAssembly builds one record from a stream's chunks.
type streamAssembly struct {
	model      string
	prompt     []int32
	completion []int32
	logprobs   []float32
	content    strings.Builder
	calls      []*toolCall
	byIndex    map[int]*toolCall
	finish     string
	usage      *respUsage
	done       bool // saw data: [DONE]
	errs       []string

	// chunk and delta are the last chunk and its delta, decoded into the
	// same memory each time; calls0, the last delta's tool-call pieces.
	chunk  response
	delta  respMessage
	calls0 []callPiece
}

func (a *streamAssembly) add(c *chatResponse) {
	if a.model == "" {
		a.model = c.Model
	}
	a.prompt = append(a.prompt, c.PromptTokenIDs...) // first chunk only
	if c.Usage != nil {
		a.usage = c.Usage
	}
	if !isNull(c.Error) {
		a.errs = append(a.errs, "model server stream error: "+string(c.Error))
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		if a.completion == nil {
			// Room for a short completion at once, not grown token by token.
			a.completion, a.logprobs = make([]int32, 0, 64), make([]float32, 0, 64)
		}
		a.completion = append(a.completion, ch.TokenIDs...)
		a.logprobs = appendLogprobs(a.logprobs, ch.Logprobs)
		if ch.FinishReason != nil {
			a.finish = *ch.FinishReason
		}
		if !isNull(ch.Delta) && !a.walkDelta(ch.Delta) {
			a.addDelta(ch.Delta)
		}
	}
}

// addDelta adds a delta's content and tool-call pieces, decoded as
// json.Unmarshal decodes them.
func (a *streamAssembly) addDelta(raw []byte) {
	d := &a.delta
	*d = respMessage{}
	if err := parseMessage(raw, d); err != nil {
		a.errs = append(a.errs, fmt.Sprintf("unparseable delta: %v", err))
		return
	}
	if d.Content != nil {
		a.content.WriteString(*d.Content)
	}
	if isNull(d.ToolCalls) {
		return
	}
	tds, err := parseToolCallDeltas(d.ToolCalls)
	if err != nil {
		a.errs = append(a.errs, fmt.Sprintf("unparseable tool call delta: %v", err))
		return
	}
	for _, td := range tds {
		a.addToolCall(td)
	}
}

// walkDelta is addDelta in one pass over the delta and without allocating
// for what vLLM sends: the delta is read into pieces of raw first and added
// only once all of it has been read, so that at anything walkDelta leaves
// to addDelta (see walkResponse) it reports false having added nothing.
func (a *streamAssembly) walkDelta(raw []byte) bool {
	s := scanner{b: raw}
	var content text
	calls := a.calls0[:0]
	var seen uint
	s.open('{')
	for first := true; s.next('}', first); first = false {
		switch s.field(messageFields, &seen) {
		case "content":
			if !s.null() {
				content = s.textPiece()
			}
		case "tool_calls":
			if s.null() || !s.open('[') {
				break
			}
			for first := true; s.next(']', first); first = false {
				calls = append(calls, callPiece{})
				s.callPiece(&calls[len(calls)-1])
			}
		default:
			s.value()
		}
	}
	a.calls0 = calls
	if s.end() != nil {
		return false
	}
	content.writeTo(&a.content)
	for i := range calls {
		a.addCallPiece(&calls[i])
	}
	return true
}

// callPiece is a tool-call delta as walkDelta reads it (see toolCallDelta).
type callPiece struct {
	index           int
	id, typ         text
	function        bool
	name, arguments text
}

// addCallPiece is addToolCall for a callPiece.
func (a *streamAssembly) addCallPiece(c *callPiece) {
	tc := a.toolCall(c.index)
	if c.id.len() > 0 {
		tc.ID = c.id.String()
	}
	if c.typ.len() > 0 {
		tc.Type = c.typ.String()
	}
	if c.function {
		if tc.Function.Name == "" {
			tc.Function.Name = c.name.String()
		}
		c.arguments.writeTo(&tc.args)
	}
}

// addToolCall merges an OpenAI tool-call delta: the first delta of an index
// carries id, type and name; later ones append argument text.
func (a *streamAssembly) addToolCall(td toolCallDelta) {
	tc := a.toolCall(td.Index)
	if td.ID != "" {
		tc.ID = td.ID
	}
	if td.Type != "" {
		tc.Type = td.Type
	}
	if td.Function != nil {
		if tc.Function.Name == "" {
			tc.Function.Name = td.Function.Name
		}
		tc.args.WriteString(td.Function.Arguments)
	}
}

// toolCall is the assembled call of a tool-call index, new at its first delta.
func (a *streamAssembly) toolCall(index int) *toolCall {
	tc := a.byIndex[index]
	if tc == nil {
		tc = &toolCall{}
		if a.byIndex == nil {
			a.byIndex = map[int]*toolCall{}
		}
		a.byIndex[index] = tc
		a.calls = append(a.calls, tc)
	}
	return tc
}

func (a *streamAssembly) fill(rec *schemas.Call) {
	if a.model != "" {
		rec.Model = a.model
	}
	rec.PromptTokenIDs, rec.CompletionTokenIDs, rec.CompletionLogprobs = a.prompt, a.completion, a.logprobs
	rec.FinishReason = a.finish
	rec.Content = a.content.String()
	if len(a.calls) > 0 {
		for _, tc := range a.calls {
			tc.Function.Arguments = tc.args.String()
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(a.calls) // plain strings always encode
		rec.ToolCalls = strings.TrimRight(buf.String(), "\n")
	}
	// The proxy does not add stream_options.include_usage: that would put an
	// extra usage chunk into the stream (or need one removed again, which is
	// wrong when the server forces usage). Usage is taken from the stream when
	// the harness or server asked for it, otherwise counted from the token
	// ids, which is how vLLM computes it.
	if a.usage != nil {
		rec.PromptTokens, rec.CompletionTokens = a.usage.PromptTokens, a.usage.CompletionTokens
	} else {
		rec.PromptTokens, rec.CompletionTokens = int32(len(a.prompt)), int32(len(a.completion))
	}
	if len(a.errs) > 0 {
		rec.Error = strings.Join(a.errs, "; ")
	}
}

// relayStream passes the SSE stream through event by event (each flushed
// before the relay could wait on the model server),
// records every chunk and hides what the proxy added.
func (p *Proxy) relayStream(w http.ResponseWriter, r *http.Request, ctx context.Context, rc *http.ResponseController, resp *http.Response, rec *schemas.Call, s strip) {
	copyHeaders(w.Header(), resp.Header, "Content-Length")
	w.WriteHeader(resp.StatusCode)
	rec.HTTPStatus = int32(resp.StatusCode)
	hf := flushHeadersLate(rc)
	defer hf.stop()

	var a streamAssembly
	var clientErr, readErr error
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	bufs := relayBufs.Get().(*relayBuf)
	defer func() {
		br.Reset(nil) // keep no body alive from the pool
		streamReaders.Put(br)
		if cap(bufs.event) <= maxPooledAnswer && cap(bufs.out) <= maxPooledAnswer {
			bufs.event, bufs.out = bufs.event[:0], bufs.out[:0]
			relayBufs.Put(bufs)
		}
	}()
	// event is the one being read; out, what the harness gets next: the
	// events of one read leave in one write, as a bare reverse proxy sends
	// what it read (a write per event cost a system call every 4 KiB, the
	// server's buffer, and a chunk header each).
	event, out := bufs.event, bufs.out
	for clientErr == nil {
		start := len(event)
		line, err := br.ReadSlice('\n')
		event = append(event, line...)
		for err == bufio.ErrBufferFull { // a line longer than br's buffer
			line, err = br.ReadSlice('\n')
			event = append(event, line...)
		}
		if line := event[start:]; len(line) > 0 && len(bytes.TrimRight(line, "\r\n")) == 0 { // blank line ends an event
			out = p.forwardEvent(out, event, &a, s)
			event = event[:0]
			// Flush before the next read could wait on the model server,
			// not after every event.
			if !eventBuffered(br) {
				clientErr = hf.write(w, rc, out)
				out = out[:0]
			}
		}
		if err != nil {
			out = append(out, event...) // an unterminated tail passes through as is
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
	}
	if clientErr == nil {
		clientErr = hf.write(w, rc, out)
	}
	bufs.event, bufs.out = event, out
	switch {
	case clientErr != nil:
		a.errs = append(a.errs, fmt.Sprintf("harness stopped reading the stream: %v", clientErr))
	case readErr != nil && r.Context().Err() != nil:
		a.errs = append(a.errs, fmt.Sprintf("harness disconnected during the stream: %v", readErr))
	case readErr != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		a.errs = append(a.errs, fmt.Sprintf("model server stream exceeded %s (Options.UpstreamTimeout): %v", p.opts.UpstreamTimeout, readErr))
	case readErr != nil:
		a.errs = append(a.errs, fmt.Sprintf("model server stream broke: %v", readErr))
	case !a.done:
		a.errs = append(a.errs, "model server stream ended before data: [DONE]")
	}
	a.fill(rec)
}

// streamReaders read model server streams. 32 KiB, as a bare reverse
// proxy's copy buffer: what a read brings leaves in one write (the relay
// flushes when no further event is whole in the buffer, so a 4 KiB buffer
// meant a write system call every 4 KiB of a stream that came in bulk).
var streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

// relayBuf holds a relay's event and output buffers between streams.
type relayBuf struct{ event, out []byte }

var relayBufs = sync.Pool{New: func() any { return &relayBuf{} }}

// headerFlush sends a stream's headers on their own only when its first
// event is slow to come (headerDelay): otherwise they leave in one write
// with it, as a bare reverse proxy sends them. A write of their own cost
// the harness a wakeup per stream, the most of what the relay added to a
// stream's time at one client; but a harness waiting on a long prefill
// should still see the response begin.
type headerFlush struct {
	mu    sync.Mutex
	wrote bool // by the relay: the timer leaves the writer alone
	timer *time.Timer
}

const headerDelay = 50 * time.Millisecond

func flushHeadersLate(rc *http.ResponseController) *headerFlush {
	h := &headerFlush{}
	h.timer = time.AfterFunc(headerDelay, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.wrote {
			_ = rc.Flush()
		}
	})
	return h
}

// write is relayWrite; the first one waits for a timer flush under way
// (the writer is not safe for concurrent use), later ones need not.
func (h *headerFlush) write(w http.ResponseWriter, rc *http.ResponseController, out []byte) error {
	if !h.wrote {
		h.stop()
	}
	return relayWrite(w, rc, out)
}

// stop keeps the timer off the writer from now on; the relay calls it
// before it returns, since the writer may not be used after that.
func (h *headerFlush) stop() {
	h.mu.Lock()
	h.wrote = true
	h.mu.Unlock()
	h.timer.Stop()
}

// relayWrite sends out (if any) to the harness and flushes.
func relayWrite(w http.ResponseWriter, rc *http.ResponseController, out []byte) error {
	if len(out) > 0 {
		if _, err := w.Write(out); err != nil {
			return err
		}
	}
	return rc.Flush()
}

// eventBuffered says whether br holds a whole further SSE event, so that
// reading it cannot wait on the network.
func eventBuffered(br *bufio.Reader) bool {
	pending, _ := br.Peek(br.Buffered())
	return bytes.Contains(pending, []byte("\n\n")) || bytes.Contains(pending, []byte("\n\r\n"))
}

// forwardEvent records one SSE event and appends it, stripped, to out, what
// the harness gets next.
// An event that exists only because of what the proxy added is dropped: vLLM
// sends a chunk with an empty delta and no finish reason only when logprobs
// or token ids were requested (serving.py skips it otherwise).
func (p *Proxy) forwardEvent(out, event []byte, a *streamAssembly, s strip) []byte {
	start, end := -1, -1 // the data line
	for i := 0; i < len(event); {
		next := len(event)
		if j := bytes.IndexByte(event[i:], '\n'); j >= 0 {
			next = i + j + 1
		}
		if bytes.HasPrefix(event[i:next], []byte("data:")) {
			if start >= 0 { // multi-line data: vLLM never sends it; pass it through unparsed
				a.errs = append(a.errs, "multi-line SSE data event passed through unrecorded")
				start = -1
				break
			}
			start, end = i+len("data:"), next
		}
		i = next
	}
	if start >= 0 {
		payload := bytes.TrimRight(event[start:end], "\r\n")
		if bytes.HasPrefix(payload, []byte(" ")) {
			payload, start = payload[1:], start+1
		}
		end = start + len(payload)
		if string(payload) == "[DONE]" {
			a.done = true
		} else if c, err := &a.chunk, a.chunk.parse(payload); err != nil {
			a.errs = append(a.errs, fmt.Sprintf("unparseable stream chunk: %v", err))
		} else {
			a.add(&c.chatResponse)
			before := len(out)
			stripped, changed, err := c.appendStripped(append(out, event[:start]...), s)
			switch {
			case err != nil:
				a.errs = append(a.errs, fmt.Sprintf("strip proxy-added fields: %v", err))
			case changed && onlyAdded(&c.chatResponse, s):
				return out[:before]
			case changed:
				return append(stripped, event[end:]...)
			}
			out = out[:before]
		}
	}
	return append(out, event...)
}

// onlyAdded reports whether a chunk carries nothing but the fields the proxy
// is hiding: every choice has an empty delta, no finish reason, and only
// stripped logprobs/token ids; no usage, no error.
func onlyAdded(c *chatResponse, s strip) bool {
	if c.Usage != nil || !isNull(c.Error) || len(c.Choices) == 0 {
		return false
	}
	for _, ch := range c.Choices {
		if ch.FinishReason != nil || !isEmptyObject(ch.Delta) ||
			(ch.Logprobs != nil && !s.logprobs) || (ch.TokenIDs != nil && !s.tokenIDs) {
			return false
		}
	}
	return true
}
