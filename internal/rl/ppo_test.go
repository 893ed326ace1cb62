package rl

import (
	"math"
	"strings"
	"testing"
)

// TestPPORatio checks one token's objective and ∂L/∂logπθ (= ∂L/∂ρ · ρ)
// against values worked by hand with ε 0.2/0.28 and dual clip 3.
func TestPPORatio(t *testing.T) {
	p := DefaultPPO()
	for _, c := range []struct {
		name       string
		rho, a     float64
		L, dL      float64
		clip, dual bool
	}{
		{"inside the range, A > 0", 1.1, 1, 1.1, 1.1, false, false},
		{"above 1+0.28, A > 0: clipped", 1.5, 1, 1.28, 0, true, false},
		{"below 1−0.2, A > 0: ρA is the min", 0.5, 1, 0.5, 0.5, false, false},
		{"below 1−0.2, A < 0: clipped", 0.5, -1, -0.8, 0, true, false},
		{"above 1+0.28, A < 0: ρA is the min", 1.5, -1, -1.5, -1.5, false, false},
		{"ρA below 3A: dual clip", 5, -1, -3, 0, false, true},
		{"ρA below 3A, A = −0.5: dual clip", 5, -0.5, -1.5, 0, false, true},
		{"ρA above 3A: dual clip inactive", 2, -0.5, -1, -1, false, false},
		{"zero advantage", 7, 0, 0, 0, false, false},
		// Ties take PyTorch's subgradients: clamp is inclusive, so a ratio on
		// a clip boundary keeps its full gradient; on the dual-clip boundary
		// maximum splits the gradient between ρA and the constant 3A.
		{"tie at 1+0.28, A > 0", 1.28, 1, 1.28, 1.28, false, false},
		{"tie at 1−0.2, A < 0", 0.8, -1, -0.8, -0.8, false, false},
		{"tie at the dual clip", 3, -1, -3, -1.5, false, false},
	} {
		got := ppoRatio(c.rho, c.a, p)
		if math.Abs(got.L-c.L) > 1e-12 || math.Abs(got.dL-c.dL) > 1e-12 || got.clip != c.clip || got.dual != c.dual {
			t.Errorf("%s: ρ %v A %v: got %+v, want L %v dL %v clip %v dual %v", c.name, c.rho, c.a, got, c.L, c.dL, c.clip, c.dual)
		}
	}
}

// TestPPOLossByHand: a two-sample batch with every branch in play, worked on
// paper.
func TestPPOLossByHand(t *testing.T) {
	ln := math.Log
	samples := []PPOSample{{
		// A = 1, weight 1. Token 0: ρ = 1.5 is clipped to 1.28 and the
		// rollout logprob 1 below π_old gives w = min(e, 2) = 2 (the cap).
		// Token 1 is forced: ρ = 1, w = 1, L = A = 1.
		// mean_t(w·L) = (2·1.28 + 1)/2 = 1.78.
		Advantage: 1, Weight: 1,
		LogpTheta:   []float64{ln(1.5), 0},
		LogpOld:     []float64{0, 0},
		LogpRollout: []float64{-1, 0},
	}, {
		// A = −1, weight 0.5. Token 0: ρ = 5, ρA = −5 < 3A: dual clip, L = −3,
		// w = 1. Token 1: ρ = 1.5, ρA = −1.5 is below 1.28·A, so unclipped,
		// w = exp(ln 1.25) = 1.25. Token 2 forced: L = −1, w = 1.
		// mean_t(w·L) = (−3 − 1.875 − 1)/3 = −5.875/3.
		Advantage: -1, Weight: 0.5,
		LogpTheta:   []float64{-1 + ln(5), ln(1.5), 0},
		LogpOld:     []float64{-1, 0, 0},
		LogpRollout: []float64{-1, -ln(1.25), 0},
	}}
	got, err := PPOLoss(samples, DefaultPPO())
	if err != nil {
		t.Fatal(err)
	}
	// Loss = −(1·1.78 + 0.5·(−5.875/3)) / 1.5.
	if want := -(1.78 - 0.5*5.875/3) / 1.5; math.Abs(got.Loss-want) > 1e-12 {
		t.Errorf("loss %v, want %v", got.Loss, want)
	}
	// ∂Loss/∂logπθ = −weight/Σweight/n · w · ∂L: sample 1 has factor −1/3,
	// sample 2 −1/9; clipped and dual-clipped tokens get 0.
	want := [][]float64{
		{0, -1.0 / 3},
		{0, -1.0 / 9 * 1.25 * -1.5, -1.0 / 9 * -1},
	}
	for s := range want {
		for k := range want[s] {
			if math.Abs(got.Grad[s][k]-want[s][k]) > 1e-12 {
				t.Errorf("grad[%d][%d] = %v, want %v", s, k, got.Grad[s][k], want[s][k])
			}
		}
	}
	if got.Tokens != 5 || got.Clipped != 1 || got.DualClipped != 1 || got.ClipFraction != 0.2 || got.DualClipFraction != 0.2 {
		t.Errorf("counts %+v", got)
	}
}

