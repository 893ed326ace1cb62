package sampling

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestDefaults(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, GenerationConfigFile), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	auto := schemas.SamplingSpec{}
	// No file: vLLM's own defaults, raw logprobs unless the spec says.
	if d, err := Defaults(auto, dir); err != nil || d.Temperature != 1 || d.TopP != 1 || d.TopK != 0 || d.LogprobsMode != schemas.LogprobsRaw {
		t.Fatalf("no file: %+v, %v", d, err)
	}
	// A checkpoint's file applies under auto; a top_k of 50 is
	// transformers' default, which vLLM's to_diff_dict never passes on.
	write(`{"do_sample": true, "temperature": 0.1, "top_p": 0.001, "top_k": 1, "repetition_penalty": 1.05, "max_new_tokens": 2048}`)
	d, err := Defaults(schemas.SamplingSpec{LogprobsMode: schemas.LogprobsProcessed}, dir)
	if err != nil || d.Temperature != 0.1 || d.TopP != 0.001 || d.TopK != 1 || d.RepetitionPenalty != 1.05 || d.LogprobsMode != schemas.LogprobsProcessed {
		t.Fatalf("auto: %+v, %v", d, err)
	}
	write(`{"temperature": 0.6, "top_k": 50}`)
	if d, _ := Defaults(auto, dir); d.Temperature != 0.6 || d.TopK != 0 {
		t.Errorf("top_k 50: %+v, want temperature 0.6 and no top_k", d)
	}
	// generation_config vllm ignores the file.
	if d, _ := Defaults(schemas.SamplingSpec{GenerationConfig: schemas.GenerationConfigVLLM}, dir); d.Temperature != 1 || d.TopK != 0 {
		t.Errorf("vllm: %+v, want neutral", d)
	}
	// A broken file is an error that names it and the way around it.
	write(`{"temperature": "hot"}`)
	if _, err := Defaults(auto, dir); err == nil || !strings.Contains(err.Error(), GenerationConfigFile) ||
		!strings.Contains(err.Error(), "--generation-config vllm") {
		t.Errorf("broken file: %v", err)
	}
}

func TestReasons(t *testing.T) {
	raw := Neutral
	raw.LogprobsMode = schemas.LogprobsRaw
	proc := Neutral
	proc.LogprobsMode = schemas.LogprobsProcessed
	with := func(s schemas.Sampling, f func(*schemas.Sampling)) schemas.Sampling { f(&s); return s }
	for _, c := range []struct {
		s    schemas.Sampling
		want string
		temp float64
	}{
		{raw, "", 1},
		{proc, "", 1},
		{with(raw, func(s *schemas.Sampling) { s.Temperature = 0.7 }), "temperature_raw", 1},
		{with(proc, func(s *schemas.Sampling) { s.Temperature = 0.7 }), "", 0.7},
		{with(proc, func(s *schemas.Sampling) { s.Temperature = 1e-6 }), "greedy", 1},
		{with(proc, func(s *schemas.Sampling) { s.TopP, s.MinP = 0.9, 0.05 }), "top_p,min_p", 1},
		{with(raw, func(s *schemas.Sampling) { s.Temperature, s.FrequencyPenalty = 1.3, 0.2 }), "temperature_raw,frequency_penalty", 1},
		{with(proc, func(s *schemas.Sampling) { s.Constraints = []string{"structured_output"} }), "structured_output", 1},
		{with(raw, func(s *schemas.Sampling) { s.LogprobsMode = "" }), "unknown_logprobs_mode", 1},
	} {
		if got := Reasons(c.s); got != c.want {
			t.Errorf("%+v: reasons %q, want %q", c.s, got, c.want)
		}
		if c.want == "" && TrainerTemperature(c.s) != c.temp {
			t.Errorf("%+v: trainer temperature %v, want %v", c.s, TrainerTemperature(c.s), c.temp)
		}
	}
}

func TestFixNamesEachRemedyOnce(t *testing.T) {
	f := Fix("temperature_raw,top_p,top_k,repetition_penalty")
	if !strings.Contains(f, "--logprobs-mode processed_logprobs") || strings.Count(f, "--generation-config vllm") != 3 {
		t.Errorf("fix %q: want the logprobs mode, and generation config for each truncation or penalty", f)
	}
	if f := Fix("structured_output"); !strings.Contains(f, "structured_output") {
		t.Errorf("fix %q does not name the constraint", f)
	}
}

func TestEffective(t *testing.T) {
	var g Given
	g.Set[Index(Temperature)], g.Value[Index(Temperature)] = true, 0.5
	g.Set[Index(TopK)], g.Value[Index(TopK)] = true, -1
	d := Neutral
	d.LogprobsMode, d.TopK, d.MinP = schemas.LogprobsRaw, 5, 0.1
	s := Effective(g, nil, d)
	var low Given
	low.Set[Index(Temperature)], low.Value[Index(Temperature)] = true, 0.005
	if e := Effective(low, nil, d); e.Temperature != 0.01 || Reasons(e) != "temperature_raw,top_k,min_p" {
		t.Errorf("temperature 0.005: recorded %v (%q), want vLLM's 0.01", e.Temperature, Reasons(e))
	}
	if s.Temperature != 0.5 || s.TopK != 0 || s.MinP != 0.1 || strings.Join(s.Defaulted, ",") != "top_p,min_p,repetition_penalty,presence_penalty,frequency_penalty" {
		t.Errorf("effective %+v", s)
	}
}
