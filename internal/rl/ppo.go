package rl

import (
	"errors"
	"fmt"
	"math"
)

// PPOParams are the constants of the dual-clip PPO objective (docs/design.md §4).
type PPOParams struct {
	ClipLow  float64 // ρ is clipped below at 1 − ClipLow
	ClipHigh float64 // and above at 1 + ClipHigh
	DualClip float64 // for A < 0, L is bounded below by DualClip·A
	ISCap    float64 // cap of the rollout importance weight exp(logπold − logπrollout)
}

// DefaultPPO is docs/design.md §4's configuration.
func DefaultPPO() PPOParams {
	return PPOParams{ClipLow: 0.2, ClipHigh: 0.28, DualClip: 3.0, ISCap: 2.0}
}

// PPOSample is one selected call: its episode's advantage, its selection
// weight and, per completion token, the log probabilities of the sampled
// token under the policy being trained (θ), the policy that the round
// started from (old) and the rollout engine (as the proxy recorded them).
type PPOSample struct {
	Advantage   float64
	Weight      float64
	LogpTheta   []float64
	LogpOld     []float64
	LogpRollout []float64
}

// PPOResult is the loss of a batch and its gradient.
type PPOResult struct {
	Loss float64
	// Grad[s][t] is ∂Loss/∂logπθ of token t of sample s.
	Grad [][]float64
	// Tokens counts all completion tokens; Clipped those whose value the
	// ratio clip decided (ρ strictly outside the range on the side that
	// the min picks) and the dual clip did not; DualClipped those whose
	// value the dual clip decided (ρA < DualClip·A strictly, A < 0).
	Tokens, Clipped, DualClipped int
	// ClipFraction = Clipped/Tokens, DualClipFraction = DualClipped/Tokens,
	// the definitions trainer.py reports in metrics.json.
	ClipFraction, DualClipFraction float64
}

// PPOLoss computes docs/design.md §4's loss over a batch,
//
//	Loss = −Σ_s weight_s · mean_t(w_t·L_t) / Σ_s weight_s,
//	ρ_t = exp(logπθ − logπold), L_t = min(ρ_t·A, clip(ρ_t, 1−lo, 1+hi)·A),
//	L_t = max(L_t, dual·A) if A < 0, w_t = min(exp(logπold − logπrollout), cap),
//
// and its gradient with respect to every token's logπθ. w_t does not depend
// on θ. The gradient is the subgradient PyTorch's autograd takes for the same
// expression written with clamp, minimum and maximum (trainer.py), so the two
// agree exactly, ties included:
//
//   - clamp passes the gradient when 1−lo ≤ ρ ≤ 1+hi, boundaries included;
//   - minimum/maximum give the gradient to the selected operand and split it
//     in halves on a tie. Inside the clip range ρA and clip(ρ)·A are the same
//     number, so both halves carry ∂(ρA) and the sum is the full gradient;
//     at ρ exactly on a clip boundary this still holds (clamp is inclusive),
//     so a boundary token is treated as unclipped. Strictly outside the range
//     on the side the min selects the gradient is 0;
//   - the dual clip's DualClip·A is a constant: when ρA < DualClip·A the
//     gradient is 0, when ρA = DualClip·A exactly it is half of ∂(ρA).
//
// ∂(ρA)/∂logπθ = ρA, because ∂ρ/∂logπθ = ρ.
func PPOLoss(samples []PPOSample, p PPOParams) (PPOResult, error) {
	if err := p.validate(); err != nil {
		return PPOResult{}, err
	}
	if len(samples) == 0 {
		return PPOResult{}, errors.New("rl: PPO loss of an empty batch")
	}
	var totalWeight float64
	for i, s := range samples {
		n := len(s.LogpTheta)
		switch {
		case n == 0:
			return PPOResult{}, fmt.Errorf("rl: sample %d has no completion tokens", i)
		case len(s.LogpOld) != n || len(s.LogpRollout) != n:
			return PPOResult{}, fmt.Errorf("rl: sample %d: %d θ, %d old and %d rollout logprobs", i, n, len(s.LogpOld), len(s.LogpRollout))
		case !(s.Weight >= 0) || math.IsInf(s.Weight, 0) || math.IsNaN(s.Advantage) || math.IsInf(s.Advantage, 0):
			return PPOResult{}, fmt.Errorf("rl: sample %d: weight %v, advantage %v", i, s.Weight, s.Advantage)
		}
		totalWeight += s.Weight
	}
	if totalWeight <= 0 {
		return PPOResult{}, errors.New("rl: PPO batch weights sum to zero")
	}

	res := PPOResult{Grad: make([][]float64, len(samples))}
	for i, s := range samples {
		n := float64(len(s.LogpTheta))
		// ∂Loss/∂(w_t·L_t) of every token of this sample.
		scale := -s.Weight / totalWeight / n
		var sum float64
		g := make([]float64, len(s.LogpTheta))
		for t := range s.LogpTheta {
			w := math.Min(math.Exp(s.LogpOld[t]-s.LogpRollout[t]), p.ISCap)
			tok := ppoToken(s.LogpTheta[t], s.LogpOld[t], s.Advantage, p)
			sum += w * tok.L
			g[t] = scale * w * tok.dL
			res.Tokens++
			switch {
			case tok.dual:
				res.DualClipped++
			case tok.clip:
				res.Clipped++
			}
		}
		res.Grad[i] = g
		res.Loss -= s.Weight * (sum / n)
	}
	res.Loss /= totalWeight
	res.ClipFraction = float64(res.Clipped) / float64(res.Tokens)
	res.DualClipFraction = float64(res.DualClipped) / float64(res.Tokens)
	return res, nil
}

