// Package proxy is the recording proxy between a planner harness and the model
// server (docs/design.md §3). The harness talks OpenAI Chat Completions to
// /e/<episode>/v1/...; the proxy forwards to the model server, asks it for
// token ids and logprobs on every chat completion, records per request what the
// model saw and generated, and returns to the harness exactly what it would
// have received without the proxy.
//
// Per-request records are the only trustworthy training data: a harness may
// prune images or reasoning between calls, so a final transcript is not what
// the model saw.
package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/roundhouse-rl/roundhouse/internal/sampling"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Episode is the attribution of every call made under one base URL.
type Episode struct {
	// Key is the episode try; its ID appears in the URL path.
	Key       schemas.EpisodeKey
	WeightsID string
	// Span is the episode's span: each call's "model.call" span is its
	// child, since the harness's requests carry no trace context.
	Span trace.SpanContext
	// Upstream, when set, is the root of the model server this episode's
	// calls go to (a host with several model servers); otherwise the one
	// SetUpstream names.
	Upstream string
	// Seeds, when set (collect.call_seeds), gives each chat completion
	// without a seed of its own one derived from them (CallSeed), and
	// makes the proxy check that the model server honours seeds.
	Seeds *Seeds
	// Sampling is the model server's defaults for settings a request leaves
	// out, with its logprobs mode (sampling.Defaults); unset, vLLM's
	// neutral defaults with raw logprobs.
	Sampling schemas.Sampling
}

// samplingDefaults is Sampling, or vLLM's own defaults when it is unset.
func (e Episode) samplingDefaults() schemas.Sampling {
	if e.Sampling.LogprobsMode == "" {
		d := sampling.Neutral
		d.LogprobsMode = schemas.LogprobsRaw
		return d
	}
	return e.Sampling
}

// Options configure a Proxy; zero values take the defaults.
type Options struct {
	MaxBodyBytes    int64         // request body limit (default 32 MiB)
	UpstreamTimeout time.Duration // per request, whole exchange (default 10m)
	Logger          *slog.Logger  // default slog.Default()
	// OnCall, when set, receives each record as soon as its call completes
	// (the rollout worker spools it), before End returns it. The answer
	// has been sent by then, but HTTP/1.1 reads the harness's next call on
	// the connection (and sends a stream's last chunk) only after OnCall
	// returns, so it must be quick: the spool copies the record into
	// memory for its writer.
	OnCall func(schemas.EpisodeKey, schemas.Call)
	// OnBlob, when set, receives each inline base64 image of a request once
	// per call, named <sha256>.<ext>; the recorded request then references
	// it as blob://sha256/<name> instead of carrying the bytes.
	OnBlob func(ep schemas.EpisodeKey, name string, data []byte)
}

// Proxy is an http.Handler; create it with New.
type Proxy struct {
	opts   Options
	log    *slog.Logger
	client *http.Client

	mu       sync.RWMutex
	upstream *url.URL
	// chatURLs caches, by model server root ("" for upstream), the chat
	// completions URL: every call needs it, and building it took a parse
	// and four allocations.
	chatURLs map[string]string
	episodes map[string]*episode
	// seedChecks are the repeatability checks, by model server root.
	seedChecks map[string]*seedCheck
}

// episode holds the records of one active episode. Memory per episode is its
// records only.
type episode struct {
	meta Episode
	id   string // meta.Key.ID()

	mu       sync.Mutex
	ended    bool
	next     int32 // next CallIndex
	records  []schemas.Call
	inflight sync.WaitGroup
	// servers are the model server roots its seeded calls went to.
	servers []string
}

// New returns a proxy with no upstream and no episodes.
func New(opts Options) *Proxy {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 32 << 20
	}
	if opts.UpstreamTimeout <= 0 {
		opts.UpstreamTimeout = 10 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Many episodes call the one model server at once; keep their connections.
	tr.MaxIdleConnsPerHost = 256
	return &Proxy{
		opts: opts,
		log:  opts.Logger,
		// Per-request deadlines come from contexts. A redirect goes back to
		// the harness unfollowed: the proxy talks to its model server only.
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		episodes: make(map[string]*episode),
		chatURLs: make(map[string]string),
	}
}

