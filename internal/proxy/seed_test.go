package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The seed depends on the harness seed, task, init id, attempt and call
// index, and on nothing else; it stays in 0…2^31−1. The pinned value
// keeps the derivation from changing unnoticed: that would change every
// stored evaluation's sampling.
func TestCallSeed(t *testing.T) {
	base := CallSeed(1, 3, 45, 0, 2)
	if base != CallSeed(1, 3, 45, 0, 2) {
		t.Fatal("CallSeed is not a function of its inputs")
	}
	if base != 809757429 {
		t.Errorf("CallSeed(1, 3, 45, 0, 2) = %d; the derivation changed, and with it every evaluation's seeds", base)
	}
	for name, other := range map[string]int64{
		"harness seed": CallSeed(2, 3, 45, 0, 2), "task": CallSeed(1, 4, 45, 0, 2), "init id": CallSeed(1, 3, 46, 0, 2),
		"attempt": CallSeed(1, 3, 45, 1, 2), "call index": CallSeed(1, 3, 45, 0, 3),
		// Swapped inputs are other calls too.
		"task and init swapped": CallSeed(1, 45, 3, 0, 2),
	} {
		if other == base {
			t.Errorf("changing the %s kept the seed %d", name, base)
		}
	}
	seen := map[int64]bool{}
	for attempt := range int32(6) {
		for call := range int32(50) {
			s := CallSeed(-7, 6, 49, attempt, call)
			if s < 0 || s > math.MaxInt32 {
				t.Fatalf("seed %d outside 0…2^31−1", s)
			}
			seen[s] = true
		}
	}
	if len(seen) != 300 {
		t.Errorf("300 calls of a group got %d distinct seeds", len(seen))
	}
}

// Validation and evaluation seeds ignore the round; a training round's
// collection gets its own draws, each round others, in range.
func TestSeedsOfTrainingRounds(t *testing.T) {
	eval := Seeds{Harness: 1, Task: 3, InitID: 45}
	if eval.of(0, 2) != CallSeed(1, 3, 45, 0, 2) {
		t.Errorf("an evaluation's seed is not CallSeed's")
	}
	seen := map[int64]int32{}
	for round := int32(1); round <= 6; round++ {
		tr := eval
		tr.Round = round
		s := tr.of(0, 2)
		if s < 0 || s > math.MaxInt32 {
			t.Fatalf("round %d seed %d outside 0…2^31−1", round, s)
		}
		if s != tr.of(0, 2) {
			t.Fatalf("round %d: the same call got two seeds", round)
		}
		if other, dup := seen[s]; dup || s == eval.of(0, 2) {
			t.Errorf("round %d repeats the seed of round %d (or of evaluation): %d", round, other, s)
		}
		seen[s] = round
	}
}

// The seed goes in only where the request has none; every other byte of
// the body is the harness's, as without seeds.
func TestSeedInjectedOnlyWhenAbsent(t *testing.T) {
	seed := int64(12345)
	for _, c := range []struct {
		name, in, want string
		injected       bool
		got            string // the seed recorded, "" for none
	}{
		{"absent", `{"model": "toy", "temperature": 0.7}`,
			`{"model": "toy", "temperature": 0.7,"logprobs":true,"return_token_ids":true,"seed":12345}`, true, "12345"},
		{"absent, the rest already asked for", `{"logprobs": true, "return_token_ids": true}`,
			`{"logprobs": true, "return_token_ids": true,"seed":12345}`, true, "12345"},
		{"empty object", `{}`, `{"logprobs":true,"return_token_ids":true,"seed":12345}`, true, "12345"},
		{"the harness's own", `{"seed": 7, "logprobs": true, "return_token_ids": true}`,
			`{"seed": 7, "logprobs": true, "return_token_ids": true}`, false, "7"},
		{"the harness's own zero", `{"seed":0}`, `{"seed":0,"logprobs":true,"return_token_ids":true}`, false, "0"},
		{"null is none", `{"seed": null, "logprobs": false}`, `{"seed": 12345, "logprobs": true,"return_token_ids":true}`, true, "12345"},
		{"not an integer: the server's to refuse", `{"seed": "x"}`, `{"seed": "x","logprobs":true,"return_token_ids":true}`, false, ""},
	} {
		req, err := parseChatRequestSeeded([]byte(c.in), &seed)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := ""
		if req.seed != nil {
			got = fmt.Sprint(*req.seed)
		}
		if string(req.upstreamBody()) != c.want || req.seedInjected != c.injected || got != c.got {
			t.Errorf("%s: %s\n  sent %s, injected %v, seed %q\n  want %s, %v, %q", c.name, c.in, req.upstreamBody(), req.seedInjected, got, c.want, c.injected, c.got)
		}
	}
	// Without call seeds nothing is added.
	req, _ := parseChatRequest([]byte(`{"logprobs": true, "return_token_ids": true}`))
	if string(req.upstreamBody()) != `{"logprobs": true, "return_token_ids": true}` || req.seed != nil || req.seedInjected {
		t.Errorf("no seeds asked for: sent %s, seed %v", req.upstreamBody(), req.seed)
	}
}

