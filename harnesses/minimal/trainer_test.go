package minimal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/episode"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
	"github.com/roundhouse-rl/roundhouse/internal/npz"
	"github.com/roundhouse-rl/roundhouse/internal/rl"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// firstPrompt renders the first model call of task from init id seed.
func firstPrompt(t *testing.T, p *policy.Policy, task, seed int) []int {
	t.Helper()
	e, err := env.New(task, seed)
	if err != nil {
		t.Fatal(err)
	}
	prompt, _, err := p.Render([]policy.Message{{Role: "system", Content: env.SystemPrompt}, {Role: "user", Content: e.Instruction()}}, episode.Tools())
	if err != nil {
		t.Fatal(err)
	}
	return prompt
}

// decision builds a sample choosing action in prompt, with the policy's own
// logprobs as the rollout's.
func decision(t *testing.T, p *policy.Policy, prompt []int, action string, adv, weight float64) sample {
	t.Helper()
	k, ok := p.ActionIndex(action)
	if !ok {
		t.Fatalf("no action %s", action)
	}
	return sample{prompt, []int{p.Actions[k], p.ImEndID()}, []float64{p.LogProbs(prompt)[k], 0}, adv, weight, nil}
}

func prob(p *policy.Policy, prompt []int, action string) float64 {
	k, _ := p.ActionIndex(action)
	return math.Exp(p.LogProbs(prompt)[k])
}

// TestTrainerSign: one step raises the probability of a positive-advantage
// action and lowers that of a negative-advantage one.
func TestTrainerSign(t *testing.T) {
	needTorch(t)
	p, err := policy.Load(w0)
	if err != nil {
		t.Fatal(err)
	}
	x, y := firstPrompt(t, p, 2, 45), firstPrompt(t, p, 3, 47)
	dir := t.TempDir()
	batch, out := filepath.Join(dir, "batch.npz"), filepath.Join(dir, "out", "policy.json")
	if err := writeBatch(batch, []sample{
		decision(t, p, x, "pick_bowl", 1, 1),
		decision(t, p, y, "finish", -1, 1),
	}); err != nil {
		t.Fatal(err)
	}
	m, err := runTrainer(t, 1, batch, w0, out, "--epochs", "1", "--lr", "0.01")
	if err != nil {
		t.Fatal(err)
	}
	q, err := policy.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if before, after := prob(p, x, "pick_bowl"), prob(q, x, "pick_bowl"); after <= before {
		t.Errorf("positive advantage: π(pick_bowl) %.4f → %.4f, want a rise", before, after)
	}
	if before, after := prob(p, y, "finish"), prob(q, y, "finish"); after >= before {
		t.Errorf("negative advantage: π(finish) %.4f → %.4f, want a fall", before, after)
	}
	// The only step is taken at θ = θ_old: ratio 1, nothing clipped, and the
	// rollout logprobs are the policy's own.
	want := schemas.TrainerMetrics{Steps: 1, Samples: 2, Tokens: 4, MeanRatio: 1}
	got := m
	got.Loss, got.LogprobMismatch, got.LogprobMismatchMax, got.DriftCallMax = 0, 0, 0, 0
	if !reflect.DeepEqual(got, want) || m.LogprobMismatch > 1e-6 || m.LogprobMismatchMax > 1e-6 || m.DriftCallMax > 1e-6 {
		t.Errorf("metrics %+v", m)
	}
}

// TestTrainerImportanceWeight checks the loss at θ_old against the formula
// with the truncated importance weight in play: rollout logprobs 1 below
// π_old give w = min(e, 2) = 2 on the decision token, 1 on <|im_end|>.
func TestTrainerImportanceWeight(t *testing.T) {
	needTorch(t)
	s1, s2 := twoDecisions(t)
	for _, s := range []*sample{&s1, &s2} {
		s.logprobs = []float64{s.logprobs[0] - 1, 0}
	}
	dir := t.TempDir()
	batch, out := filepath.Join(dir, "batch.npz"), filepath.Join(dir, "out", "policy.json")
	if err := writeBatch(batch, []sample{s1, s2}); err != nil {
		t.Fatal(err)
	}
	m, err := runTrainer(t, 1, batch, w0, out, "--epochs", "1")
	if err != nil {
		t.Fatal(err)
	}
	// mean_t(w·L): s1 (2·1 + 1·1)/2 = 1.5, s2 (2·(−1) + 1·(−1))/2 = −1.5;
	// loss = −(1·1.5 + 0.5·(−1.5)) / 1.5 = −0.5.
	if math.Abs(m.Loss-(-0.5)) > 1e-5 || math.Abs(m.LogprobMismatch-0.5) > 1e-5 {
		t.Errorf("loss %v (want -0.5), mismatch %v (want 0.5)", m.Loss, m.LogprobMismatch)
	}
}