// TestPPOLossOnPolicy: at θ = θ_old with the rollout equal to π_old the loss
// is −Σ weight·A / Σ weight and every token's gradient is −weight·A/(Σ weight·n).
func TestPPOLossOnPolicy(t *testing.T) {
	samples := []PPOSample{
		{Advantage: 0.6, Weight: 0.25, LogpTheta: []float64{-0.3, 0}, LogpOld: []float64{-0.3, 0}, LogpRollout: []float64{-0.3, 0}},
		{Advantage: -0.4, Weight: 1, LogpTheta: []float64{-2}, LogpOld: []float64{-2}, LogpRollout: []float64{-2}},
	}
	got, err := PPOLoss(samples, DefaultPPO())
	if err != nil {
		t.Fatal(err)
	}
	if want := -(0.25*0.6 - 0.4) / 1.25; math.Abs(got.Loss-want) > 1e-12 {
		t.Errorf("loss %v, want %v", got.Loss, want)
	}
	if g := got.Grad; math.Abs(g[0][0]+0.25*0.6/1.25/2) > 1e-12 || g[0][0] != g[0][1] || math.Abs(g[1][0]-0.4/1.25) > 1e-12 {
		t.Errorf("grad %v", g)
	}
	if got.Clipped != 0 || got.DualClipped != 0 {
		t.Errorf("counts %+v", got)
	}
}

func TestPPOLossRejects(t *testing.T) {
	ok := PPOSample{Advantage: 1, Weight: 1, LogpTheta: []float64{0}, LogpOld: []float64{0}, LogpRollout: []float64{0}}
	for _, c := range []struct {
		name    string
		samples []PPOSample
		p       PPOParams
		want    string
	}{
		{"empty", nil, DefaultPPO(), "empty batch"},
		{"no tokens", []PPOSample{{Weight: 1}}, DefaultPPO(), "no completion tokens"},
		{"ragged", []PPOSample{{Weight: 1, LogpTheta: []float64{0}, LogpOld: []float64{0, 0}, LogpRollout: []float64{0}}}, DefaultPPO(), "rollout logprobs"},
		{"negative weight", []PPOSample{ok, {Weight: -1, LogpTheta: []float64{0}, LogpOld: []float64{0}, LogpRollout: []float64{0}}}, DefaultPPO(), "weight -1"},
		{"zero weights", []PPOSample{{Weight: 0, LogpTheta: []float64{0}, LogpOld: []float64{0}, LogpRollout: []float64{0}}}, DefaultPPO(), "sum to zero"},
		{"bad params", []PPOSample{ok}, PPOParams{ClipLow: 0.2, ClipHigh: 0.28, DualClip: 1, ISCap: 2}, "dual clip"},
	} {
		if _, err := PPOLoss(c.samples, c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}
