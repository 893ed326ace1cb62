package policy

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// tiny builds a small policy: vocabulary of the specials, roles and a few
// words; actions "go" and "stop".
func tiny(t *testing.T) *Policy {
	t.Helper()
	vocab := slices.Concat(Specials, roles, []string{"go", "stop", "red", "green", "light", "is", "."})
	f := File{Format: Format, Vocab: vocab, B: []float64{0.1, -0.1}}
	for _, a := range []string{"go", "stop"} {
		f.Actions = append(f.Actions, slices.Index(vocab, a))
	}
	for i := range vocab {
		f.W = append(f.W, []float64{float64(i%3) * 0.1, -float64(i%2) * 0.2})
	}
	p, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEncode(t *testing.T) {
	p := tiny(t)
	got := p.Encode("The light is RED.<|im_end|> purple")
	var words []string
	for _, id := range got {
		words = append(words, p.Token(id))
	}
	want := []string{Unk, "light", "is", "red", ".", ImEnd, Unk}
	if !reflect.DeepEqual(words, want) {
		t.Fatalf("got %q, want %q", words, want)
	}
}

func TestFeatures(t *testing.T) {
	p := tiny(t)
	id := func(w string) int { i, _ := p.ID(w); return i }
	s, e := id(ImStart), id(ImEnd)
	prompt := []int{s, id("system"), id("red"), e, s, id("user"), id("green"), id("light"), id("light"), e, s, id("assistant")}
	got := p.Features(prompt)
	want := []int{s, e, id("user"), id("assistant"), id("green"), id("light")}
	slices.Sort(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("features %v, want %v", got, want)
	}
	// Fewer than two <|im_start|>: the whole prompt.
	if got := p.Features([]int{id("red"), s, id("red")}); !reflect.DeepEqual(got, []int{s, id("red")}) {
		t.Fatalf("short prompt features %v", got)
	}
}

func TestLogProbsAndSample(t *testing.T) {
	p := tiny(t)
	prompt, _, err := p.Render([]Message{{Role: "user", Content: "red light"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lp := p.LogProbs(prompt)
	// logits by hand: b + Σ W rows of the features.
	z := slices.Clone(p.B)
	for _, f := range p.Features(prompt) {
		for a := range z {
			z[a] += p.W[f][a]
		}
	}
	lse := math.Log(math.Exp(z[0]) + math.Exp(z[1]))
	for a := range z {
		if math.Abs(lp[a]-(z[a]-lse)) > 1e-12 {
			t.Fatalf("logprob %d: %v, want %v", a, lp[a], z[a]-lse)
		}
	}
	c := p.Sample(prompt, 0, -1, nil)
	best := 0
	if lp[1] > lp[0] {
		best = 1
	}
	if c.Action != best {
		t.Errorf("greedy chose %d, argmax is %d", c.Action, best)
	}
	if !reflect.DeepEqual(c.IDs, []int{p.Actions[best], p.ImEndID()}) || c.Logprobs[0] != lp[best] || c.Logprobs[1] != 0 {
		t.Errorf("completion %+v", c)
	}
	c = p.Sample(prompt, 1, 1-best, rand.New(rand.NewPCG(1, 2)))
	if c.Action != 1-best || c.Logprobs[0] != lp[1-best] {
		t.Errorf("forced completion %+v", c)
	}
}

// TestRenderPrefix checks that a prompt followed by its completion is a
// prefix of the next turn's prompt, as with a real chat template.
func TestRenderPrefix(t *testing.T) {
	p := tiny(t)
	tools := []Tool{{Type: "function", Function: Function{Name: "go", Description: "go on green"}}}
	msgs := []Message{{Role: "system", Content: "light"}, {Role: "user", Content: "green light"}}
	prompt, _, err := p.Render(msgs, tools)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Sample(prompt, 0, -1, nil)
	msgs = append(msgs,
		Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "x", Type: "function", Function: FunctionCall{Name: p.ActionName(c.Action), Arguments: "{}"}}}},
		Message{Role: "tool", ToolCallID: "x", Content: "red light"})
	next, _, err := p.Render(msgs, tools)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(next[:len(prompt)+2], append(slices.Clone(prompt), c.IDs...)) {
		t.Fatalf("prompt+completion is not a prefix of the next prompt")
	}
	if _, _, err := p.Render([]Message{{Role: "robot"}}, nil); err == nil {
		t.Error("unknown role: want error")
	}
}

func TestMessageJSON(t *testing.T) {
	m := Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "a", Type: "function", Function: FunctionCall{Name: "go", Arguments: "{}"}}}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"content":null`) {
		t.Errorf("tool-call message %s: want content null", b)
	}
	var back Message
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, m) {
		t.Errorf("round trip: %+v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"role":"user","content":[{"type":"text","text":"red"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"light"}]}`), &back); err != nil || back.Content != "red light" {
		t.Errorf("parts: %+v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"role":"user","content":5}`), &back); err == nil {
		t.Error("numeric content: want error")
	}
}