// twoDecisions are w0's first decisions of tasks 0 and 1: open_drawer with
// advantage 1 and weight 1, pick_cube with advantage −1 and weight 0.5,
// each with the logprobs w0 gives them.
func twoDecisions(t *testing.T) (sample, sample) {
	t.Helper()
	p, err := policy.Load(w0)
	if err != nil {
		t.Fatal(err)
	}
	return decision(t, p, firstPrompt(t, p, 0, 45), "open_drawer", 1, 1), decision(t, p, firstPrompt(t, p, 1, 45), "pick_cube", -1, 0.5)
}

// TestPPOObjective checks the dual-clip objective on hand-picked ratios.
func TestPPOObjective(t *testing.T) {
	needTorch(t)
	script := `
import json, torch, trainer
rho = torch.tensor([1.5, 0.5, 0.5, 5.0, 1.0, 2.0], dtype=torch.float64)
A = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, -0.5], dtype=torch.float64)
L, clip, dual = trainer.ppo_objective(rho, A, 0.2, 0.28, 3.0)
print(json.dumps({"L": L.tolist(), "clip": clip.tolist(), "dual": dual.tolist()}))
`
	out, err := exec.Command(python, "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got struct {
		L          []float64
		Clip, Dual []bool
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []float64{
		1.28, // ρA above the upper clip
		0.5,  // ρ below 1 with A > 0 is not clipped
		-0.8, // ρ below 1−0.2 with A < 0: clipped
		-3.0, // huge ρ with A < 0: the dual clip bounds it at 3A
		-1.0, // on-policy
		-1.0, // ρA = −1 lies above 3A = −1.5: the dual clip is inactive
	}
	for i := range want {
		if math.Abs(got.L[i]-want[i]) > 1e-12 {
			t.Errorf("case %d: L = %v, want %v", i, got.L[i], want[i])
		}
	}
	if !reflect.DeepEqual(got.Clip, []bool{true, false, true, false, false, false}) ||
		!reflect.DeepEqual(got.Dual, []bool{false, false, false, true, false, false}) {
		t.Errorf("clip %v dual %v", got.Clip, got.Dual)
	}
}

// TestTrainerDistributed: two ranks sharding each global batch take the same
// steps as one.
func TestTrainerDistributed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torchrun twice")
	}
	needTorch(t)
	p, err := policy.Load(w0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	var batch []sample
	dir := t.TempDir()
	images := filepath.Join(dir, "images") // runTrainer passes it
	for task := range env.NumTasks() {
		e, _ := env.New(task, 11+task)
		pl := &episode.Local{Policy: p, Rand: rng}
		out, _ := episode.Run(context.Background(), pl, e, env.DefaultMaxTurns)
		for _, c := range pl.Calls {
			batch = append(batch, sample{c.Prompt, c.Completion, c.Logprobs, out.Reward - 0.4, 1 / float64(len(pl.Calls)), storeImages(t, images, c.Images)})
		}
	}
	path := filepath.Join(dir, "batch.npz")
	if err := writeBatch(path, batch); err != nil {
		t.Fatal(err)
	}
	var ws []*policy.Policy
	var ms []schemas.TrainerMetrics
	for _, n := range []int{1, 2} {
		out := filepath.Join(dir, "n"+string(rune('0'+n)), "policy.json")
		m, err := runTrainer(t, n, path, w0, out, "--global-batch", "5", "--epochs", "2", "--lr", "0.05")
		if err != nil {
			t.Fatal(err)
		}
		q, err := policy.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		ws, ms = append(ws, q), append(ms, m)
	}
	if want := 2 * ((len(batch) + 4) / 5); ms[0].Steps != want || ms[1].Steps != want {
		t.Errorf("steps %d and %d, want %d", ms[0].Steps, ms[1].Steps, want)
	}
	if math.Abs(ms[0].Loss-ms[1].Loss) > 1e-9 || ms[0].ClipFraction != ms[1].ClipFraction {
		t.Errorf("metrics differ: %+v vs %+v", ms[0], ms[1])
	}
	moved := false
	for i := range ws[0].W {
		for a := range ws[0].W[i] {
			if math.Abs(ws[0].W[i][a]-ws[1].W[i][a]) > 1e-9 {
				t.Fatalf("W[%d][%d]: %v with 1 rank, %v with 2", i, a, ws[0].W[i][a], ws[1].W[i][a])
			}
			moved = moved || ws[0].W[i][a] != p.W[i][a]
		}
	}
	if !moved {
		t.Error("training left the weights unchanged")
	}
}

