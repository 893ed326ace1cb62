// Package policy is the minimal harness's toy language model: a word-level
// tokenizer with a fixed vocabulary, a chat template, and a linear softmax
// policy over a few action tokens (the tool names).
//
// The model, exactly (trainer.py computes the same from token ids alone):
//
//   - Features of a decision: the sorted unique token ids of the prompt after
//     its second-to-last <|im_start|> token (from the start when there are
//     fewer than two). Because every prompt ends with the generation prompt
//     "<|im_start|> assistant", these are the tokens of the last message
//     plus the generation prompt.
//   - logits[a] = b[a] + Σ_{f ∈ features} W[f][a] over the K action tokens,
//     plus, for weights with a vision section and a prompt with images,
//     Σ_k img_k·V[k][a] over the features of the prompt's last image
//     (image.go: pixels in, band redness out, V trainable).
//   - Completion token ids = [action, <|im_end|>]. The action is drawn as
//     vLLM's sampler draws a token (SampleWith, Sampling): repetition
//     penalty on the logits, then (unless greedy) temperature, min_p,
//     top_k and top_p, renormalised over what is left. Its raw logprob is
//     log softmax of the untouched logits (vLLM's default raw_logprobs),
//     its processed one the log probability under the distribution it was
//     drawn from (vLLM's processed_logprobs). <|im_end|> is forced: its
//     logprob is 0.0. The trainer treats the first completion token as the
//     decision and every later one as forced (logprob 0).
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
)

// Format identifies the weights file layout.
const Format = "roundhouse-toy-policy/v1"

// File is the JSON weights file, policy.json.
type File struct {
	Format string `json:"format"`
	// Vocab maps token id (index) to token string.
	Vocab []string `json:"vocab"`
	// Actions are the token ids the model chooses among, in logit order.
	Actions []int `json:"actions"`
	// B is the bias per action, W the weight per (token id, action).
	B []float64   `json:"b"`
	W [][]float64 `json:"W"`
	// Vision, when set, lets the model read images (image.go).
	Vision *Vision `json:"vision,omitempty"`
}

// Policy is a loaded, validated model.
type Policy struct {
	File
	index   map[string]int
	action  map[int]int // token id → action index
	unk     int
	imStart int
	imEnd   int
}

// roles must be in the vocabulary: the template spells them.
var roles = []string{"system", "user", "assistant", "tool"}

// New validates f and indexes it.
func New(f File) (*Policy, error) {
	if f.Format != Format {
		return nil, fmt.Errorf("policy: format %q, want %q", f.Format, Format)
	}
	p := &Policy{File: f, index: make(map[string]int, len(f.Vocab)), action: map[int]int{}}
	for i, w := range f.Vocab {
		if _, dup := p.index[w]; dup {
			return nil, fmt.Errorf("policy: duplicate vocabulary entry %q", w)
		}
		p.index[w] = i
	}
	for _, w := range append(slices.Clone(Specials), roles...) {
		if _, ok := p.index[w]; !ok {
			return nil, fmt.Errorf("policy: vocabulary lacks %q", w)
		}
	}
	p.unk, p.imStart, p.imEnd = p.index[Unk], p.index[ImStart], p.index[ImEnd]
	if len(f.Actions) == 0 {
		return nil, errors.New("policy: no action tokens")
	}
	for k, id := range f.Actions {
		if id < 0 || id >= len(f.Vocab) {
			return nil, fmt.Errorf("policy: action %d: token id %d outside the vocabulary", k, id)
		}
		if slices.Contains(Specials, f.Vocab[id]) {
			return nil, fmt.Errorf("policy: action %d is the special token %q", k, f.Vocab[id])
		}
		if _, dup := p.action[id]; dup {
			return nil, fmt.Errorf("policy: action token %q listed twice", f.Vocab[id])
		}
		p.action[id] = k
	}
	if len(f.B) != len(f.Actions) {
		return nil, fmt.Errorf("policy: b has %d entries, want %d", len(f.B), len(f.Actions))
	}
	if len(f.W) != len(f.Vocab) {
		return nil, fmt.Errorf("policy: W has %d rows, want one per token (%d)", len(f.W), len(f.Vocab))
	}
	for i, row := range f.W {
		if len(row) != len(f.Actions) {
			return nil, fmt.Errorf("policy: W row %d has %d entries, want %d", i, len(row), len(f.Actions))
		}
		for _, x := range row {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("policy: W row %d is not finite", i)
			}
		}
	}
	for _, x := range f.B {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, errors.New("policy: b is not finite")
		}
	}
	if f.Vision != nil {
		if err := f.Vision.check(len(f.Actions)); err != nil {
			return nil, err
		}
		for _, w := range VisionSpecials {
			if _, ok := p.index[w]; !ok {
				return nil, fmt.Errorf("policy: a vision model's vocabulary lacks %q", w)
			}
		}
	}
	return p, nil
}

// Load reads and validates a weights file.
func Load(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("policy: parse %s: %w", path, err)
	}
	p, err := New(f)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return p, nil
}