// Through the proxy: the same cell, attempt and call get the same seed in
// another run, phase and round (an evaluation under another tag); another
// attempt gets another; the record says what was sent.
func TestCallSeedsRecorded(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	seeds := &Seeds{Harness: 1, Task: 3, InitID: 45}
	eps := []Episode{
		{Key: schemas.EpisodeKey{Run: "a", Round: 0, Phase: "eval-t1", Group: 4}, Seeds: seeds},
		{Key: schemas.EpisodeKey{Run: "b", Round: 2, Phase: "val", Group: 9, Retry: 1}, Seeds: seeds},
		{Key: schemas.EpisodeKey{Run: "a", Round: 0, Phase: "eval-t1", Group: 4, Attempt: 1}, Seeds: seeds},
	}
	var recs [][]schemas.Call
	for _, ep := range eps {
		base := srv.URL + p.Begin(ep)
		for range 2 {
			if st, _, body := post(t, base+"/chat/completions", chatBody("go", reqOpts{})); st != 200 {
				t.Fatalf("status %d: %s", st, body)
			}
		}
		calls, err := p.EndEpisode(ep.Key.ID())
		if err != nil {
			t.Fatalf("a server that honours seeds (the stub is deterministic): %v", err)
		}
		recs = append(recs, calls)
	}
	for i, r := range recs {
		for k, c := range r {
			want := CallSeed(1, 3, 45, eps[i].Key.Attempt, int32(k))
			if c.Seed == nil || *c.Seed != want || !c.SeedInjected {
				t.Errorf("episode %d call %d: seed %v injected %v, want %d injected", i, k, c.Seed, c.SeedInjected, want)
			}
		}
	}
	if *recs[0][0].Seed != *recs[1][0].Seed || *recs[0][0].Seed == *recs[2][0].Seed || *recs[0][0].Seed == *recs[0][1].Seed {
		t.Errorf("seeds: %d %d (same cell elsewhere), %d (next attempt), %d (next call)",
			*recs[0][0].Seed, *recs[1][0].Seed, *recs[2][0].Seed, *recs[0][1].Seed)
	}
	// The upstream got the harness's bytes, the proxy's two fields and
	// the seed; the first call of a new address is sent twice (the check).
	bodies := up.chatBodies()
	want := strings.TrimSuffix(string(chatBody("go", reqOpts{})), "}") +
		fmt.Sprintf(`,"logprobs":true,"return_token_ids":true,"seed":%d}`, *recs[0][0].Seed)
	if len(bodies) < 2 || string(bodies[0]) != want || string(bodies[1]) != want {
		t.Errorf("upstream got %q…, want the first call twice as %s", bodies[0], want)
	}
	// Without Seeds no seed is sent or recorded.
	base := srv.URL + p.Begin(named("plain"))
	post(t, base+"/chat/completions", chatBody("go", reqOpts{}))
	if c := endOne(t, p, idOf("plain")); c.Seed != nil || c.SeedInjected {
		t.Errorf("no call seeds: recorded seed %v injected %v", c.Seed, c.SeedInjected)
	}
}

// seedServer answers every chat completion with tokens drawn from the
// request's seed, or, ignoring it, from a counter.
func seedServer(t *testing.T, ignore bool) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Seed *int64 `json:"seed"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		k := int64(n.Add(1))
		if !ignore && req.Seed != nil {
			k = *req.Seed
		}
		tok := k % 1000
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"model":"toy","choices":[{"index":0,"message":{"role":"assistant","content":"t%d"},"finish_reason":"stop","token_ids":[%d],"logprobs":{"content":[{"token":"t","logprob":-0.7}]}}],"prompt_token_ids":[1,2],"usage":{"prompt_tokens":2,"completion_tokens":1}}`, tok, tok)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// A server that honours seeds passes the check and is then no longer
// asked twice; one that ignores them fails the episode with an error that
// names the setting and the fix, and so does every later episode there.
func TestSeedCheck(t *testing.T) {
	good, n := seedServer(t, false)
	p, front := newProxy(t, nil, Options{})
	p.SetUpstream(good.URL)
	seeds := &Seeds{Harness: 1, Task: 0, InitID: 45}
	// -0.7 a token: 20 pairs make e^-14 < 1e-6.
	for i := range 25 {
		ep := Episode{Key: schemas.EpisodeKey{Run: "r", Phase: "val", Group: int32(i)}, Seeds: seeds}
		base := front.URL + p.Begin(ep)
		post(t, base+"/chat/completions", chatBody("go", reqOpts{}))
		if _, err := p.EndEpisode(ep.Key.ID()); err != nil {
			t.Fatalf("episode %d on a server that honours seeds: %v", i, err)
		}
	}
	if got := n.Load(); got != 25+20 {
		t.Errorf("server got %d calls, want 25 and 20 repeats (the check passes at odds below 1e-6)", got)
	}

	bad, _ := seedServer(t, true)
	p.SetUpstream(bad.URL)
	for i := range 2 {
		ep := Episode{Key: schemas.EpisodeKey{Run: "r", Phase: "val", Group: int32(i)}, Seeds: seeds}
		base := front.URL + p.Begin(ep)
		post(t, base+"/chat/completions", chatBody("go", reqOpts{}))
		calls, err := p.EndEpisode(ep.Key.ID())
		var si *SeedsIgnoredError
		if !errors.As(err, &si) || len(calls) != 1 {
			t.Fatalf("episode %d on a server that ignores seeds: %d calls, error %v; want a SeedsIgnoredError", i, len(calls), err)
		}
		for _, want := range []string{bad.URL, "ignores the per-request seed", "collect.call_seeds off", "honours seeds"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	}
	// Episodes without call seeds do not care.
	ep := named("plain")
	base := front.URL + p.Begin(ep)
	post(t, base+"/chat/completions", chatBody("go", reqOpts{}))
	if _, err := p.EndEpisode(ep.Key.ID()); err != nil {
		t.Errorf("an episode without call seeds: %v", err)
	}
}
