package proxybench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/proxy"
	"github.com/roundhouse-rl/roundhouse/internal/spool"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Path is the way from the load generator to the stub.
type Path string

const (
	Direct    Path = "direct"    // straight to the stub
	Reverse   Path = "reverse"   // through a bare httputil.ReverseProxy
	Recording Path = "recording" // through proxy.Proxy, one episode per client
	// Spooled is Recording as a rollout worker runs it (internal/host):
	// every record and image also spooled to local disk (internal/spool)
	// as its call completes, each try marked done in the spool at its end.
	Spooled Path = "spooled"
)

// Paths in the order they are measured and printed.
var Paths = []Path{Direct, Reverse, Recording, Spooled}

// Mode is how the harness asks for its answers.
type Mode string

const (
	Plain    Mode = "plain"    // one JSON answer
	Streamed Mode = "streamed" // "stream": true, an SSE event per token
)

// Modes in the order they are measured and printed.
var Modes = []Mode{Plain, Streamed}

// EpisodeLen is how many calls a simulated episode makes before the client
// Ends it and Begins the next. The recording proxy keeps an episode's records
// until End, so this (times the number of clients) bounds its memory, as in
// production where an episode is a few dozen calls.
const EpisodeLen = 50

// Env is one path in front of its own stub, on loopback.
type Env struct {
	Path  Path
	Mode  Mode
	stub  *Stub
	up    *httptest.Server // the stub
	front *httptest.Server // the proxy; nil for Direct
	rec   *proxy.Proxy     // Recording and Spooled
	spool *spool.Spool     // Spooled only: the proxy's OnCall and OnBlob
	// spoolDir is the spool's temporary folder, removed by Close.
	spoolDir string
	spooled  atomic.Int64 // calls spooled
	client   *http.Client
	bodies   [variants][]byte

	mu      sync.Mutex
	nextEp  int
	recErrs []error // problems found in records returned by End
}

// transport is used by the load generator and by both proxies: enough idle
// connections per host that 64 clients never redial (http.DefaultTransport
// keeps only 2, which would make every proxy look slow).
func transport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	return tr
}

// Start starts the stub and, for Reverse and Recording, the proxy in front;
// the harness's calls ask for answers as mode says.
func Start(path Path, mode Mode) (*Env, error) {
	if mode != Plain && mode != Streamed {
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	e := &Env{Path: path, Mode: mode, stub: NewStub(), client: &http.Client{Transport: transport()}}
	for v := range variants {
		e.bodies[v] = requestBody(v, mode == Streamed, nil)
	}
	e.up = httptest.NewServer(e.stub)
	upURL, _ := url.Parse(e.up.URL)
	switch path {
	case Direct:
	case Reverse:
		rp := &httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(upURL) },
			Transport: transport(),
		}
		e.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Without it, now and then (a few times in a 5-round run) a
			// stream's answer began before the transport had seen the end
			// of the request body it was sending; the server then closed
			// that body under it and the transport its connection, cutting
			// the answer (golang/go#40747; "ReverseProxy read error during
			// body copy: use of closed network connection").
			http.NewResponseController(w).EnableFullDuplex()
			rp.ServeHTTP(w, r)
		}))
	case Recording:
		// Info level as in production: the per-call Debug line is filtered
		// out. Images are taken out of the record as in a rollout worker;
		// its OnBlob spools them (Spooled), here they are dropped.
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		e.rec = proxy.New(proxy.Options{Logger: log, OnBlob: func(schemas.EpisodeKey, string, []byte) {}})
		e.rec.SetUpstream(e.up.URL)
		e.front = httptest.NewServer(e.rec)
	case Spooled:
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		dir, err := os.MkdirTemp("", "proxybench-spool-")
		if err != nil {
			e.up.Close()
			return nil, fmt.Errorf("spool dir: %w", err)
		}
		e.spoolDir = dir
		if e.spool, err = spool.New(dir, log); err != nil {
			e.up.Close()
			os.RemoveAll(dir)
			return nil, err
		}
		onCall := func(k schemas.EpisodeKey, c schemas.Call) {
			e.spool.Call(k, c)
			e.spooled.Add(1)
		}
		e.rec = proxy.New(proxy.Options{Logger: log, OnCall: onCall, OnBlob: e.spool.Blob})
		e.rec.SetUpstream(e.up.URL)
		e.front = httptest.NewServer(e.rec)
	default:
		e.up.Close()
		return nil, fmt.Errorf("unknown path %q", path)
	}
	return e, nil
}

