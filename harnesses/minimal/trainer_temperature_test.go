package minimal_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/episode"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/server"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// recordCall asks a toy model server for the first decision of task from
// init id seed at temperature temp and returns it as a batch sample, its
// ids and logprobs as the server reported them (what the proxy records).
func recordCall(t *testing.T, url string, task, seed int, temp float64) sample {
	t.Helper()
	e, err := env.New(task, seed)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{
		"model": "toy", "tools": episode.Tools(), "temperature": temp, "seed": seed,
		"logprobs": true, "return_token_ids": true,
		"messages": []policy.Message{{Role: "system", Content: env.SystemPrompt}, {Role: "user", Content: e.Instruction()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		PromptTokenIDs []int `json:"prompt_token_ids"`
		Choices        []struct {
			TokenIDs []int `json:"token_ids"`
			Logprobs struct {
				Content []struct {
					Logprob float64 `json:"logprob"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 {
		t.Fatalf("status %d, %d choices: %v", resp.StatusCode, len(out.Choices), err)
	}
	c := out.Choices[0]
	s := sample{prompt: out.PromptTokenIDs, completion: c.TokenIDs, adv: 1, weight: 1}
	for _, lp := range c.Logprobs.Content {
		s.logprobs = append(s.logprobs, lp.Logprob)
	}
	if len(s.logprobs) != len(s.completion) || len(s.completion) == 0 {
		t.Fatalf("%d logprobs for %d completion tokens", len(s.logprobs), len(s.completion))
	}
	return s
}

// TestTrainerTemperatures: calls sampled at temperature 0.7 from a server
// returning processed logprobs, mixed with calls at temperature 1, agree
// with the trainer's π_old to float32 precision when the batch carries
// their temperatures, and trip the drift guard when it does not (the
// trainer then scores them untempered). Temperatures that are not
// positive and finite are refused.
func TestTrainerTemperatures(t *testing.T) {
	needTorch(t)
	p, err := policy.Load(w0)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(p, "toy", "w0")
	srv.LogprobsMode = server.ProcessedLogprobs
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	var batch []sample
	var temps []float32
	for i := range 8 {
		temp := 0.7
		if i%4 == 3 {
			temp = 1
		}
		s := recordCall(t, ts.URL, i%env.NumTasks(), 11+i, temp)
		if i%2 == 1 {
			s.adv = -1
		}
		batch, temps = append(batch, s), append(temps, float32(temp))
	}
	// The recorded logprobs are the tempered ones: far from the model's own.
	if k, _ := p.ActionIndex(p.Token(batch[0].completion[0])); math.Abs(batch[0].logprobs[0]-p.LogProbs(batch[0].prompt)[k]) < 0.05 {
		t.Fatalf("sample 0: processed logprob %v is the raw one %v; the test needs them apart", batch[0].logprobs[0], p.LogProbs(batch[0].prompt)[k])
	}
	dir := t.TempDir()
	strict := []string{"--drift-limit", "1e-6", "--drift-call-limit", "1e-6", "--drift-token-limit", "1e-6", "--drift-token-share", "0"}

	with := filepath.Join(dir, "with.npz")
	if err := writeBatchTemps(with, batch, temps); err != nil {
		t.Fatal(err)
	}
	m, err := runTrainer(t, 1, with, w0, filepath.Join(dir, "with", "policy.json"), append(strict, "--epochs", "1")...)
	if err != nil {
		t.Fatalf("with the batch's temperatures: %v", err)
	}
	if m.LogprobMismatchMax > 1e-6 || math.Abs(m.MeanRatio-1) > 1e-12 {
		t.Errorf("with temperatures: largest |log π_old − log π_rollout| %g, mean ratio %v; want ~0 and 1", m.LogprobMismatchMax, m.MeanRatio)
	}
	if m.Temperatures == nil || m.Temperatures.Min != float64(float32(0.7)) || m.Temperatures.Max != 1 {
		t.Errorf("metrics temperatures %+v, want min 0.7 (float32) and max 1", m.Temperatures)
	}
	t.Logf("with temperatures: mismatch mean %.3g max %.3g", m.LogprobMismatch, m.LogprobMismatchMax)

	without := filepath.Join(dir, "without.npz")
	if err := writeBatch(without, batch); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "without", "policy.json")
	_, err = runTrainer(t, 1, without, w0, out, "--drift-limit", "0.001", "--drift-call-limit", "0.001")
	if err == nil || !strings.Contains(err.Error(), schemas.TrainerDriftGuard) || !strings.Contains(err.Error(), "first: sample 0 (") {
		t.Errorf("without temperatures: want the drift guard naming sample 0, got %v", err)
	}
	if _, serr := os.Stat(out); serr == nil {
		t.Error("the guard fired, yet weights were written")
	}

	for _, c := range []struct {
		name  string
		temps []float32
		want  string
	}{
		{"zero", append(append([]float32{}, temps[:7]...), 0), "sample 7 has 0"},
		{"NaN", append([]float32{float32(math.NaN())}, temps[1:]...), "sample 0 has nan"},
		{"short", temps[:7], "one entry per sample (8)"},
	} {
		path := filepath.Join(dir, c.name+".npz")
		if err := writeBatchTemps(path, batch, c.temps); err != nil {
			t.Fatal(err)
		}
		output, code := trainerOnce(t, path, filepath.Join(dir, c.name, "policy.json"))
		if code != 2 || !strings.Contains(output, "temperatures must be") || !strings.Contains(output, c.want) {
			t.Errorf("temperatures %s: want exit 2 and a refusal naming %q, got exit %d: %s", c.name, c.want, code, output)
		}
	}
}

// trainerOnce runs trainer.py as one plain process (no torchrun: a
// refusal needs no ranks) and returns its output and exit status.
func trainerOnce(t *testing.T, batch, out string) (string, int) {
	t.Helper()
	cmd := exec.Command(python, "trainer.py", "--batch", batch, "--weights-in", w0, "--weights-out", out,
		"--metrics-out", filepath.Join(filepath.Dir(out), schemas.TrainerMetricsFile))
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("trainer.py: %v", err)
	}
	return string(b), cmd.ProcessState.ExitCode()
}

// TestTrainerHFTemperatures: the Hugging Face path divides each sample's
// logits by its temperature too. Rollout logprobs are the fake model's
// tempered log-softmax, computed here by a separate script (what vLLM's
// processed logprobs are); with the batch's temperatures π_old matches
// them and a strictly guarded training step runs and records the range,
// without them the drift guard stops the round.
func TestTrainerHFTemperatures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torchrun three times")
	}
	needTorch(t)
	dir := t.TempDir()
	model := fakeHFModel(t, filepath.Join(dir, "model"), 3)
	batch := []sample{
		{[]int{1, 2}, []int{3, 4}, nil, 1, 1, nil},
		{[]int{4, 5}, []int{6, 7, 8}, nil, -1, 0.5, nil},
		{[]int{9}, []int{2}, nil, 0.5, 1, nil},
	}
	temps := []float32{0.7, 1, 0.4}
	// The rollout engine's processed logprobs, from the model directly.
	script := `
import json, sys, torch, transformers
m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
out = []
for p, c, temp in json.load(sys.stdin):
    ids = torch.tensor([p + c])
    lg = m(input_ids=ids).logits[0, len(p) - 1:len(p) + len(c) - 1].float() / temp
    out.append(torch.log_softmax(lg, -1).gather(1, torch.tensor(c)[:, None])[:, 0].double().tolist())
print(json.dumps(out))
`
	var in [][]any
	for i, s := range batch {
		in = append(in, []any{s.prompt, s.completion, float64(temps[i])})
	}
	stdin, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	fake, err := filepath.Abs(filepath.Join("testdata", "fake_transformers"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", script, model)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+fake)
	cmd.Stdin = bytes.NewReader(stdin)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("rollout logprobs: %v", err)
	}
	var lps [][]float64
	if err := json.Unmarshal(b, &lps); err != nil || len(lps) != len(batch) {
		t.Fatalf("rollout logprobs %s: %v", b, err)
	}
	for i := range batch {
		batch[i].logprobs = lps[i]
	}
	with, without := filepath.Join(dir, "with.npz"), filepath.Join(dir, "without.npz")
	if err := writeBatchTemps(with, batch, temps); err != nil {
		t.Fatal(err)
	}
	if err := writeBatch(without, batch); err != nil {
		t.Fatal(err)
	}

	ev := hfEvaluate(t, 1, with, model, model)
	k, worst := 0, 0.0
	for _, s := range batch {
		for _, lp := range s.logprobs {
			worst = max(worst, math.Abs(ev.LogpOld[k]-float64(float32(lp))), math.Abs(ev.LogpTheta[k]-ev.LogpOld[k]))
			k++
		}
	}
	if worst > 1e-6 {
		t.Errorf("with temperatures: π_old or π_θ differs from the tempered rollout logprobs by %g", worst)
	}

	strict := []string{"--drift-limit", "1e-6", "--drift-call-limit", "1e-6", "--drift-token-limit", "1e-6", "--drift-token-share", "0"}
	metrics := filepath.Join(dir, "with-metrics.json")
	if err := runHF(t, 1, append([]string{"--batch", with, "--weights-in", model, "--weights-out", filepath.Join(dir, "with-out"),
		"--metrics-out", metrics, "--lr", "0.05", "--epochs", "1"}, strict...)...); err != nil {
		t.Fatalf("with temperatures: %v", err)
	}
	if m := readMetrics(t, metrics); m.Temperatures == nil || m.Temperatures.Min != float64(float32(0.4)) || m.Temperatures.Max != 1 ||
		m.LogprobMismatchMax > 1e-6 {
		t.Errorf("with temperatures: metrics temperatures %+v (want 0.4 to 1), largest mismatch %g", m.Temperatures, m.LogprobMismatchMax)
	}
	err = runHF(t, 1, "--batch", without, "--weights-in", model, "--weights-out", filepath.Join(dir, "without-out"),
		"--metrics-out", filepath.Join(dir, "without-metrics.json"), "--drift-limit", "0.001", "--drift-call-limit", "0.001")
	if err == nil || !strings.Contains(err.Error(), schemas.TrainerDriftGuard) || !strings.Contains(err.Error(), "first: sample 0 (") {
		t.Errorf("without temperatures: want the drift guard naming sample 0, got %v", err)
	}
}