func TestSaveLoad(t *testing.T) {
	p := tiny(t)
	p.W[3][1] = 1.0 / 3 // a value that must survive exactly
	path := filepath.Join(t.TempDir(), "policy.json")
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	q, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(q.File, p.File) {
		t.Fatal("weights changed in a save/load round trip")
	}
	bad := p.File
	bad.W = bad.W[1:]
	if _, err := New(bad); err == nil {
		t.Error("W with a missing row: want error")
	}
	bad = p.File
	bad.Format = "v0"
	if _, err := New(bad); err == nil {
		t.Error("wrong format: want error")
	}
	bad = p.File
	bad.Actions = []int{0, 1}
	if _, err := New(bad); err == nil {
		t.Error("special tokens as actions: want error")
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil {
		t.Error("truncated file: want error")
	}
}

// TestImages: an image renders as <|vision_start|>, one pad per patch,
// <|vision_end|> after its message's words; its band features move the
// logits through V; a model without a vision section refuses images; and
// the JSON round trip keeps them as image_url parts.
func TestImages(t *testing.T) {
	p := tiny(t)
	img := image.NewNRGBA(image.Rect(0, 0, 20, 9)) // 3×2 patches of 8
	for y := 0; y < 3; y++ {                       // top band red, the rest black
		for x := 0; x < 20; x++ {
			img.SetNRGBA(x, y, color.NRGBA{255, 0, 0, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	msg := Message{Role: "user", Content: "red light", Images: []string{ImageURL(buf.Bytes())}}
	if _, _, err := p.Render([]Message{msg}, nil); err == nil || !strings.Contains(err.Error(), "reads no images") {
		t.Fatalf("text-only model given an image: %v", err)
	}

	f := p.File
	f.Vocab = slices.Concat(f.Vocab, VisionSpecials)
	for range VisionSpecials {
		f.W = append(f.W, []float64{0, 0})
	}
	f.Vision = &Vision{Patch: 8, Bands: 3, Scale: 1, V: [][]float64{{2, -1}, {0, 0}, {0, 0}}}
	vp, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	ids, feats, err := vp.Render([]Message{msg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for _, id := range ids {
		words = append(words, vp.Token(id))
	}
	want := slices.Concat([]string{ImStart, "user", "red", "light", VisionStart}, slices.Repeat([]string{ImagePad}, 6),
		[]string{VisionEnd, ImEnd, ImStart, "assistant"})
	if !slices.Equal(words, want) {
		t.Fatalf("rendered %v, want %v", words, want)
	}
	if len(feats) != 1 || math.Abs(feats[0][0]-1) > 1e-12 || feats[0][1] != 0 || feats[0][2] != 0 {
		t.Fatalf("features %v, want [[1 0 0]] (top band fully red)", feats)
	}
	with, without := vp.LogProbs(ids, feats...), vp.LogProbs(ids)
	if d := (with[0] - with[1]) - (without[0] - without[1]); math.Abs(d-3) > 1e-9 {
		t.Errorf("the image moved the logit gap by %v, want V[0] difference 3", d)
	}
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var back Message
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, msg) || !strings.Contains(string(b), `"type":"image_url"`) {
		t.Fatalf("round trip %s → %+v (%v)", b, back, err)
	}
	bad := Message{Role: "user", Images: []string{"https://example.com/cam.png"}}
	if _, _, err := vp.Render([]Message{bad}, nil); err == nil || !strings.Contains(err.Error(), "data:image") {
		t.Errorf("a URL image: %v", err)
	}
}

// TestSampleWith checks vLLM's order of truncation on a three-action
// policy with logits 2, 1, 0 (probabilities ~.665, .245, .090): each
// setting keeps what vLLM keeps and renormalises over it, the repetition
// penalty moves the logit of an action already in the prompt, and greedy
// reports the penalised distribution at temperature 1.
func TestSampleWith(t *testing.T) {
	vocab := slices.Concat(Specials, roles, []string{"a", "b", "c"})
	f := File{Format: Format, Vocab: vocab, B: []float64{2, 1, 0}}
	for _, a := range []string{"a", "b", "c"} {
		f.Actions = append(f.Actions, slices.Index(vocab, a))
	}
	for range vocab {
		f.W = append(f.W, []float64{0, 0, 0})
	}
	p, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	prompt, _, err := p.Render([]Message{{Role: "user", Content: "b"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lse := func(z ...float64) float64 {
		var s float64
		for _, x := range z {
			s += math.Exp(x)
		}
		return math.Log(s)
	}
	inf := math.Inf(-1)
	for _, c := range []struct {
		name string
		s    Sampling
		want []float64
	}{
		{"neutral", Sampling{Temperature: 1}, []float64{2 - lse(2, 1, 0), 1 - lse(2, 1, 0), -lse(2, 1, 0)}},
		{"temperature 0.5", Sampling{Temperature: 0.5}, []float64{4 - lse(4, 2, 0), 2 - lse(4, 2, 0), -lse(4, 2, 0)}},
		{"top_k 2", Sampling{Temperature: 1, TopK: 2}, []float64{2 - lse(2, 1), 1 - lse(2, 1), inf}},
		{"top_p 0.7", Sampling{Temperature: 1, TopP: 0.7}, []float64{2 - lse(2, 1), 1 - lse(2, 1), inf}},
		{"top_p 0.6", Sampling{Temperature: 1, TopP: 0.6}, []float64{0, inf, inf}},
		{"min_p 0.2", Sampling{Temperature: 1, MinP: 0.2}, []float64{2 - lse(2, 1), 1 - lse(2, 1), inf}},
		{"repetition 2 on b", Sampling{Temperature: 1, RepetitionPenalty: 2}, []float64{2 - lse(2, 0.5, 0), 0.5 - lse(2, 0.5, 0), -lse(2, 0.5, 0)}},
		{"greedy with repetition", Sampling{RepetitionPenalty: 2, TopK: 1}, []float64{2 - lse(2, 0.5, 0), 0.5 - lse(2, 0.5, 0), -lse(2, 0.5, 0)}},
	} {
		rng := rand.New(rand.NewPCG(1, 1))
		for range 20 {
			got := p.SampleWith(prompt, c.s, -1, rng)
			for k := range c.want {
				if !(math.Abs(got.Processed[k]-c.want[k]) < 1e-12 || got.Processed[k] == c.want[k]) {
					t.Fatalf("%s: processed %v, want %v", c.name, got.Processed, c.want)
				}
			}
			if math.IsInf(c.want[got.Action], -1) {
				t.Fatalf("%s: drew %s, which is truncated away", c.name, p.ActionName(got.Action))
			}
			if raw := p.LogProbs(prompt); got.Logprobs[0] != raw[got.Action] || !slices.Equal(got.Dist, raw) {
				t.Fatalf("%s: raw logprobs %v, want the model's %v", c.name, got.Dist, raw)
			}
		}
	}
}
