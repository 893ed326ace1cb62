// Command minimal-init writes the minimal harness's initial weights:
//
//	go run ./harnesses/minimal/cmd/minimal-init -out harnesses/minimal/weights/w0/policy.json
//
// The vocabulary is every word the environment and harness can show the
// model plus the special tokens; the actions are the tool names. The weights
// are an "SFT-like" prior: in each situation the oracle's best skills get a
// per-task boost and every skill gets fixed random noise (the mistakes an
// imitation-trained planner makes). The per-task boost is set by bisection on
// the exact success probability (averaged over the training and validation
// init ids) so that tasks start at different success rates strictly between
// 0 and 1, which is what pool selection looks for.
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/episode"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
)

// targets is the intended initial success rate per task (mean 0.314). The
// vision task (6) starts blind: V is zero, so the prior cannot tell the
// marked container and its success is capped at one half until the image
// pathway learns.
var targets = []float64{0.25, 0.2, 0.45, 0.35, 0.2, 0.5, 0.25}

// The toy's image pathway (policy.Vision): 8-pixel patches (16 per camera
// image), one redness feature per band of the scene, scaled so that the
// marked band's feature is about 5 and a round of Adam steps at the
// harness's lr moves its logits by about one.
const (
	patch = 8
	bands = 3
	scale = 8
)

func main() {
	out := flag.String("out", "harnesses/minimal/weights/w0/policy.json", "weights file to write")
	seed := flag.Uint64("seed", 1, "seed of the prior's noise")
	noise := flag.Float64("noise", 1.0, "standard deviation of the prior's per-situation noise")
	finish := flag.Float64("finish-bias", 2.0, "bias of the finish action: the prior's habit of claiming success early")
	flag.Parse()
	p, err := build(*seed, *noise, *finish)
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Save(*out); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("wrote %s: %d tokens, %d actions\n", *out, len(p.Vocab), len(p.Actions))
}

func build(seed uint64, noise, finish float64) (*policy.Policy, error) {
	words := map[string]bool{}
	for _, t := range env.Texts() {
		for _, w := range policy.Words(t) {
			words[w] = true
		}
	}
	for _, r := range []string{"system", "user", "assistant", "tool"} {
		words[r] = true
	}
	for _, s := range slices.Concat(policy.Specials, policy.VisionSpecials) {
		delete(words, s)
	}
	vocab := slices.Concat(policy.Specials, policy.VisionSpecials, slices.Sorted(func(yield func(string) bool) {
		for w := range words {
			if !yield(w) {
				return
			}
		}
	}))
	index := map[string]int{}
	for i, w := range vocab {
		index[w] = i
	}
	f := policy.File{Format: policy.Format, Vocab: vocab, W: make([][]float64, len(vocab))}
	for _, s := range env.Skills {
		f.Actions = append(f.Actions, index[s.Name])
	}
	f.B = make([]float64, len(f.Actions))
	f.Vision = &policy.Vision{Patch: patch, Bands: bands, Scale: scale, V: make([][]float64, bands)}
	for k := range f.Vision.V {
		f.Vision.V[k] = make([]float64, len(f.Actions))
	}
	f.B[len(f.B)-1] = finish
	for i := range f.W {
		f.W[i] = make([]float64, len(f.Actions))
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	for task := range env.NumTasks() {
		for _, s := range env.States(task) {
			row := f.W[index[env.Situation(task, s)]]
			for a := range row {
				row[a] = noise * rng.NormFloat64()
			}
		}
	}
	p, err := policy.New(f)
	if err != nil {
		return nil, err
	}
	for task := range env.NumTasks() {
		beta, got, err := tune(p, task, targets[task])
		if err != nil {
			return nil, err
		}
		fmt.Printf("task %d %-50q boost %.3f success %.3f\n", task, env.TaskName(task), beta, got)
	}
	return p, nil
}

// boost adds delta to the best skills' weights of every situation of task.
func boost(p *policy.Policy, task int, delta float64) {
	for _, s := range env.States(task) {
		id, _ := p.ID(env.Situation(task, s))
		for _, name := range env.Best(task, s) {
			a, _ := p.ActionIndex(name)
			p.W[id][a] += delta
		}
	}
}

// meanSuccess is the exact success probability averaged over init ids 11–49.
// Ids that map to the same initial state share one computation.
func meanSuccess(p *policy.Policy, task int) (float64, error) {
	var sum float64
	byVariant := map[int]float64{}
	for seed := 11; seed <= 49; seed++ {
		v, ok := byVariant[env.Variant(task, seed)]
		if !ok {
			var err error
			if v, err = episode.SuccessProb(p, task, seed, env.DefaultMaxTurns); err != nil {
				return 0, err
			}
			byVariant[env.Variant(task, seed)] = v
		}
		sum += v
	}
	return sum / 39, nil
}

// tune bisects the boost of task's best skills to reach target success.
func tune(p *policy.Policy, task int, target float64) (beta, got float64, err error) {
	lo, hi, cur := 0.0, 8.0, 0.0
	for range 40 {
		mid := (lo + hi) / 2
		boost(p, task, mid-cur)
		cur = mid
		if got, err = meanSuccess(p, task); err != nil {
			return 0, 0, err
		}
		if got < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return cur, got, nil
}