// SetUpstream sets the model server root, e.g. http://127.0.0.1:18100;
// requests go to root + /v1/... It may be called at any time (the model server
// restarts on new weights); calls already forwarded are unaffected.
func (p *Proxy) SetUpstream(rootURL string) {
	u, err := url.Parse(strings.TrimRight(rootURL, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" {
		p.log.Error("proxy: invalid upstream URL, calls will fail with 502", "url", rootURL, "err", err)
		u = nil
	}
	p.mu.Lock()
	p.upstream = u
	delete(p.chatURLs, "")
	p.mu.Unlock()
}

// chatURL is the chat completions URL on the model server root (the
// configured upstream when root is ""), with the harness's query.
func (p *Proxy) chatURL(root, rawQuery string) (string, error) {
	const path = "/v1/chat/completions"
	p.mu.RLock()
	cached, ok := p.chatURLs[root]
	up := p.upstream
	p.mu.RUnlock()
	if ok && rawQuery == "" {
		return cached, nil
	}
	u, err := upstreamTarget(up, root, path, rawQuery)
	if err != nil {
		return "", err
	}
	s := u.String()
	if rawQuery == "" {
		p.mu.Lock()
		if p.upstream == up { // else SetUpstream came in between
			if len(p.chatURLs) >= maxCachedRoots {
				clear(p.chatURLs)
			}
			p.chatURLs[root] = s
		}
		p.mu.Unlock()
	}
	return s, nil
}

// maxCachedRoots bounds chatURLs: a host has a few model servers, but each
// may come back on a new port after a weights change.
const maxCachedRoots = 64

func (p *Proxy) upstreamURL(root, path, rawQuery string) (*url.URL, error) {
	p.mu.RLock()
	u := p.upstream
	p.mu.RUnlock()
	return upstreamTarget(u, root, path, rawQuery)
}

// upstreamTarget is path (escaped) and rawQuery on the model server root,
// or on u when root is "".
func upstreamTarget(u *url.URL, root, path, rawQuery string) (*url.URL, error) {
	if root != "" {
		var err error
		if u, err = url.Parse(strings.TrimRight(root, "/")); err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("episode's model server %q is not a URL: %v", root, err)
		}
	}
	if u == nil {
		return nil, errors.New("no model server configured (Proxy.SetUpstream)")
	}
	// path is the request's escaped path: keep its escaping (%2F stays
	// %2F) rather than escaping the escapes.
	dec, err := url.PathUnescape(path)
	if err != nil {
		return nil, fmt.Errorf("path %q: %w", path, err)
	}
	out := *u
	out.Path = u.Path + dec
	out.RawPath = u.EscapedPath() + path
	out.RawQuery = rawQuery
	return &out, nil
}

// Begin starts accepting calls for ep and returns the path prefix of its base
// URL ("/e/<id>/v1"); the harness base URL is http://host:port + prefix.
// Reusing the id of an episode that was not ended abandons the old one: Begin
// waits for its in-flight calls and drops its records (with a warning), so
// that no call is ever attributed to the wrong retry. Callers should End an
// episode before reusing its id.
func (p *Proxy) Begin(ep Episode) (pathPrefix string) {
	id := ep.Key.ID()
	p.mu.Lock()
	old := p.episodes[id]
	p.episodes[id] = &episode{meta: ep, id: id}
	p.mu.Unlock()
	if old != nil {
		dropped := old.close()
		p.log.Warn("proxy: Begin on an active episode id; the old episode's records are dropped",
			"episode", id, "dropped_calls", len(dropped))
	}
	return "/e/" + url.PathEscape(id) + "/v1"
}

// End stops accepting calls for episode id, waits for its in-flight calls to
// finish (each is bounded by UpstreamTimeout) and returns its records ordered
// by CallIndex. An unknown id returns nil.
func (p *Proxy) End(id string) []schemas.Call {
	calls, _ := p.EndEpisode(id)
	return calls
}

// EndEpisode is End, and also returns a *SeedsIgnoredError when the episode
// sent seeded calls (Episode.Seeds) to a model server whose repeatability
// check has failed: its calls were sampled without the seeds they record.
func (p *Proxy) EndEpisode(id string) ([]schemas.Call, error) {
	p.mu.Lock()
	ep := p.episodes[id]
	delete(p.episodes, id)
	p.mu.Unlock()
	if ep == nil {
		return nil, nil
	}
	calls := ep.close()
	for _, server := range ep.servers {
		if e := p.seedCheckOf(server).failure(); e != nil {
			return calls, e
		}
	}
	return calls, nil
}

// close marks the episode ended, waits for in-flight calls and returns the
// records sorted by CallIndex.
func (e *episode) close() []schemas.Call {
	e.mu.Lock()
	e.ended = true
	e.mu.Unlock()
	// Every admit (inflight.Add) happened under e.mu before ended was set, so
	// Wait cannot race with a new Add.
	e.inflight.Wait()
	e.mu.Lock()
	recs := e.records
	e.records = nil
	e.mu.Unlock()
	slices.SortFunc(recs, func(a, b schemas.Call) int { return int(a.CallIndex - b.CallIndex) })
	return recs
}

// admit assigns the next CallIndex to a new call, or reports that the
// episode has ended.
func (e *episode) admit() (int32, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return 0, false
	}
	i := e.next
	e.next++
	e.inflight.Add(1)
	return i, true
}

