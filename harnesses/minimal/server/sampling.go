package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
)

// LogprobsMode is what a reply's logprobs are, as vLLM's --logprobs-mode
// (0.10.2 and later) names it.
type LogprobsMode string

const (
	// RawLogprobs, vLLM's default: log softmax of the model's logits,
	// before penalties, temperature and truncation.
	RawLogprobs LogprobsMode = "raw_logprobs"
	// ProcessedLogprobs: log probabilities under the distribution the
	// token was actually drawn from.
	ProcessedLogprobs LogprobsMode = "processed_logprobs"
)

// ParseLogprobsMode reads a --logprobs-mode value. vLLM's raw_logits and
// processed_logits are refused: the toy reports logprobs only.
func ParseLogprobsMode(s string) (LogprobsMode, error) {
	switch m := LogprobsMode(s); m {
	case RawLogprobs, ProcessedLogprobs:
		return m, nil
	case "raw_logits", "processed_logits":
		return "", fmt.Errorf("logprobs mode %q: the toy model returns logprobs only; use raw_logprobs or processed_logprobs", s)
	default:
		return "", fmt.Errorf("logprobs mode %q: want raw_logprobs or processed_logprobs", s)
	}
}

// Defaults are the sampling values a request gets for the fields it omits
// (nil: vLLM's neutral value).
type Defaults struct {
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	TopK              *int     `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	MaxTokens         *int     `json:"max_tokens,omitempty"` // generation_config's max_new_tokens
}

// String lists the defaults that are set, for the start-up log.
func (d Defaults) String() string {
	b, err := json.Marshal(d)
	if err != nil { // cannot happen: plain numbers
		return "?"
	}
	return string(b)
}

// GenerationConfigFile is where a weights directory keeps the model
// creator's sampling defaults.
const GenerationConfigFile = "generation_config.json"

// GenerationConfig returns the sampling defaults of vLLM's
// --generation-config mode for the weights in dir: "vllm" gives none (the
// neutral values); "auto" (vLLM's default) takes temperature, top_p,
// top_k, min_p, repetition_penalty and max_new_tokens from
// dir/generation_config.json when the file exists. Like vLLM, which reads
// the file through transformers' GenerationConfig.to_diff_dict(), it skips
// values equal to transformers' own defaults (temperature 1, top_p 1,
// top_k 50, repetition_penalty 1): a file saying top_k 50 sets no top_k.
func GenerationConfig(mode, dir string) (Defaults, error) {
	var d Defaults
	switch mode {
	case "vllm":
		return d, nil
	case "auto":
	default:
		return d, fmt.Errorf("generation config %q: want auto or vllm", mode)
	}
	path := filepath.Join(dir, GenerationConfigFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("generation config: %w", err)
	}
	var f struct {
		Temperature       *float64 `json:"temperature"`
		TopP              *float64 `json:"top_p"`
		TopK              *int     `json:"top_k"`
		MinP              *float64 `json:"min_p"`
		RepetitionPenalty *float64 `json:"repetition_penalty"`
		MaxNewTokens      *int     `json:"max_new_tokens"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return d, fmt.Errorf("generation config %s: %w", path, err)
	}
	unless := func(x *float64, hf float64) *float64 {
		if x == nil || *x == hf {
			return nil
		}
		return x
	}
	d.Temperature, d.TopP = unless(f.Temperature, 1), unless(f.TopP, 1)
	d.MinP, d.RepetitionPenalty = f.MinP, unless(f.RepetitionPenalty, 1)
	if f.TopK != nil && *f.TopK != 50 {
		d.TopK = f.TopK
	}
	d.MaxTokens = f.MaxNewTokens
	// A default the request could not give is refused at start, not on
	// every request.
	var probe request
	if _, param, err := (&Server{Defaults: d}).sampling(&probe); err != nil {
		return Defaults{}, fmt.Errorf("generation config %s: %s: %w", path, param, err)
	}
	if d.MaxTokens != nil && *d.MaxTokens < 1 {
		return Defaults{}, fmt.Errorf("generation config %s: max_new_tokens must be at least 1", path)
	}
	return d, nil
}

// vLLM's thresholds: below samplingEps a temperature is greedy, and a
// positive one below minTemperature is raised to it (SamplingParams).
const (
	samplingEps    = 1e-5
	minTemperature = 1e-2
)

// sampling resolves a request's sampling fields against the defaults and
// checks them as vLLM's SamplingParams does; it returns the offending
// parameter with an error.
func (s *Server) sampling(r *request) (policy.Sampling, string, error) {
	pick := func(req, def *float64, neutral float64) float64 {
		switch {
		case req != nil:
			return *req
		case def != nil:
			return *def
		}
		return neutral
	}
	smp := policy.Sampling{
		Temperature:       pick(r.Temperature, s.Defaults.Temperature, 1),
		TopP:              pick(r.TopP, s.Defaults.TopP, 1),
		MinP:              pick(r.MinP, s.Defaults.MinP, 0),
		RepetitionPenalty: pick(r.RepetitionPenalty, s.Defaults.RepetitionPenalty, 1),
	}
	switch {
	case r.TopK != nil:
		smp.TopK = *r.TopK
	case s.Defaults.TopK != nil:
		smp.TopK = *s.Defaults.TopK
	}
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
	switch {
	case smp.Temperature < 0 || bad(smp.Temperature):
		return smp, "temperature", errors.New("temperature must be non-negative")
	case !(smp.TopP > 0 && smp.TopP <= 1):
		return smp, "top_p", fmt.Errorf("top_p must be in (0, 1], got %v", smp.TopP)
	case smp.TopK < -1:
		return smp, "top_k", fmt.Errorf("top_k must be 0 or -1 (disable), or at least 1, got %d", smp.TopK)
	case !(smp.MinP >= 0 && smp.MinP <= 1):
		return smp, "min_p", fmt.Errorf("min_p must be in [0, 1], got %v", smp.MinP)
	case !(smp.RepetitionPenalty > 0) || bad(smp.RepetitionPenalty):
		return smp, "repetition_penalty", fmt.Errorf("repetition_penalty must be greater than zero, got %v", smp.RepetitionPenalty)
	}
	for name, x := range map[string]*float64{"presence_penalty": r.PresencePenalty, "frequency_penalty": r.FrequencyPenalty} {
		if x != nil && !(*x >= -2 && *x <= 2) {
			return smp, name, fmt.Errorf("%s must be in [-2, 2], got %v", name, *x)
		}
	}
	if smp.Temperature > 0 && smp.Temperature < minTemperature {
		smp.Temperature = minTemperature
	}
	if smp.Temperature < samplingEps {
		// Greedy: vLLM drops the truncation settings too.
		smp.Temperature, smp.TopP, smp.TopK, smp.MinP = 0, 1, 0, 0
	}
	return smp, "", nil
}

func clampInf(x float64) float64 { return max(x, -9999.0) }
