package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Call seeds (collect.call_seeds, docs/design.md §3). A model server samples
// without a seed unless the request carries one, so two evaluations of the
// same weights on the same cells scored 15/35 and 9/35. With Episode.Seeds
// set, each chat completion without a seed of its own is sent with one
// derived from the harness's seed, the cell (task, init id), the attempt
// and the call index: the same call of the same cell gets the same seed in
// every run and under every tag, while the attempts of a training group
// differ. Run ids, tags and retries are left out on purpose; the round
// only in training collection (Seeds.Round).

// Seeds is what the proxy derives an episode's call seeds from.
type Seeds struct {
	Harness int64 // collect.seed
	Task    int32
	InitID  int32
	// The attempt is the episode key's.
	// Round is 0 for validation and evaluation, so a cell draws the same
	// noise under every weights and two scores differ by the weights
	// alone; a training round's number in collection, so round k+1's
	// groups do not replay round k's draws on the same cells.
	Round int32
}

// of is the seed of call index call of an episode of the given attempt.
func (s Seeds) of(attempt, call int32) int64 {
	seed := CallSeed(s.Harness, s.Task, s.InitID, attempt, call)
	if s.Round != 0 {
		seed = int64(splitmix(uint64(seed)^uint64(uint32(s.Round))) & math.MaxInt32)
	}
	return seed
}

// CallSeed is the seed of call index call of the episode (task, initID,
// attempt) under the harness seed: a SplitMix64 mix of the five, in
// 0…2^31−1, a range every server's seed parameter takes.
func CallSeed(harness int64, task, initID, attempt, call int32) int64 {
	h := splitmix(uint64(harness))
	for _, v := range []int32{task, initID, attempt, call} {
		h = splitmix(h ^ uint64(uint32(v)))
	}
	return int64(h & math.MaxInt32)
}

// splitmix is SplitMix64's output function over x plus its increment.
func splitmix(x uint64) uint64 {
	z := x + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// The repeatability check: a server that ignores the seed parameter would
// make call seeds a silent lie, so the proxy sends seeded calls to each
// model server address a second time, one at a time, until enough pairs
// have matched, and compares the two answers. Pairs count until the odds
// that an unseeded server matched them all by chance (the product of each
// first answer's probability, exp of its summed logprobs) fall below
// seedCheckOdds, or seedCheckPairs have matched: a server whose answers are
// that predictable samples nearly alike with or without seeds.
const (
	seedCheckOdds  = 1e-6
	seedCheckPairs = 32
)

// SeedsIgnoredError says that a model server answered the same seeded call
// differently: it does not honour per-request seeds.
type SeedsIgnoredError struct {
	Server  string // the model server's root URL
	Episode string // the episode whose call was repeated
	Call    int32
	First   string // the two answers, shortened
	Second  string
}

func (e *SeedsIgnoredError) Error() string {
	return fmt.Sprintf("model server %s ignores the per-request seed: call %d of episode %s, sent twice with seed, "+
		"answered %s and then %s; collect.call_seeds needs a server that samples from the request's seed (vLLM does): "+
		"turn collect.call_seeds off in the harness file, or serve the model with a server that honours seeds",
		e.Server, e.Call, e.Episode, e.First, e.Second)
}

// seedCheck is the repeatability check of one model server address.
type seedCheck struct {
	mu      sync.Mutex
	busy    bool    // a repeat is in flight
	passed  bool    // enough pairs matched
	pairs   int     // matching pairs so far
	logOdds float64 // log of the chance that they all matched by luck
	err     *SeedsIgnoredError
}

// seedCheckOf returns the check of a model server address.
func (p *Proxy) seedCheckOf(server string) *seedCheck {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seedChecks == nil {
		p.seedChecks = map[string]*seedCheck{}
	}
	c := p.seedChecks[server]
	if c == nil {
		c = &seedCheck{}
		p.seedChecks[server] = c
	}
	return c
}

// claim reports whether the caller should repeat a call now: the check is
// neither decided nor already repeating one.
func (c *seedCheck) claim() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.passed || c.err != nil || c.busy {
		return false
	}
	c.busy = true
	return true
}

