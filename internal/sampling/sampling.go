// Package sampling decides whether a model call can train: whether the
// trainer can reproduce the distribution its tokens were drawn from
// (docs/design.md §3, "Sampling settings"). It is pure: the proxy records
// each call's effective settings with it, the harness loader refuses
// settings under which nothing could train.
package sampling

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Neutral is vLLM's own default for each setting a request leaves out
// (SamplingParams' defaults): what a server started with
// --generation-config vllm samples with.
var Neutral = schemas.Sampling{Temperature: 1, TopP: 1, RepetitionPenalty: 1}

// greedyBelow is vLLM's _SAMPLING_EPS: a temperature under it is greedy.
const greedyBelow = 1e-5

// minTemperature is vLLM's _MAX_TEMP: SamplingParams raises a temperature
// between 0 and it to it, so a call at 0.005 samples at 0.01.
const minTemperature = 1e-2

// GenerationConfigFile is the file of a weights directory whose settings
// vLLM applies under --generation-config auto.
const GenerationConfigFile = "generation_config.json"

// hfTopK is transformers' GenerationConfig default top_k. vLLM takes the
// file's settings through to_diff_dict, which drops values equal to
// transformers' defaults, so a file's top_k of 50 never reaches vLLM; the
// other defaults (temperature 1, top_p 1, repetition_penalty 1, no min_p)
// are neutral anyway.
const hfTopK = 50

// Defaults is the model server's default sampling for requests that leave
// settings out: Neutral under generation_config vllm; under auto, Neutral
// overlaid with the settings vLLM takes from the served weights'
// generation_config.json (temperature, top_p, top_k, min_p,
// repetition_penalty). A weights directory without the file gets Neutral.
func Defaults(spec schemas.SamplingSpec, weightsDir string) (schemas.Sampling, error) {
	d := Neutral
	d.LogprobsMode = Mode(spec)
	if spec.GenerationConfig == schemas.GenerationConfigVLLM || weightsDir == "" {
		return d, nil
	}
	path := filepath.Join(weightsDir, GenerationConfigFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return d, nil
	} else if err != nil {
		return d, fmt.Errorf("read the model server's sampling defaults: %w", err)
	}
	var gc struct {
		Temperature       *float64 `json:"temperature"`
		TopP              *float64 `json:"top_p"`
		TopK              *float64 `json:"top_k"`
		MinP              *float64 `json:"min_p"`
		RepetitionPenalty *float64 `json:"repetition_penalty"`
	}
	if err := json.Unmarshal(raw, &gc); err != nil {
		return d, fmt.Errorf("%s: %w: the model server applies it under generation_config auto; fix the file, "+
			"or serve with --generation-config vllm and set model_server.sampling.generation_config: vllm", path, err)
	}
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&d.Temperature, gc.Temperature)
	set(&d.TopP, gc.TopP)
	set(&d.MinP, gc.MinP)
	set(&d.RepetitionPenalty, gc.RepetitionPenalty)
	if gc.TopK != nil && *gc.TopK != hfTopK {
		d.TopK = topK(*gc.TopK)
	}
	return d, nil
}

// Mode is the spec's logprobs mode, vLLM's default when unset.
func Mode(spec schemas.SamplingSpec) string {
	if spec.LogprobsMode == "" {
		return schemas.LogprobsRaw
	}
	return spec.LogprobsMode
}

// topK maps vLLM's "off" values (-1, 0) to 0.
func topK(v float64) int32 {
	if v <= 0 || v > math.MaxInt32 {
		return 0
	}
	return int32(v)
}

// Setting names, as in the request and in Sampling.Defaulted.
const (
	Temperature       = "temperature"
	TopP              = "top_p"
	TopK              = "top_k"
	MinP              = "min_p"
	RepetitionPenalty = "repetition_penalty"
	PresencePenalty   = "presence_penalty"
	FrequencyPenalty  = "frequency_penalty"
)

// Settings are the sampling settings of a chat completion request, in
// Sampling's order.
var Settings = []string{Temperature, TopP, TopK, MinP, RepetitionPenalty, PresencePenalty, FrequencyPenalty}

// Given is the settings a request gave, indexed as Settings; a null value
// counts as left out.
type Given struct {
	Value [7]float64
	Set   [7]bool
}

// Index is the position of a setting in Settings, -1 for another name.
func Index(name string) int {
	for i, s := range Settings {
		if s == name {
			return i
		}
	}
	return -1
}