// ppoTerm is the objective of one token.
type ppoTerm struct {
	L, dL      float64 // L_t and ∂L_t/∂logπθ
	clip, dual bool    // which clip decided L_t (see PPOResult)
}

// ppoToken evaluates the dual-clip objective of one token the way trainer.py's
// ppo_objective does, operation by operation, with autograd's subgradients.
func ppoToken(logpTheta, logpOld, a float64, p PPOParams) ppoTerm {
	return ppoRatio(math.Exp(logpTheta-logpOld), a, p)
}

// ppoRatio is ppoToken for a given ratio ρ, so tests can hit boundaries exactly.
func ppoRatio(rho, a float64, p PPOParams) ppoTerm {
	lo, hi := 1-p.ClipLow, 1+p.ClipHigh
	clipped, dClipped := rho, rho // value and ∂/∂logπθ of clamp(ρ, lo, hi)
	if rho < lo || rho > hi {
		clipped, dClipped = min(max(rho, lo), hi), 0
	}
	x, dx := rho*a, rho*a
	y, dy := clipped*a, dClipped*a
	var t ppoTerm
	switch {
	case x < y:
		t.L, t.dL = x, dx
	case x > y:
		t.L, t.dL = y, dy
		t.clip = true
	default:
		t.L, t.dL = x, (dx+dy)/2
	}
	if a < 0 {
		d := p.DualClip * a
		switch {
		case t.L < d:
			t.L, t.dL, t.dual = d, 0, true
		case t.L == d:
			t.dL /= 2
		}
	}
	t.clip = t.clip && !t.dual
	return t
}

func (p PPOParams) validate() error {
	switch {
	case !(p.ClipLow > 0 && p.ClipLow < 1):
		return fmt.Errorf("rl: PPO clip low %v, want in (0, 1)", p.ClipLow)
	case !(p.ClipHigh > 0) || math.IsInf(p.ClipHigh, 0):
		return fmt.Errorf("rl: PPO clip high %v, want > 0", p.ClipHigh)
	case !(p.DualClip > 1) || math.IsInf(p.DualClip, 0):
		return fmt.Errorf("rl: PPO dual clip %v, want > 1", p.DualClip)
	case !(p.ISCap > 0):
		return fmt.Errorf("rl: PPO importance-weight cap %v, want > 0", p.ISCap)
	}
	return nil
}