// Save writes the weights file, one W row per line so diffs stay readable.
func (p *Policy) Save(path string) error {
	var buf bytes.Buffer
	field := func(name string, v any, last bool) error {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // keep "<|im_end|>" legible
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("policy: encode %s: %w", name, err)
		}
		fmt.Fprintf(&buf, "  %q: %s", name, bytes.TrimSpace(b.Bytes()))
		if !last {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
		return nil
	}
	buf.WriteString("{\n")
	for _, f := range []struct {
		name string
		v    any
	}{{"format", p.Format}, {"vocab", p.Vocab}, {"actions", p.Actions}, {"b", p.B}} {
		if err := field(f.name, f.v, false); err != nil {
			return err
		}
	}
	if p.Vision != nil {
		if err := field("vision", p.Vision, false); err != nil {
			return err
		}
	}
	buf.WriteString("  \"W\": [\n")
	for i, row := range p.W {
		b, err := json.Marshal(row)
		if err != nil {
			return fmt.Errorf("policy: encode W row %d: %w", i, err)
		}
		buf.WriteString("    ")
		buf.Write(b)
		if i < len(p.W)-1 {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
	}
	buf.WriteString("  ]\n}\n")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	return nil
}

// ID returns the token id of a vocabulary entry.
func (p *Policy) ID(token string) (int, bool) {
	id, ok := p.index[token]
	return id, ok
}

// Token returns the string of a token id ("<unk>" when out of range).
func (p *Policy) Token(id int) string {
	if id < 0 || id >= len(p.Vocab) {
		return Unk
	}
	return p.Vocab[id]
}

// ImEndID is the token id that ends every completion.
func (p *Policy) ImEndID() int { return p.imEnd }

// ActionIndex returns the logit index of an action name.
func (p *Policy) ActionIndex(name string) (int, bool) {
	id, ok := p.index[name]
	if !ok {
		return 0, false
	}
	k, ok := p.action[id]
	return k, ok
}

// ActionName returns the tool name of logit index k.
func (p *Policy) ActionName(k int) string { return p.Vocab[p.Actions[k]] }

// Features returns the sorted unique token ids after the second-to-last
// <|im_start|> of prompt (the whole prompt when it has fewer than two).
func (p *Policy) Features(prompt []int) []int {
	start, seen := 0, 0
	for i := len(prompt) - 1; i >= 0; i-- {
		if prompt[i] == p.imStart {
			seen++
			if seen == 2 {
				start = i + 1
				break
			}
		}
	}
	f := slices.Clone(prompt[start:])
	slices.Sort(f)
	return slices.Compact(f)
}

// Logits returns the action logits for prompt, whose images have the
// features images (Render's second result).
func (p *Policy) Logits(prompt []int, images ...[]float64) []float64 {
	z := slices.Clone(p.B)
	for _, f := range p.Features(prompt) {
		if f < 0 || f >= len(p.W) {
			continue // ids outside the vocabulary carry no weight
		}
		for a, w := range p.W[f] {
			z[a] += w
		}
	}
	if p.Vision != nil && len(images) > 0 {
		for k, x := range images[len(images)-1] {
			for a, v := range p.Vision.V[k] {
				z[a] += x * v
			}
		}
	}
	return z
}

// LogProbs returns log softmax of the logits over the actions for prompt,
// whose images have the features images (Render's second result).
func (p *Policy) LogProbs(prompt []int, images ...[]float64) []float64 {
	return logSoftmax(p.Logits(prompt, images...), 1)
}

// logSoftmax is log softmax(z / temperature); entries of -Inf (truncated
// away) stay -Inf and the rest renormalise over themselves.
func logSoftmax(z []float64, temperature float64) []float64 {
	m := math.Inf(-1)
	for _, x := range z {
		m = max(m, x/temperature)
	}
	var s float64
	for _, x := range z {
		s += math.Exp(x/temperature - m)
	}
	lse := m + math.Log(s)
	out := make([]float64, len(z))
	for i, x := range z {
		out[i] = x/temperature - lse
	}
	return out
}

// Sampling is how a request asks for its token to be drawn, in vLLM's
// terms. The zero value of each truncation or penalty field means off, so
// Sampling{Temperature: 1} is plain sampling from the model.
type Sampling struct {
	// Temperature divides the logits; ≤ 0 is greedy (argmax), and then
	// vLLM ignores top_k, top_p and min_p too.
	Temperature float64
	// TopK keeps the k most likely actions; ≤ 0 keeps all (vLLM: 0 or -1).
	TopK int
	// TopP keeps the most likely actions whose mass reaches p, at least
	// one; 0 or ≥ 1 keeps all.
	TopP float64
	// MinP drops actions less likely than MinP times the most likely one;
	// 0 keeps all.
	MinP float64
	// RepetitionPenalty, when not 0 or 1, scales the logit of every action
	// whose token occurs in the prompt (or the output, which is empty at
	// the decision): divided when positive, multiplied when negative, as
	// vLLM (after Hugging Face) does. Presence and frequency penalties
	// count output tokens only, so at the toy's single decision they have
	// nothing to act on.
	RepetitionPenalty float64
}

// Completion is one generated reply.
type Completion struct {
	Action   int       // logit index of the chosen action
	IDs      []int     // [action token, <|im_end|>]
	Logprobs []float64 // per completion token: [raw log π(action), 0]
	// Dist is the raw log π over all actions at the decision: log softmax
	// of the logits before any penalty, temperature or truncation (vLLM's
	// raw_logprobs).
	Dist []float64
	// Processed is log π over all actions under the distribution the
	// action was drawn from (vLLM's processed_logprobs): penalised,
	// tempered, truncated (-Inf) and renormalised. Greedy: the penalised
	// logits' log softmax at temperature 1, as vLLM returns for a batch
	// of greedy requests, which skips temperature and truncation.
	Processed []float64
}

// Sample draws an action for prompt (with its images' features) at
// temperature, without truncation or penalty; see SampleWith.
func (p *Policy) Sample(prompt []int, temperature float64, force int, rng *rand.Rand, images ...[]float64) Completion {
	return p.SampleWith(prompt, Sampling{Temperature: temperature}, force, rng, images...)
}

// SampleWith draws an action for prompt (with its images' features) the
// way vLLM's sampler draws a token, in its order: repetition penalty, then
// for a non-greedy draw temperature, min_p, top_k, top_p, and one draw
// from what is left, renormalised. force ≥ 0 pins the action (a named
// tool_choice); its logprobs are still the model's (-Inf in Processed
// when truncation removed it). rng may be nil for a greedy or forced draw.
func (p *Policy) SampleWith(prompt []int, s Sampling, force int, rng *rand.Rand, images ...[]float64) Completion {
	z := p.Logits(prompt, images...)
	raw := logSoftmax(z, 1)
	z = p.penalise(z, prompt, s.RepetitionPenalty)
	var q []float64
	if s.Temperature <= 0 {
		q = logSoftmax(z, 1)
	} else {
		q = truncate(logSoftmax(z, s.Temperature), s)
	}
	a := force
	switch {
	case force >= 0:
	case s.Temperature <= 0:
		a = 0
		for k := range q {
			if q[k] > q[a] {
				a = k
			}
		}
	default:
		// Inverse CDF in action order, one uniform per draw: the same
		// draws a seed gave before truncation existed.
		u, acc := rng.Float64(), 0.0
		a = -1
		for k, x := range q {
			acc += math.Exp(x)
			if u < acc {
				a = k
				break
			}
		}
		if a < 0 { // u beyond the rounded total: the last action left
			for k := len(q) - 1; k >= 0; k-- {
				if !math.IsInf(q[k], -1) {
					a = k
					break
				}
			}
		}
	}
	return Completion{
		Action:    a,
		IDs:       []int{p.Actions[a], p.imEnd},
		Logprobs:  []float64{raw[a], 0},
		Dist:      raw,
		Processed: q,
	}
}

// penalise applies a repetition penalty to the logits z of actions whose
// token occurs in prompt.
func (p *Policy) penalise(z []float64, prompt []int, penalty float64) []float64 {
	if penalty == 0 || penalty == 1 {
		return z
	}
	seen := map[int]bool{}
	for _, id := range prompt {
		seen[id] = true
	}
	out := slices.Clone(z)
	for a, id := range p.Actions {
		if !seen[id] {
			continue
		}
		if out[a] > 0 {
			out[a] /= penalty
		} else {
			out[a] *= penalty
		}
	}
	return out
}

// truncate applies min_p, top_k and top_p, in vLLM's order, to the tempered
// log-probabilities lp: dropped actions become -Inf and the rest are
// renormalised. top_p follows vLLM's apply_top_k_top_p: ascending by
// probability, an action goes while the mass up to and including it is
// at most 1 - p, and the most likely action always stays. top_k keeps
// ties with its k-th action, as vLLM's threshold does.
func truncate(lp []float64, s Sampling) []float64 {
	out := slices.Clone(lp)
	drop := func(k int) { out[k] = math.Inf(-1) }
	if s.MinP > 0 {
		top := slices.Max(out)
		for k, x := range out {
			if math.Exp(x) < s.MinP*math.Exp(top) {
				drop(k)
			}
		}
	}
	order := make([]int, len(out)) // ascending by probability
	for k := range order {
		order[k] = k
	}
	sort.SliceStable(order, func(i, j int) bool { return out[order[i]] < out[order[j]] })
	if s.TopK > 0 && s.TopK < len(out) {
		// vLLM keeps every action tied with the k-th most likely.
		kth := out[order[len(out)-s.TopK]]
		for k, x := range out {
			if x < kth {
				drop(k)
			}
		}
	}
	if s.TopP > 0 && s.TopP < 1 {
		q := logSoftmax(out, 1) // after top_k, as vLLM's softmax sees it
		acc := 0.0
		for _, k := range order[:len(order)-1] {
			acc += math.Exp(q[k])
			if acc <= 1-s.TopP {
				drop(k)
			}
		}
	}
	return logSoftmax(out, 1)
}