// Effective is the sampling of a request that gave g and the constraints
// named, under the server's defaults: each setting left out takes the
// default and is named in Defaulted. A temperature between 0 and 0.01 is
// recorded as the 0.01 vLLM samples at.
func Effective(g Given, constraints []string, defaults schemas.Sampling) schemas.Sampling {
	s := defaults
	s.Defaulted, s.Constraints = nil, constraints
	if n := len(Settings) - countTrue(g.Set[:]); n > 0 {
		s.Defaulted = make([]string, 0, n) // one allocation, not one per growth
	}
	fields := [...]*float64{&s.Temperature, &s.TopP, nil, &s.MinP, &s.RepetitionPenalty, &s.PresencePenalty, &s.FrequencyPenalty}
	for i, name := range Settings {
		switch {
		case !g.Set[i]:
			s.Defaulted = append(s.Defaulted, name)
		case name == TopK:
			s.TopK = topK(g.Value[i])
		default:
			*fields[i] = g.Value[i]
		}
	}
	if s.Temperature > 0 && s.Temperature < minTemperature {
		s.Temperature = minTemperature // as vLLM samples it
	}
	return s
}

// Reasons says why the trainer cannot reproduce the distribution a call
// with sampling s was drawn from ("" when it can), reasons joined by
// commas. The rule: the trainer computes log-softmax(logits / T) and
// nothing else, so a call trains only when
//   - its temperature is above zero (greedy has no distribution to ratio),
//   - nothing truncates, penalises, biases or masks the distribution
//     (top_p 1, no top_k, min_p 0, no penalty, no constraint), and
//   - its logprobs are of that distribution: processed logprobs at any
//     temperature (the trainer divides by the same T), raw logprobs only
//     at temperature 1, where raw and processed are the same.
//
// Processed logprobs do include truncation and penalties, but the trainer
// cannot apply them to its own logits, so its π_old and the recorded
// π_rollout would differ on every token and the drift guard could not
// tell that gap from a broken pipeline.
func Reasons(s schemas.Sampling) string {
	var r []string
	switch s.LogprobsMode {
	case schemas.LogprobsRaw, schemas.LogprobsProcessed:
	default:
		r = append(r, "unknown_logprobs_mode")
	}
	switch {
	case s.Temperature < greedyBelow:
		r = append(r, "greedy")
	case s.Temperature != 1 && s.LogprobsMode == schemas.LogprobsRaw:
		r = append(r, "temperature_raw")
	}
	if s.TopP < 1 {
		r = append(r, TopP)
	}
	if s.TopK > 0 {
		r = append(r, TopK)
	}
	if s.MinP > 0 {
		r = append(r, MinP)
	}
	if s.RepetitionPenalty != 1 {
		r = append(r, RepetitionPenalty)
	}
	if s.PresencePenalty != 0 {
		r = append(r, PresencePenalty)
	}
	if s.FrequencyPenalty != 0 {
		r = append(r, FrequencyPenalty)
	}
	r = append(r, s.Constraints...)
	return strings.Join(r, ",")
}

// TrainerTemperature is what the trainer divides the call's logits by
// (schemas.BatchTemperatures): its temperature when the logprobs were
// processed, else 1 (a trainable raw call is at temperature 1).
func TrainerTemperature(s schemas.Sampling) float64 {
	if s.LogprobsMode == schemas.LogprobsProcessed && s.Temperature >= greedyBelow {
		return s.Temperature
	}
	return 1
}

// transport are the reasons of untrainable calls that are not about
// sampling (the proxy's and the host's).
var transport = []string{"failed", "no_token_ids", "no_logprobs", "token_count_mismatch", "orphaned", ""}

// IsSamplingReason: each of the comma-separated reasons is about how the
// call was sampled, not about a failed or incomplete call.
func IsSamplingReason(reasons string) bool {
	for _, r := range strings.Split(reasons, ",") {
		if slices.Contains(transport, r) {
			return false
		}
	}
	return true
}

// Fix names what makes calls with these reasons trainable, for the error
// that refuses a harness or a round whose calls all have them.
func Fix(reasons string) string {
	var fixes []string
	add := func(f string) {
		for _, have := range fixes {
			if have == f {
				return
			}
		}
		fixes = append(fixes, f)
	}
	for _, r := range strings.Split(reasons, ",") {
		switch r {
		case "temperature_raw":
			add("serve with --logprobs-mode processed_logprobs and set model_server.sampling.logprobs_mode: processed_logprobs " +
				"(the trainer then applies the call's temperature), or sample at temperature 1")
		case "greedy":
			add("sample with a temperature above 0: a greedy call has no distribution to train on")
		case TopP, TopK, MinP, RepetitionPenalty, PresencePenalty, FrequencyPenalty:
			add("send no " + r + " (or its neutral value) from the planner; where the request leaves it out and the weights' " +
				"generation_config.json sets it, serve with --generation-config vllm and set model_server.sampling.generation_config: vllm")
		case "unknown_logprobs_mode":
			add("set model_server.sampling.logprobs_mode to raw_logprobs or processed_logprobs, as the server is started")
		case "":
		default:
			add("send no " + r + " from the planner while training: the trainer cannot apply it to its own logits")
		}
	}
	return strings.Join(fixes, "; ")
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