func (c *seedCheck) failure() *SeedsIgnoredError {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// add counts one pair (first, second) and reports the check's state.
func (c *seedCheck) add(server string, first, second *schemas.Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy = false
	if c.passed || c.err != nil {
		return
	}
	if !sameAnswer(first, second) {
		c.err = &SeedsIgnoredError{Server: server, Episode: first.EpisodeID, Call: first.CallIndex,
			First: answerText(first), Second: answerText(second)}
		return
	}
	c.pairs++
	if len(first.CompletionLogprobs) > 0 && len(first.CompletionLogprobs) == len(first.CompletionTokenIDs) {
		for _, lp := range first.CompletionLogprobs {
			c.logOdds += float64(lp)
		}
	}
	c.passed = c.logOdds < math.Log(seedCheckOdds) || c.pairs >= seedCheckPairs
}

func (c *seedCheck) release() {
	c.mu.Lock()
	c.busy = false
	c.mu.Unlock()
}

// sameAnswer compares two answers to one seeded request: the completion's
// token ids, text and tool calls (their ids left out: servers draw them at
// random, seed or not).
func sameAnswer(a, b *schemas.Call) bool {
	return slices.Equal(a.CompletionTokenIDs, b.CompletionTokenIDs) && a.Content == b.Content &&
		a.FinishReason == b.FinishReason && toolCallsSansIDs(a.ToolCalls) == toolCallsSansIDs(b.ToolCalls)
}

func toolCallsSansIDs(s string) string {
	var calls []toolCall
	if s == "" || json.Unmarshal([]byte(s), &calls) != nil {
		return s
	}
	for i := range calls {
		calls[i].ID = ""
	}
	b, _ := json.Marshal(calls)
	return string(b)
}

// answerText is an answer in a few words, for the error.
func answerText(c *schemas.Call) string {
	s := fmt.Sprintf("tokens %v", c.CompletionTokenIDs)
	if c.ToolCalls != "" {
		s += " tool calls " + toolCallsSansIDs(c.ToolCalls)
	} else if c.Content != "" {
		s += fmt.Sprintf(" %q", c.Content)
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// checkSeed repeats a seeded call that the model server answered, when its
// address's check needs another pair, and records the outcome there. A
// repeat that fails on the way (the server busy, the harness gone) counts
// for nothing either way.
func (p *Proxy) checkSeed(ctx context.Context, server, target string, body func() []byte, first *schemas.Call) {
	c := p.seedCheckOf(server)
	if !c.claim() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.UpstreamTimeout)
	defer cancel()
	second, err := p.repeat(ctx, target, body(), first)
	if err != nil {
		c.release()
		p.log.Warn("proxy: seed check: repeating a call failed; the next seeded call tries again",
			"server", server, "episode", first.EpisodeID, "call", first.CallIndex, "err", err)
		return
	}
	c.add(server, first, &second)
	if e := c.failure(); e != nil {
		p.log.Error("proxy: seed check failed", "server", server, "err", e)
	}
}

// repeat sends body to target again and records the answer the way the
// harness's was recorded, writing nothing back.
func (p *Proxy) repeat(ctx context.Context, target string, body []byte, first *schemas.Call) (schemas.Call, error) {
	var rec schemas.Call
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return rec, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return rec, fmt.Errorf("send: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return rec, fmt.Errorf("model server answered %d: %s", resp.StatusCode, b)
	}
	w := &discard{h: http.Header{}}
	if mediaType(resp.Header.Get("Content-Type")) == "text/event-stream" {
		p.relayStream(w, req, ctx, http.NewResponseController(w), resp, &rec, strip{})
	} else {
		p.relayJSON(w, req, ctx, http.NewResponseController(w), resp, &rec, strip{})
	}
	if rec.Error != "" {
		return rec, fmt.Errorf("%s", rec.Error)
	}
	return rec, nil
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}