// Close stops the servers.
func (e *Env) Close() {
	e.client.CloseIdleConnections()
	if e.front != nil {
		e.front.Close()
	}
	e.up.Close()
	if e.spool != nil {
		e.spool.Close()
	}
	if e.spoolDir != "" {
		os.RemoveAll(e.spoolDir)
	}
}

// answer is what the harness must receive for request variant v.
func (e *Env) answer(v int) []byte {
	if e.Mode == Streamed {
		return e.stub.StreamAnswer(v)
	}
	return e.stub.Answer(v)
}

// RequestBytes and AnswerBytes are the sizes a harness sends and receives;
// UpstreamAnswerBytes is what the recording proxy receives instead (with
// token ids and logprobs).
func (e *Env) RequestBytes() int { return len(e.bodies[0]) }
func (e *Env) AnswerBytes() int  { return len(e.answer(0)) }
func (e *Env) UpstreamAnswerBytes() int {
	if e.Mode == Streamed {
		return len(bytes.Join(e.stub.streams[0][3], nil))
	}
	return len(e.stub.answers[0][3])
}

// client is one simulated harness: sequential calls, and on the Recording
// path its own episode, rotated every EpisodeLen calls.
type client struct {
	env   *Env
	base  string             // harness base URL, ".../v1"
	ep    string             // current episode id (Recording)
	key   schemas.EpisodeKey // and its key
	calls int                // calls in the current episode
	next  int                // next request variant
	// epLen is the episode length before rotation (0: never rotate).
	epLen int
}

func (e *Env) newClient(i int) *client {
	c := &client{env: e, next: i * 7, epLen: EpisodeLen}
	switch {
	case e.rec != nil:
		c.begin()
	case e.front != nil:
		c.base = e.front.URL + "/v1"
	default:
		c.base = e.up.URL + "/v1"
	}
	return c
}

func (c *client) begin() {
	e := c.env
	e.mu.Lock()
	key := schemas.EpisodeKey{Run: "bench", Round: 1, Phase: "rollout", Group: int32(e.nextEp)}
	e.nextEp++
	e.mu.Unlock()
	c.ep, c.key = key.ID(), key
	c.calls = 0
	c.base = e.front.URL + e.rec.Begin(proxy.Episode{Key: key, WeightsID: "w0"})
}

// end Ends the episode and checks its records: the measured work must
// really have been recorded. Records are dropped (bytes per call are
// measured separately by StoredBytesPerCall) so that the benchmark itself
// does not hold memory.
func (c *client) end() {
	if c.env.rec == nil {
		return
	}
	recs := c.env.rec.End(c.ep)
	var err error
	if c.env.spool != nil {
		// Stored, as an episode activity does next: the spool is done with the try.
		err = c.env.spool.Done(c.key)
	}
	switch {
	case err != nil:
	case len(recs) != c.calls:
		err = fmt.Errorf("episode %s: %d records for %d calls", c.ep, len(recs), c.calls)
	case slices.ContainsFunc(recs, func(r schemas.Call) bool { return !r.Trainable }):
		err = fmt.Errorf("episode %s: a record is not trainable", c.ep)
	}
	if err != nil {
		c.env.mu.Lock()
		c.env.recErrs = append(c.env.recErrs, err)
		c.env.mu.Unlock()
	}
}

// call makes one chat completion and checks that the harness got exactly
// the stub's answer to its own request.
func (c *client) call() error {
	if c.env.rec != nil && c.epLen > 0 && c.calls == c.epLen {
		c.end()
		c.begin()
	}
	v := c.next % variants
	c.next++
	c.calls++
	req, err := http.NewRequest(http.MethodPost, c.base+"/chat/completions", bytes.NewReader(c.env.bodies[v]))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.env.client.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
	case !bytes.Equal(body, c.env.answer(v)):
		return fmt.Errorf("answer differs from the stub's (%d vs %d bytes)", len(body), len(c.env.answer(v)))
	}
	return nil
}

