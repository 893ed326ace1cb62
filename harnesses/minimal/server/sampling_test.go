package server

import (
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/episode"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
)

// serve starts a server for w0 in logprobs mode m with defaults d.
func serve(t *testing.T, m LogprobsMode, d Defaults) (*policy.Policy, *httptest.Server) {
	t.Helper()
	p, err := policy.Load("../weights/w0/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	s := New(p, "toy", "w0")
	s.LogprobsMode, s.Defaults = m, d
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return p, ts
}

// handLogits are w0's action logits for the test chat's prompt, summed
// here from b and W rather than taken from the policy.
func handLogits(t *testing.T, p *policy.Policy) []float64 {
	t.Helper()
	_, msgs := chat(t, nil)
	prompt, _, err := p.Render(msgs, episode.Tools())
	if err != nil {
		t.Fatal(err)
	}
	z := slices.Clone(p.B)
	for _, f := range p.Features(prompt) {
		for a := range z {
			z[a] += p.W[f][a]
		}
	}
	return z
}

// logSoftmaxAt is log softmax(z/temp), by hand.
func logSoftmaxAt(z []float64, temp float64) []float64 {
	var s float64
	for _, x := range z {
		s += math.Exp(x / temp)
	}
	out := make([]float64, len(z))
	for i, x := range z {
		out[i] = x/temp - math.Log(s)
	}
	return out
}

// decision posts body and returns the chosen action's index, its reported
// logprob and the reported logprob of every action (top_logprobs over the
// whole action set).
func decision(t *testing.T, p *policy.Policy, ts *httptest.Server, body map[string]any) (int, float64, []float64) {
	t.Helper()
	body["logprobs"], body["top_logprobs"] = true, len(p.Actions)
	status, out := post(t, ts, body)
	if status != 200 {
		t.Fatalf("status %d: %v", status, out)
	}
	a, ok := p.ActionIndex(actionOf(t, out))
	if !ok {
		t.Fatalf("reply %v names no action", out)
	}
	first := out["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["content"].([]any)[0].(map[string]any)
	// Actions truncated away tie at -9999 with every token the model
	// cannot emit, so they may be missing from the list.
	all := make([]float64, len(p.Actions))
	for k := range all {
		all[k] = -9999
	}
	for _, e := range first["top_logprobs"].([]any) {
		e := e.(map[string]any)
		k, ok := p.ActionIndex(e["token"].(string))
		if !ok && e["logprob"].(float64) == -9999 {
			continue
		}
		if !ok {
			t.Fatalf("top_logprobs gives %v a probability, not an action", e["token"])
		}
		all[k] = e["logprob"].(float64)
	}
	return a, first["logprob"].(float64), all
}

// TestLogprobsModes: at temperature 0.7, processed logprobs are those of
// the tempered softmax and raw ones those of the model, each for the
// chosen action and all alternatives; greedy reports raw values in both
// modes, as vLLM's all-greedy batch does.
func TestLogprobsModes(t *testing.T) {
	const temp = 0.7
	for _, c := range []struct {
		mode LogprobsMode
		temp float64
	}{{RawLogprobs, 1}, {ProcessedLogprobs, temp}} {
		p, ts := serve(t, c.mode, Defaults{})
		want := logSoftmaxAt(handLogits(t, p), c.temp)
		seen := map[int]bool{}
		for seed := range 30 {
			body, _ := chat(t, map[string]any{"temperature": temp, "seed": seed})
			a, lp, all := decision(t, p, ts, body)
			seen[a] = true
			if math.Abs(lp-want[a]) > 1e-12 {
				t.Errorf("%s, seed %d: logprob of %s %v, want %v", c.mode, seed, p.ActionName(a), lp, want[a])
			}
			for k := range all {
				if math.Abs(all[k]-want[k]) > 1e-12 {
					t.Errorf("%s, seed %d: top logprob of %s %v, want %v", c.mode, seed, p.ActionName(k), all[k], want[k])
				}
			}
		}
		if len(seen) < 2 {
			t.Errorf("%s: 30 seeds all chose %v; the test needs varied actions", c.mode, seen)
		}
		body, _ := chat(t, map[string]any{"temperature": 0})
		raw := logSoftmaxAt(handLogits(t, p), 1)
		if a, lp, _ := decision(t, p, ts, body); a != slices.Index(raw, slices.Max(raw)) || math.Abs(lp-raw[a]) > 1e-12 {
			t.Errorf("%s, greedy: %s at %v, want the argmax at its raw logprob %v", c.mode, p.ActionName(a), lp, raw[a])
		}
	}
	// At temperature 1 without truncation the two modes agree.
	pr, raw := serve(t, RawLogprobs, Defaults{})
	_, proc := serve(t, ProcessedLogprobs, Defaults{})
	body1, _ := chat(t, map[string]any{"seed": 3})
	body2, _ := chat(t, map[string]any{"seed": 3})
	a1, lp1, _ := decision(t, pr, raw, body1)
	a2, lp2, _ := decision(t, pr, proc, body2)
	if a1 != a2 || math.Abs(lp1-lp2) > 1e-12 {
		t.Errorf("temperature 1: raw %s %v, processed %s %v", pr.ActionName(a1), lp1, pr.ActionName(a2), lp2)
	}
}

// TestTopP: top_p keeps the most likely actions whose mass reaches p;
// sampling never leaves them, and processed logprobs renormalise over
// them (the rest read -9999, vLLM's -inf), while raw ones stay the model's.
func TestTopP(t *testing.T) {
	p, _ := serve(t, RawLogprobs, Defaults{})
	z := handLogits(t, p)
	probs := logSoftmaxAt(z, 1)
	order := make([]int, len(probs)) // most likely first
	for k := range order {
		order[k] = k
	}
	sort.Slice(order, func(i, j int) bool { return probs[order[i]] > probs[order[j]] })
	// Halfway into the third action: the top three stay.
	top := math.Exp(probs[order[0]]) + math.Exp(probs[order[1]]) + 0.5*math.Exp(probs[order[2]])
	kept, mass := map[int]bool{}, 0.0
	for _, k := range order {
		if mass >= top {
			break
		}
		kept[k] = true
		mass += math.Exp(probs[k])
	}
	if len(kept) != 3 {
		t.Fatalf("kept %v, want the top three", kept)
	}
	for _, mode := range []LogprobsMode{RawLogprobs, ProcessedLogprobs} {
		_, ts := serve(t, mode, Defaults{})
		chosen := map[int]int{}
		for seed := range 200 {
			body, _ := chat(t, map[string]any{"top_p": top, "seed": seed})
			a, lp, all := decision(t, p, ts, body)
			chosen[a]++
			if !kept[a] {
				t.Fatalf("%s, seed %d: sampled %s, which top_p %.3f removes", mode, seed, p.ActionName(a), top)
			}
			for k := range all {
				want := probs[k]
				if mode == ProcessedLogprobs {
					want = -9999
					if kept[k] {
						want = probs[k] - math.Log(mass)
					}
				}
				if math.Abs(all[k]-want) > 1e-12 || (k == a && math.Abs(lp-want) > 1e-12) {
					t.Fatalf("%s, seed %d: logprob of %s %v, want %v", mode, seed, p.ActionName(k), all[k], want)
				}
			}
		}
		if len(chosen) != 3 {
			t.Errorf("%s: 200 draws chose %v; want all three kept actions", mode, chosen)
		}
	}
}

// TestGenerationConfig: with auto, generation_config.json's values are
// the defaults of requests that omit them, and only of those; with vllm
// they are ignored; transformers' own defaults (top_k 50) set nothing.
func TestGenerationConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, GenerationConfigFile),
		[]byte(`{"temperature": 0.5, "top_k": 50, "min_p": 0.0, "repetition_penalty": 1.0, "do_sample": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	auto, err := GenerationConfig("auto", dir)
	if err != nil {
		t.Fatal(err)
	}
	if auto.Temperature == nil || *auto.Temperature != 0.5 || auto.TopK != nil || auto.TopP != nil || auto.RepetitionPenalty != nil ||
		auto.MinP == nil || *auto.MinP != 0 {
		t.Errorf("auto: %s; want temperature 0.5 and min_p 0 only", auto)
	}
	vllm, err := GenerationConfig("vllm", dir)
	if err != nil || vllm != (Defaults{}) {
		t.Errorf("vllm: %s, %v; want no defaults", vllm, err)
	}
	if d, err := GenerationConfig("auto", t.TempDir()); err != nil || d != (Defaults{}) {
		t.Errorf("auto without the file: %s, %v; want no defaults", d, err)
	}
	bad := t.TempDir()
	for _, c := range []struct{ body, want string }{{`{"temperature": `, "unexpected end"}, {`{"top_p": 0}`, "top_p"}} {
		if err := os.WriteFile(filepath.Join(bad, GenerationConfigFile), []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := GenerationConfig("auto", bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("generation config %s: %v, want an error about %s", c.body, err, c.want)
		}
	}
	if _, err := GenerationConfig("path/to/dir", dir); err == nil {
		t.Error("generation config mode path/to/dir accepted")
	}

	// Processed logprobs show the temperature a request was sampled at.
	for _, c := range []struct {
		name string
		d    Defaults
		body map[string]any
		temp float64
	}{
		{"auto, temperature omitted", auto, nil, 0.5},
		{"auto, temperature 1 given", auto, map[string]any{"temperature": 1.0}, 1},
		{"auto, temperature 0.8 given", auto, map[string]any{"temperature": 0.8}, 0.8},
		{"vllm, temperature omitted", vllm, nil, 1},
	} {
		p, ts := serve(t, ProcessedLogprobs, c.d)
		want := logSoftmaxAt(handLogits(t, p), c.temp)
		body, _ := chat(t, c.body)
		if _, given := c.body["temperature"]; !given {
			delete(body, "temperature")
		}
		body["seed"] = 5
		if a, lp, _ := decision(t, p, ts, body); math.Abs(lp-want[a]) > 1e-12 {
			t.Errorf("%s: logprob %v, want %v (temperature %v)", c.name, lp, want[a], c.temp)
		}
	}
}

func TestSamplingErrors(t *testing.T) {
	_, ts := serve(t, RawLogprobs, Defaults{})
	for param, v := range map[string]any{"top_p": 0, "top_k": -2, "min_p": 1.5, "repetition_penalty": 0, "presence_penalty": 3, "temperature": -1} {
		body, _ := chat(t, map[string]any{param: v})
		status, out := post(t, ts, body)
		e, _ := out["error"].(map[string]any)
		if status != 400 || e == nil || e["param"] != param {
			t.Errorf("%s %v: status %d %v, want 400 naming %s", param, v, status, out, param)
		}
	}
	for _, m := range []string{"raw_logits", "processed_logits", "logprobs"} {
		if _, err := ParseLogprobsMode(m); err == nil {
			t.Errorf("logprobs mode %q accepted", m)
		}
	}
	if _, err := ParseLogprobsMode("raw_logits"); err == nil || !strings.Contains(err.Error(), "logprobs only") {
		t.Errorf("raw_logits: %v, want the toy's reason", err)
	}
}