// TestTrainerRejectsBadInput: bad batches fail with a message naming the
// problem, and no weights are written.
func TestTrainerRejectsBadInput(t *testing.T) {
	needTorch(t)
	p, err := policy.Load(w0)
	if err != nil {
		t.Fatal(err)
	}
	good := decision(t, p, firstPrompt(t, p, 0, 45), "open_drawer", 1, 1)
	dir := t.TempDir()

	notAction := good
	notAction.completion = []int{p.ImEndID(), p.ImEndID()}
	path := filepath.Join(dir, "bad1.npz")
	if err := writeBatch(path, []sample{notAction}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "o1", "policy.json")
	if _, err := runTrainer(t, 1, path, w0, out); err == nil || !strings.Contains(err.Error(), "not an action token") {
		t.Errorf("first completion token not an action: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("weights written despite the bad batch (stat: %v)", err)
	}

	path = filepath.Join(dir, "bad2.npz")
	w, err := npz.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteInt32(schemas.BatchPromptIDs, []int32{1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, 1, path, w0, filepath.Join(dir, "o2", "policy.json")); err == nil || !strings.Contains(err.Error(), "missing array") {
		t.Errorf("missing arrays: %v", err)
	}
}

// evalResult is what trainer.py --eval-out writes.
type evalResult struct {
	Loss             float64     `json:"loss"`
	Tokens           int         `json:"tokens"`
	ClipFraction     float64     `json:"clip_fraction"`
	DualClipFraction float64     `json:"dual_clip_fraction"`
	GradLogp         []float64   `json:"grad_logp"`
	GradW            [][]float64 `json:"grad_W"`
	GradB            []float64   `json:"grad_b"`
	Ranks            int         `json:"ranks"`
}

// runEval runs trainer.py --eval-out under torchrun with nproc workers.
func runEval(t *testing.T, nproc int, batch, old, theta string) evalResult {
	t.Helper()
	out := filepath.Join(t.TempDir(), "eval.json")
	cmd := exec.Command(python, append([]string{"torchrun.py",
		"--nnodes", "1", "--nproc_per_node", strconv.Itoa(nproc),
		"--rdzv_backend", "c10d", "--rdzv_endpoint", fmt.Sprintf("127.0.0.1:%d", itest.Port(t)),
		"--monitor_interval", "0.2",
		"trainer.py", "--batch", batch, "--weights-in", old, "--weights-theta", theta, "--eval-out", out,
		"--clip-low", "0.2", "--clip-high", "0.28", "--dual-clip", "3.0", "--is-cap", "2.0"}, imagesNextTo(batch)...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trainer --eval-out: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r evalResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTrainerGolden checks trainer.py's loss and gradients against the Go
// implementation of docs/design.md §4 (internal/rl.PPOLoss) on a batch of toy
// calls, with π_θ perturbed away from π_old so that ratios leave the clip
// range and hit the dual clip, and rollout logprobs shifted so that the
// importance-weight cap binds. Both sides work in float64 from the same
// float32 batch; they must agree within 1e-6 with one rank and with two.
func TestTrainerGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torchrun three times")
	}
	needTorch(t)
	p, err := policy.Load(w0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	f32 := func(x float64) float64 { return float64(float32(x)) } // as batch.npz stores it
	advs := []float64{0.6, -0.6, 1, -1, -0.4, 0.25, 0}
	var batch []sample
	dir := t.TempDir()
	images := filepath.Join(dir, "images") // runEval passes it
	for task := range env.NumTasks() {
		e, _ := env.New(task, 3+task)
		pl := &episode.Local{Policy: p, Rand: rng}
		episode.Run(context.Background(), pl, e, env.DefaultMaxTurns)
		adv := advs[task%len(advs)]
		for _, c := range pl.Calls {
			// The rollout engine's logprobs differ from π_old by up to ±1.2:
			// below π_old by more than ln 2 the cap of 2 applies.
			lps := make([]float64, len(c.Logprobs))
			for k, lp := range c.Logprobs {
				lps[k] = f32(lp + 2.4*(rng.Float64()-0.5))
			}
			batch = append(batch, sample{c.Prompt, c.Completion, lps, f32(adv), f32(1 / float64(len(pl.Calls))), storeImages(t, images, c.Images)})
		}
	}
	// A longer completion, so mean_t runs over different token counts.
	long := batch[0]
	long.completion = append(slices.Clone(long.completion), p.ImEndID())
	long.logprobs = append(slices.Clone(long.logprobs), f32(-0.3))
	long.adv, long.weight = f32(-0.8), f32(0.7)
	batch = append(batch, long)

	// π_θ: π_old with Gaussian noise on every weight.
	theta := p.File
	theta.B = slices.Clone(p.B)
	theta.W = make([][]float64, len(p.W))
	for i := range theta.B {
		theta.B[i] += 0.8 * rng.NormFloat64()
	}
	for i, row := range p.W {
		theta.W[i] = slices.Clone(row)
		for k := range row {
			theta.W[i][k] += 0.8 * rng.NormFloat64()
		}
	}
	// Make sure some negative-advantage decision's ratio passes the dual
	// clip's 3: raise the least likely such action on its features.
	worst, lowest := -1, 1.0
	for i, s := range batch {
		k, _ := p.ActionIndex(p.Token(s.completion[0]))
		if pr := math.Exp(p.LogProbs(s.prompt)[k]); s.adv < 0 && pr < lowest {
			worst, lowest = i, pr
		}
	}
	k, _ := p.ActionIndex(p.Token(batch[worst].completion[0]))
	for _, f := range p.Features(batch[worst].prompt) {
		theta.W[f][k] += 0.5
	}
	q, err := policy.New(theta)
	if err != nil {
		t.Fatal(err)
	}
	batchPath, thetaPath := filepath.Join(dir, "batch.npz"), filepath.Join(dir, "theta.json")
	if err := writeBatch(batchPath, batch); err != nil {
		t.Fatal(err)
	}
	if err := q.Save(thetaPath); err != nil {
		t.Fatal(err)
	}

	// The Go side: per-token logprobs from the Go policy, forced tokens 0.
	ppo := func(pol *policy.Policy) (rl.PPOResult, [][]float64) {
		var ss []rl.PPOSample
		var dists [][]float64 // log π_θ over the actions, for the chain rule
		for _, s := range batch {
			k, _ := p.ActionIndex(p.Token(s.completion[0]))
			lo, lt := make([]float64, len(s.completion)), make([]float64, len(s.completion))
			lo[0], lt[0] = p.LogProbs(s.prompt)[k], pol.LogProbs(s.prompt)[k]
			ss = append(ss, rl.PPOSample{Advantage: s.adv, Weight: s.weight, LogpTheta: lt, LogpOld: lo, LogpRollout: s.logprobs})
			dists = append(dists, pol.LogProbs(s.prompt))
		}
		r, err := rl.PPOLoss(ss, rl.DefaultPPO())
		if err != nil {
			t.Fatal(err)
		}
		return r, dists
	}
	want, dists := ppo(q)
	capped := 0
	for _, s := range batch {
		k, _ := p.ActionIndex(p.Token(s.completion[0]))
		if p.LogProbs(s.prompt)[k]-s.logprobs[0] > math.Ln2 {
			capped++
		}
	}
	t.Logf("%d samples, %d tokens: %d clipped, %d dual-clipped, %d decisions at the IS cap; loss %.9f",
		len(batch), want.Tokens, want.Clipped, want.DualClipped, capped, want.Loss)
	if want.Clipped == 0 || want.DualClipped == 0 || capped == 0 {
		t.Fatal("the batch does not exercise the clip, the dual clip and the IS cap")
	}

	// ∂Loss/∂W and ∂Loss/∂b by the chain rule through the softmax: only the
	// decision token depends on θ, ∂log π(a)/∂z_k = [k = a] − π_k.
	gW := make([][]float64, len(p.W))
	for i := range gW {
		gW[i] = make([]float64, len(p.Actions))
	}
	gB := make([]float64, len(p.Actions))
	var gTok []float64
	for i, s := range batch {
		gTok = append(gTok, want.Grad[i]...)
		a, _ := p.ActionIndex(p.Token(s.completion[0]))
		for k, lp := range dists[i] {
			d := -math.Exp(lp)
			if k == a {
				d++
			}
			d *= want.Grad[i][0]
			gB[k] += d
			for _, f := range p.Features(s.prompt) {
				gW[f][k] += d
			}
		}
	}

	const tol = 1e-6
	for _, n := range []int{1, 2} {
		got := runEval(t, n, batchPath, w0, thetaPath)
		var worst float64
		diff := func(what string, x, y float64) {
			worst = max(worst, math.Abs(x-y))
			if math.Abs(x-y) > tol {
				t.Errorf("%d ranks: %s: trainer %v, Go %v", n, what, x, y)
			}
		}
		diff("loss", got.Loss, want.Loss)
		if got.Ranks != n || got.Tokens != want.Tokens || len(got.GradLogp) != len(gTok) ||
			got.ClipFraction != want.ClipFraction || got.DualClipFraction != want.DualClipFraction {
			t.Fatalf("%d ranks: trainer %d ranks, %d tokens, %d gradients, clip %v dual %v; Go %d tokens, clip %v dual %v",
				n, got.Ranks, got.Tokens, len(got.GradLogp), got.ClipFraction, got.DualClipFraction, want.Tokens, want.ClipFraction, want.DualClipFraction)
		}
		for i := range gTok {
			diff(fmt.Sprintf("∂loss/∂logπθ of token %d", i), got.GradLogp[i], gTok[i])
		}
		for k := range gB {
			diff(fmt.Sprintf("∂loss/∂b[%d]", k), got.GradB[k], gB[k])
			for i := range gW {
				diff(fmt.Sprintf("∂loss/∂W[%d][%d]", i, k), got.GradW[i][k], gW[i][k])
			}
		}
		t.Logf("%d ranks: loss %.12f, largest difference from Go %.2g", n, got.Loss, worst)
	}

	// The training path: one step over the batch as one global batch is
	// taken at θ = θ_old, so the loss it reports is PPOLoss at ρ = 1.
	atOld, _ := ppo(p)
	m, err := runTrainer(t, 2, batchPath, w0, filepath.Join(dir, "out", "policy.json"), "--epochs", "1")
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(m.Loss-atOld.Loss) > tol || m.Steps != 1 {
		t.Errorf("2-rank training step: loss %v (%d steps), Go %v", m.Loss, m.Steps, atOld.Loss)
	}
	t.Logf("2-rank training step at θ_old: loss %.12f, Go %.12f", m.Loss, atOld.Loss)
}

// TestTrainerDriftGuard: rollout logprobs that disagree with pi_old stop
// the trainer before any update when they exceed --drift-limit, naming the
// samples; under the limit the figures land in metrics.json.
func TestTrainerDriftGuard(t *testing.T) {
	needTorch(t)
	s1, s2 := twoDecisions(t)
	s1.logprobs = []float64{s1.logprobs[0] - 1, 0} // sample 0 drifts: mean 0.5 over its 2 tokens
	dir := t.TempDir()
	batch := filepath.Join(dir, "batch.npz")
	if err := writeBatch(batch, []sample{s1, s2}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "stopped", "policy.json")
	_, err := runTrainer(t, 1, batch, w0, out, "--drift-limit", "0.1")
	if err == nil || !strings.Contains(err.Error(), schemas.TrainerDriftGuard) || !strings.Contains(err.Error(), "first: sample 0 (0.5)") ||
		strings.Contains(err.Error(), "sample 1 (") {
		t.Fatalf("want the drift guard naming sample 0 only, got %v", err)
	}
	if _, serr := os.Stat(out); serr == nil {
		t.Error("the guard fired, yet weights were written")
	}
	m, err := runTrainer(t, 1, batch, w0, filepath.Join(dir, "ok", "policy.json"), "--drift-limit", "0.3")
	if err != nil {
		t.Fatal(err)
	}
	// Tokens: sample 0 differs by 1 and 0, sample 1 by 0 and 0.
	if math.Abs(m.LogprobMismatch-0.25) > 1e-6 || math.Abs(m.LogprobMismatchMax-1) > 1e-6 || math.Abs(m.DriftShare-0.5) > 1e-9 {
		t.Errorf("mismatch %v (want 0.25), max %v (want 1), share %v (want 0.5)", m.LogprobMismatch, m.LogprobMismatchMax, m.DriftShare)
	}
}

// TestTrainerDriftGuardSeesFewTokens: 3 of 400 completion tokens whose
// recorded logprob is off by 1.0 move the batch mean by only 0.0075, under
// a 0.05 limit; the per-call limit and the share of tokens past a
// threshold each stop the trainer, naming the worst calls, and let the
// same batch through when set above what it has.
func TestTrainerDriftGuardSeesFewTokens(t *testing.T) {
	needTorch(t)
	s1, s2 := twoDecisions(t)
	if len(s1.logprobs) != 2 || len(s2.logprobs) != 2 {
		t.Fatalf("want 2-token decisions, got %d and %d", len(s1.logprobs), len(s2.logprobs))
	}
	var ss []sample
	for i := 0; i < 200; i++ {
		s := s1
		if i%2 == 1 {
			s = s2
		}
		s.logprobs = append([]float64(nil), s.logprobs...)
		if i == 7 || i == 100 || i == 151 {
			s.logprobs[0] -= 1 // the decision token: this call's mean is 0.5
		}
		ss = append(ss, s)
	}
	dir := t.TempDir()
	batch := filepath.Join(dir, "batch.npz")
	if err := writeBatch(batch, ss); err != nil {
		t.Fatal(err)
	}
	run := func(name string, flags ...string) (schemas.TrainerMetrics, error) {
		return runTrainer(t, 1, batch, w0, filepath.Join(dir, name, "policy.json"), append([]string{"--drift-limit", "0.05"}, flags...)...)
	}
	m, err := run("mean-only")
	if err != nil {
		t.Fatalf("the mean alone (0.0075) is under 0.05, yet: %v", err)
	}
	if math.Abs(m.LogprobMismatch-3.0/400) > 1e-6 || math.Abs(m.DriftCallMax-0.5) > 1e-6 || m.DriftTokenShare != 0 {
		t.Errorf("mean %v (want 0.0075), call max %v (want 0.5), token share %v (want 0: no token limit)", m.LogprobMismatch, m.DriftCallMax, m.DriftTokenShare)
	}
	for _, c := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"call", []string{"--drift-call-limit", "0.2"}, "a call's mean |log pi_old - log pi_rollout| 0.5 exceeds --drift-call-limit 0.2"},
		{"tokens", []string{"--drift-token-limit", "0.5", "--drift-token-share", "0.005"}, "0.75% of tokens differ by more than --drift-token-limit 0.5"},
	} {
		out := filepath.Join(dir, c.name, "policy.json")
		_, err := runTrainer(t, 1, batch, w0, out, append([]string{"--drift-limit", "0.05"}, c.flags...)...)
		if err == nil || !strings.Contains(err.Error(), schemas.TrainerDriftGuard) || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), "first: sample 7 (0.5), sample 100 (0.5), sample 151 (0.5)") {
			t.Errorf("%s: want the guard to fire with %q naming samples 7, 100, 151; got %v", c.name, c.want, err)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Errorf("%s: the guard fired, yet weights were written", c.name)
		}
	}
	m, err = run("loose", "--drift-call-limit", "0.6", "--drift-token-limit", "0.5", "--drift-token-share", "0.01")
	if err != nil {
		t.Fatalf("limits above the batch's figures (call 0.5 < 0.6, 0.75%% < 1%%), yet: %v", err)
	}
	if math.Abs(m.DriftTokenShare-3.0/400) > 1e-9 {
		t.Errorf("token share %v, want 0.0075", m.DriftTokenShare)
	}
}