// Result of one run.
type Result struct {
	Calls     int
	Errors    int
	FirstErr  error
	Elapsed   time.Duration
	Latencies []time.Duration // sorted
	PeakHeap  uint64          // peak HeapInuse of the whole process during the run
}

// add merges another run's result into r, as if one run.
func (r *Result) add(o Result) {
	r.Calls += o.Calls
	r.Errors += o.Errors
	if r.FirstErr == nil {
		r.FirstErr = o.FirstErr
	}
	r.Elapsed += o.Elapsed
	r.Latencies = append(r.Latencies, o.Latencies...)
	slices.Sort(r.Latencies)
	r.PeakHeap = max(r.PeakHeap, o.PeakHeap)
}

// CallsPerSec is the achieved rate.
func (r Result) CallsPerSec() float64 { return float64(r.Calls) / r.Elapsed.Seconds() }

// Quantile of the latencies (nearest rank), in milliseconds.
func (r Result) Quantile(q float64) float64 {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := min(int(q*float64(len(r.Latencies))), len(r.Latencies)-1)
	return float64(r.Latencies[i].Microseconds()) / 1000
}

// Saturate runs a closed loop: each of clients sends its next call as soon as
// the previous one is answered, until n calls (n > 0) or duration d (d > 0).
func (e *Env) Saturate(clients, n int, d time.Duration) Result {
	var issued atomic.Int64
	return e.run(clients, func(_ int, start time.Time) (time.Time, bool) {
		if n > 0 && issued.Add(1) > int64(n) || d > 0 && time.Since(start) >= d {
			return time.Time{}, false
		}
		return time.Now(), true
	})
}

// Paced runs an open loop at a fixed offered rate: call k is due at
// start + k/rate and goes to client k mod clients. When the client is still
// busy with its previous call at that time, latency counts from when the call
// was due, so a slow answer that delays later calls is charged to them too
// (no coordinated omission, as in wrk2). When the client is idle, latency
// counts from the actual send: Go's timers wake up to ~1 ms late here (the
// netpoller sleeps in whole milliseconds), which is the load generator's delay,
// not the proxy's. It stops after n calls (n > 0) or duration d.
func (e *Env) Paced(clients int, rate float64, n int, d time.Duration) Result {
	if n <= 0 {
		n = int(rate * d.Seconds())
	}
	interval := time.Duration(float64(time.Second) / rate)
	return e.run(clients, func(k int, start time.Time) (time.Time, bool) {
		if k >= n {
			return time.Time{}, false
		}
		due := start.Add(time.Duration(k) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
			return time.Now(), true
		}
		return due, true
	})
}

