package minimal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/rl"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
)

// hfEval is what trainer.py --model hf --eval-out writes.
type hfEval struct {
	evalResult
	LogpTheta []float64 `json:"logp_theta"`
	LogpOld   []float64 `json:"logp_old"`
	Model     string    `json:"model"`
}

// fakeHFModel writes a model directory for testdata/fake_transformers: an
// embedding and a linear head over a vocabulary of 10, initialised from seed.
func fakeHFModel(t *testing.T, dir string, seed int) string {
	t.Helper()
	if err := mkdir(dir); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"vocab_size": 10, "hidden_size": 6, "seed": %d}`, seed)
	for name, body := range map[string]string{"config.json": cfg, "tokenizer.json": `{"fake": true}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runHF runs trainer.py --model hf under torchrun with nproc workers and the
// fake transformers package on PYTHONPATH.
func runHF(t *testing.T, nproc int, args ...string) error {
	t.Helper()
	_, err := runTorchrun(t, nproc, "trainer.py", args...)
	return err
}

// runTorchrun runs script --model hf under torchrun with nproc workers and
// the fake transformers package on PYTHONPATH, and returns its output. A
// run that outlives 5 minutes (ranks waiting on each other's collectives)
// gets SIGTERM, which torchrun passes to its workers.
func runTorchrun(t *testing.T, nproc int, script string, args ...string) (string, error) {
	t.Helper()
	fake, err := filepath.Abs(filepath.Join("testdata", "fake_transformers"))
	if err != nil {
		t.Fatal(err)
	}
	cmdArgs := []string{"torchrun.py",
		"--nnodes", "1", "--nproc_per_node", strconv.Itoa(nproc),
		"--rdzv_backend", "c10d", "--rdzv_endpoint", fmt.Sprintf("127.0.0.1:%d", itest.Port(t)),
		"--monitor_interval", "0.2",
		script, "--model", "hf"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append(cmdArgs, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	cmd.Env = append(os.Environ(), "PYTHONPATH="+fake, "OMP_NUM_THREADS=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s --model hf: %w\n%s", script, err, out.String())
	}
	return out.String(), nil
}

// hfEvaluate runs --eval-out under torchrun; args are extra trainer flags.
func hfEvaluate(t *testing.T, nproc int, batch, old, theta string, args ...string) hfEval {
	t.Helper()
	out := filepath.Join(t.TempDir(), "eval.json")
	if err := runHF(t, nproc, append([]string{"--batch", batch, "--weights-in", old, "--weights-theta", theta, "--eval-out", out}, args...)...); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r hfEval
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Model != "hf" || r.Ranks != nproc || len(r.LogpTheta) != r.Tokens || len(r.LogpOld) != r.Tokens || len(r.GradLogp) != r.Tokens {
		t.Fatalf("eval output: model %q, %d ranks, %d tokens, %d/%d/%d logprobs and gradients",
			r.Model, r.Ranks, r.Tokens, len(r.LogpTheta), len(r.LogpOld), len(r.GradLogp))
	}
	return r
}

// goPPO is rl.PPOLoss on the batch with the trainer's per-token logprobs.
func goPPO(t *testing.T, batch []sample, theta, old []float64) rl.PPOResult {
	t.Helper()
	var ss []rl.PPOSample
	k := 0
	for _, s := range batch {
		n := len(s.completion)
		lr := make([]float64, n)
		for i, lp := range s.logprobs {
			lr[i] = float64(float32(lp))
		}
		ss = append(ss, rl.PPOSample{Advantage: float64(float32(s.adv)), Weight: float64(float32(s.weight)),
			LogpTheta: theta[k : k+n], LogpOld: old[k : k+n], LogpRollout: lr})
		k += n
	}
	r, err := rl.PPOLoss(ss, rl.DefaultPPO())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkAgainstGo compares the trainer's loss, clip fractions and
// ∂loss/∂log πθ per token with rl.PPOLoss on the logprobs the model gave.
func checkAgainstGo(t *testing.T, label string, batch []sample, got hfEval) {
	t.Helper()
	const tol = 1e-6
	want := goPPO(t, batch, got.LogpTheta, got.LogpOld)
	if got.Tokens != want.Tokens || got.ClipFraction != want.ClipFraction || got.DualClipFraction != want.DualClipFraction {
		t.Errorf("%s: trainer %d tokens, clip %v, dual %v; Go %d, %v, %v",
			label, got.Tokens, got.ClipFraction, got.DualClipFraction, want.Tokens, want.ClipFraction, want.DualClipFraction)
	}
	if math.Abs(got.Loss-want.Loss) > tol {
		t.Errorf("%s: loss %v, Go %v", label, got.Loss, want.Loss)
	}
	k := 0
	for s := range want.Grad {
		for _, g := range want.Grad[s] {
			if math.Abs(got.GradLogp[k]-g) > tol {
				t.Errorf("%s: ∂loss/∂logπθ of token %d: trainer %v, Go %v", label, k, got.GradLogp[k], g)
			}
			k++
		}
	}
	t.Logf("%s: loss %.9f (Go %.9f), %d tokens, clip %.3f, dual %.3f",
		label, got.Loss, want.Loss, got.Tokens, got.ClipFraction, got.DualClipFraction)
}

// TestTrainerHF runs the Hugging Face path of trainer.py on a fake
// transformers package (testdata/fake_transformers): the loss and its
// gradient with respect to the per-token logprobs match rl.PPOLoss on the
// logprobs the model gives, with one rank and two; a training step raises
// the positive-advantage token's probability and lowers the negative one's,
// the same with one rank and two; save_pretrained's output and the tokenizer
// files land in --weights-out.
func TestTrainerHF(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torchrun several times")
	}
	needTorch(t)
	dir := t.TempDir()
	old := fakeHFModel(t, filepath.Join(dir, "old"), 1)
	theta := fakeHFModel(t, filepath.Join(dir, "theta"), 2)

	// Golden: π_θ is another random model, so ratios leave the clip range;
	// rollout logprobs far below the model's make the IS cap bind.
	golden := []sample{
		{[]int{1, 2}, []int{3}, []float64{-4}, 1, 1, nil},
		{[]int{4, 5}, []int{6, 7}, []float64{-1.5, -0.5}, -1, 0.5, nil},
		{[]int{1, 6, 2}, []int{5, 3, 0, 9}, []float64{-2, -6, -0.1, -3}, 0.6, 0.25, nil},
		{[]int{8}, []int{2, 2}, []float64{-2.5, -1}, -0.4, 0.25, nil},
	}
	batchPath := filepath.Join(dir, "golden.npz")
	if err := writeBatch(batchPath, golden); err != nil {
		t.Fatal(err)
	}
	const tol = 1e-6
	var first hfEval
	for _, n := range []int{1, 2} {
		got := hfEvaluate(t, n, batchPath, old, theta)
		checkAgainstGo(t, fmt.Sprintf("%d ranks", n), golden, got)
		if n == 1 {
			first = got
		} else {
			for i := range got.LogpTheta {
				if got.LogpTheta[i] != first.LogpTheta[i] || got.LogpOld[i] != first.LogpOld[i] {
					t.Errorf("token %d: logprobs differ between 1 and 2 ranks", i)
				}
			}
		}
	}

	// Training: one positive and one negative call with disjoint tokens.
	train := []sample{
		{[]int{1, 2}, []int{3}, []float64{-2}, 1, 1, nil},
		{[]int{4, 5}, []int{6}, []float64{-2}, -1, 1, nil},
	}
	trainPath := filepath.Join(dir, "train.npz")
	if err := writeBatch(trainPath, train); err != nil {
		t.Fatal(err)
	}
	before := hfEvaluate(t, 1, trainPath, old, old)
	var after []hfEval
	for _, n := range []int{1, 2} {
		out := filepath.Join(dir, fmt.Sprintf("out%d", n))
		metrics := filepath.Join(dir, fmt.Sprintf("metrics%d.json", n))
		if err := runHF(t, n, "--batch", trainPath, "--weights-in", old, "--weights-out", out,
			"--metrics-out", metrics, "--lr", "0.05", "--epochs", "1"); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"config.json", "model.pt", "tokenizer.json"} {
			if _, err := os.Stat(filepath.Join(out, f)); err != nil {
				t.Errorf("%d ranks: %v", n, err)
			}
		}
		m := readMetrics(t, metrics)
		// The only step is taken at θ = θ_old.
		want := goPPO(t, train, before.LogpOld, before.LogpOld)
		if m.Steps != 1 || m.Samples != 2 || m.Tokens != 2 || math.Abs(m.Loss-want.Loss) > tol || math.Abs(m.MeanRatio-1) > 1e-12 {
			t.Errorf("%d ranks: metrics %+v, Go loss %v", n, m, want.Loss)
		}
		a := hfEvaluate(t, 1, trainPath, old, out)
		if a.LogpTheta[0] <= before.LogpOld[0] {
			t.Errorf("%d ranks: positive advantage: log π %.6f → %.6f, want a rise", n, before.LogpOld[0], a.LogpTheta[0])
		}
		if a.LogpTheta[1] >= before.LogpOld[1] {
			t.Errorf("%d ranks: negative advantage: log π %.6f → %.6f, want a fall", n, before.LogpOld[1], a.LogpTheta[1])
		}
		t.Logf("%d ranks: log π(positive) %.6f → %.6f, log π(negative) %.6f → %.6f",
			n, before.LogpOld[0], a.LogpTheta[0], before.LogpOld[1], a.LogpTheta[1])
		after = append(after, a)
	}
	for i := range after[0].LogpTheta {
		if math.Abs(after[0].LogpTheta[i]-after[1].LogpTheta[i]) > 1e-5 {
			t.Errorf("token %d after training: log π %v with 1 rank, %v with 2", i, after[0].LogpTheta[i], after[1].LogpTheta[i])
		}
	}
}