func (e *episode) active() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.ended
}

// usedServer notes a model server that got one of the episode's seeded calls.
func (e *episode) usedServer(server string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !slices.Contains(e.servers, server) {
		e.servers = append(e.servers, server)
	}
}

// finish stores the record of an admitted call.
func (e *episode) finish(c schemas.Call) {
	e.mu.Lock()
	e.records = append(e.records, c)
	e.mu.Unlock()
	e.inflight.Done()
}

func (e *episode) newCall(idx int32, start time.Time) schemas.Call {
	k := e.meta.Key
	return schemas.Call{
		Run: k.Run, Round: k.Round, Phase: k.Phase, EpisodeID: e.id,
		Group: k.Group, Attempt: k.Attempt, Retry: k.Retry,
		CallIndex: idx, WeightsID: e.meta.WeightsID,
		StartedAtMS: start.UnixMilli(),
	}
}

func (p *Proxy) lookup(id string) *episode {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.episodes[id]
}

// splitPath parses /e/<escaped id><rest> from the escaped request path.
// rest keeps its /v1 prefix: /e/<id>/v1/models goes to /v1/models, and
// root endpoints such as /e/<id>/tokenize or /e/<id>/health to /tokenize
// and /health.
func splitPath(escaped string) (id, rest string, ok bool) {
	s, ok := strings.CutPrefix(escaped, "/e/")
	if !ok {
		return "", "", false
	}
	slash := strings.IndexByte(s, '/')
	if slash <= 0 {
		return "", "", false
	}
	id, err := url.PathUnescape(s[:slash])
	if err != nil {
		return "", "", false
	}
	return id, s[slash:], true
}

// hasDotSegment reports whether the escaped path has a "." or ".." segment,
// percent-encoded or not (an encoded "/" counts as a separator).
func hasDotSegment(escaped string) bool {
	dec, err := url.PathUnescape(escaped)
	if err != nil {
		return true
	}
	for seg := range strings.SplitSeq(dec, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// ServeHTTP routes /e/{episode}/v1/chat/completions to the recorder and every
// other /e/{episode}/v1/... path unchanged to the model server.
//
// It is not an open relay: the upstream is only ever the configured model
// server (the request line's scheme and host and the Host header are
// ignored), CONNECT is refused, and paths with dot segments, which could
// climb out of the upstream's base path, are rejected.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error",
			"CONNECT is not supported: this proxy forwards only to its model server")
		return
	}
	id, rest, ok := splitPath(r.URL.EscapedPath())
	if ok && hasDotSegment(rest) {
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf(
			"path %q has . or .. segments: use the base URL returned by Proxy.Begin as it is", r.URL.EscapedPath()))
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf(
			"path %q is not under /e/<episode>/: use the base URL returned by Proxy.Begin for the episode", r.URL.Path))
		return
	}
	ep := p.lookup(id)
	notActive := func() {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf(
			"episode %q is not active on this proxy (unknown or already ended); "+
				"start it with Proxy.Begin and use the base URL that returns", id))
	}
	if ep == nil {
		notActive()
		return
	}
	if r.Method == http.MethodPost && rest == "/v1/chat/completions" {
		idx, ok := ep.admit()
		if !ok {
			notActive()
			return
		}
		start := time.Now()
		rec := ep.newCall(idx, start)
		ctx, span := startCall(r.Context(), ep.meta.Span, start)
		// Deferred so that End never waits forever, even if the handler panics.
		defer func() {
			endCall(ctx, span, &rec)
			if p.opts.OnCall != nil {
				p.opts.OnCall(ep.meta.Key, rec)
			}
			ep.finish(rec)
		}()
		if check := p.handleChat(w, r, &rec, start, ep); check != nil {
			check() // after the answer and its latency, before End returns
		}
		return
	}
	if !ep.active() {
		notActive()
		return
	}
	p.passThrough(w, r, rest, ep.meta.Upstream)
}

// passThrough forwards a request that is not recorded (e.g. GET /v1/models).
func (p *Proxy) passThrough(w http.ResponseWriter, r *http.Request, path, root string) {
	target, err := p.upstreamURL(root, path, r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadGateway, "upstream_error", err.Error())
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = target
			pr.Out.Host = ""
		},
		Transport:     p.client.Transport,
		FlushInterval: -1, // pass streamed bodies through as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.log.Warn("proxy: pass-through failed", "path", path, "err", err)
			writeError(w, http.StatusBadGateway, "upstream_error", fmt.Sprintf("model server unreachable: %v", err))
		},
	}
	rp.ServeHTTP(w, r)
}

// writeError writes an OpenAI-style error body ({"error":{...}}), the shape
// vLLM's ErrorResponse has, so that OpenAI clients surface the message.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": status,
	}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