// run drives clients goroutines; next(k, start) is asked before the k-th call
// of the run (k = client index + j*clients) and returns when the call counts
// as issued, or false to stop that client.
func (e *Env) run(clients int, next func(k int, start time.Time) (time.Time, bool)) Result {
	cs := make([]*client, clients)
	for i := range cs {
		cs[i] = e.newClient(i)
	}
	runtime.GC() // so that the peak heap is this run's
	peak, stopSampler := sampleHeap()
	lats := make([][]time.Duration, clients)
	errs := make([][]error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cs {
		wg.Go(func() {
			for k := i; ; k += clients {
				t0, ok := next(k, start)
				if !ok {
					return
				}
				if err := c.call(); err != nil {
					errs[i] = append(errs[i], err)
					continue
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	res := Result{Elapsed: time.Since(start)}
	stopSampler()
	res.PeakHeap = *peak
	for _, c := range cs {
		c.end()
	}
	res.Latencies = slices.Concat(lats...)
	slices.Sort(res.Latencies)
	all := slices.Concat(errs...)
	e.mu.Lock()
	all = append(all, e.recErrs...)
	e.recErrs = nil
	e.mu.Unlock()
	res.Calls, res.Errors = len(res.Latencies), len(all)
	if len(all) > 0 {
		res.FirstErr = all[0]
	}
	return res
}

// sampleHeap samples HeapInuse (heap spans holding objects, live or not yet
// collected) every 2 ms until stop is called. runtime/metrics is read without
// stopping the world, unlike runtime.ReadMemStats, so sampling does not
// disturb the latencies.
func sampleHeap() (peak *uint64, stop func()) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	peak = new(uint64)
	read := func() {
		metrics.Read(s)
		*peak = max(*peak, s[0].Value.Uint64()+s[1].Value.Uint64())
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return peak, func() { close(done); <-stopped; read() }
}

// Stored is what the records of the recording proxy cost in Parquet.
type Stored struct {
	PerEpisodeFile float64 // bytes per call when each episode is its own file (as spooled)
	CompactedFile  float64 // bytes per call when all are one file (after round-end compaction)
}

// StoredBytesPerCall runs episodes sequential episodes of EpisodeLen calls
// through the recording proxy and Parquet-encodes (store.EncodeParquet) the
// records End returns.
func (e *Env) StoredBytesPerCall(episodes int) (Stored, error) {
	if e.rec == nil {
		return Stored{}, errors.New("only the recording path stores records")
	}
	var all []schemas.Call
	perEpisode := 0
	for range episodes {
		c := e.newClient(len(all))
		for range EpisodeLen {
			if err := c.call(); err != nil {
				return Stored{}, err
			}
		}
		recs := e.rec.End(c.ep)
		b, err := store.EncodeParquet(recs)
		if err != nil {
			return Stored{}, err
		}
		perEpisode += len(b)
		all = append(all, recs...)
	}
	b, err := store.EncodeParquet(all)
	if err != nil {
		return Stored{}, err
	}
	n := float64(len(all))
	return Stored{PerEpisodeFile: float64(perEpisode) / n, CompactedFile: float64(len(b)) / n}, nil
}

// RetainedPerCall is the live heap an un-ended episode holds per recorded
// call: how memory grows with episode length, since records stay in the
// proxy until End.
func (e *Env) RetainedPerCall(calls int) (float64, error) {
	if e.rec == nil {
		return 0, errors.New("only the recording path retains records")
	}
	c := e.newClient(0)
	c.epLen = 0
	if err := c.call(); err != nil { // connections and buffers, before the baseline
		return 0, err
	}
	before := liveHeap()
	for range calls {
		if err := c.call(); err != nil {
			return 0, err
		}
	}
	after := liveHeap()
	c.end()
	return (float64(after) - float64(before)) / float64(calls), nil
}

// InFlight holds n calls at the stub at once, each carrying an image of
// imageBytes random bytes (0: none), and returns the live heap of the
// process per call while they wait (connections were opened before) and
// the bytes allocated per call from send to answer.
func (e *Env) InFlight(n, imageBytes int) (live, allocated float64, err error) {
	body := e.bodies[0]
	if imageBytes > 0 {
		img := make([]byte, imageBytes)
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range img {
			img[i] = byte(rng.Uint32())
		}
		body = requestBody(0, e.Mode == Streamed, img)
	}
	c := e.newClient(0)
	c.epLen = 0
	call := func() error {
		req, err := http.NewRequest(http.MethodPost, c.base+"/chat/completions", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.client.Do(req)
		if err != nil {
			return err
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			return err
		case !bytes.Equal(got, e.answer(0)):
			return fmt.Errorf("HTTP %d, answer differs from the stub's: %.200s", resp.StatusCode, got)
		}
		return nil
	}
	all := func() error { // n at once
		errs := make(chan error, n)
		for range n {
			go func() { errs <- call() }()
		}
		var first error
		for range n {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	defer func() {
		c.calls = 2 * n
		c.end()
	}()
	if err := all(); err != nil { // n connections each way, buffers
		return 0, 0, err
	}
	hold := make(chan struct{})
	e.stub.arrived.Store(0)
	e.stub.hold.Store(&hold)
	defer e.stub.hold.Store(nil)
	before := liveHeap()
	allocBefore := allocatedBytes()
	done := make(chan error, 1)
	go func() { done <- all() }()
	for i := 0; e.stub.arrived.Load() < int64(n); i++ {
		if i == 30_000 { // 30 s
			close(hold)
			<-done
			return 0, 0, fmt.Errorf("%d of %d calls reached the stub in 30 s", e.stub.arrived.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	during := liveHeap()
	close(hold)
	if err := <-done; err != nil {
		return 0, 0, err
	}
	allocAfter := allocatedBytes()
	return (float64(during) - float64(before)) / float64(n), float64(allocAfter-allocBefore) / float64(n), nil
}

func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// liveHeap is the heap marked live by a full collection. Two collections:
// sync.Pool contents (HTTP and Parquet buffers) survive the first one.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
