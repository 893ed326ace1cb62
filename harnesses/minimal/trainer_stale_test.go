package minimal_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// A stale sample (sampled by weights one version older than the trainer's
// starting weights) whose rollout logprob is 0.8 below π_old is policy
// lag, not drift: guards of 0.001 pass, the lag is reported on its own,
// and the behaviour correction weighs it as the design's formula says.
// Without the staleness array the same batch is drift and stops the round.
func TestTrainerStaleSamples(t *testing.T) {
	needTorch(t)
	s1, s2 := twoDecisions(t) // advantage 1 weight 1; advantage −1 weight 0.5
	s2.logprobs = []float64{s2.logprobs[0] - 0.8, s2.logprobs[1]}
	dir := t.TempDir()
	guards := []string{"--epochs", "1", "--drift-limit", "0.001", "--drift-call-limit", "0.001"}

	batch, out := filepath.Join(dir, "stale.npz"), filepath.Join(dir, "stale", "policy.json")
	if err := writeBatchWith(batch, []sample{s1, s2}, nil, []int32{0, 1}); err != nil {
		t.Fatal(err)
	}
	m, err := runTrainer(t, 1, batch, w0, out, guards...)
	if err != nil {
		t.Fatal(err)
	}
	// s2's tokens: the decision 0.8 off, <|im_end|> exact.
	if m.StaleSamples != 1 || math.Abs(m.PolicyLagMean-0.4) > 1e-6 || math.Abs(m.PolicyLagMax-0.8) > 1e-6 || m.LogprobMismatch > 1e-6 {
		t.Errorf("stale %d, lag mean %v max %v, drift %v; want 1, 0.4, 0.8, ~0", m.StaleSamples, m.PolicyLagMean, m.PolicyLagMax, m.LogprobMismatch)
	}
	// At θ = θ_old every ratio is 1, so L_t = A. s1: w = 1, mean 1.
	// s2: w = min(e^0.8, 2) = 2 on the decision, 1 on <|im_end|>:
	// mean (2·(−1) + 1·(−1))/2 = −1.5. Loss = −(1·1 + 0.5·(−1.5)) / 1.5.
	if want := -(1 - 0.75) / 1.5; math.Abs(m.Loss-want) > 1e-5 {
		t.Errorf("loss %v, want %v", m.Loss, want)
	}

	bad := filepath.Join(dir, "bad.npz")
	if err := writeBatchWith(bad, []sample{s1, s2}, nil, []int32{0, -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, 1, bad, w0, filepath.Join(dir, "bad", "policy.json"), guards...); err == nil ||
		!strings.Contains(err.Error(), "staleness must be >= 0; sample 1 has -1") {
		t.Errorf("negative staleness: %v, want a refusal naming the sample", err)
	}

	plain := filepath.Join(dir, "plain.npz")
	if err := writeBatch(plain, []sample{s1, s2}); err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, 1, plain, w0, filepath.Join(dir, "plain", "policy.json"), guards...); err == nil || !strings.Contains(err.Error(), "drift guard") {
		t.Errorf("the same gap on a fresh sample: %v, want the drift guard", err)
	}
}
