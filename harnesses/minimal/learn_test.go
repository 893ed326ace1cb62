package minimal_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/episode"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The longer experiment: go test -run TestLearns -args -learn.rounds 6 -learn.groups 12
var (
	learnRounds = flag.Int("learn.rounds", 2, "rounds of the learning test")
	learnGroups = flag.Int("learn.groups", 6, "groups per round of the learning test")
	learnSeeds  = flag.Int("learn.seeds", 3, "independent runs of the learning test")
	// The toy learns with the hyperparameters harness.yaml passes (trainer.py
	// defaults to the LLM values of docs/design.md §4: lr 1e-6, one epoch).
	learnArgs = flag.String("learn.args", "--lr 0.01 --epochs 4", "trainer flags, space separated")
)

const (
	w0       = "weights/w0/policy.json"
	attempts = 6
	maxCalls = 16 // per episode, docs/design.md §4
)

// validate runs every task on the validation init ids 45–49, one episode
// each, and returns the success rate per task.
func validate(p *policy.Policy, rng *rand.Rand) []float64 {
	rates := make([]float64, env.NumTasks())
	for task := range rates {
		for id := 45; id <= 49; id++ {
			e, _ := env.New(task, id)
			out, _ := episode.Run(context.Background(), &episode.Local{Policy: p, Rand: rng}, e, env.DefaultMaxTurns)
			if out.Success {
				rates[task] += 1.0 / 5
			}
		}
	}
	return rates
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// exactVal is the noiseless counterpart of validate's mean.
func exactVal(t *testing.T, p *policy.Policy) float64 {
	var s float64
	for task := range env.NumTasks() {
		for id := 45; id <= 49; id++ {
			v, err := episode.SuccessProb(p, task, id, env.DefaultMaxTurns)
			if err != nil {
				t.Fatal(err)
			}
			s += v
		}
	}
	return s / float64(5*env.NumTasks())
}

// collect runs one round's groups and returns the selected training samples
// and the number of groups with reward diversity.
func collect(t *testing.T, p *policy.Policy, rng *rand.Rand, pool []int, groups int, images string) ([]sample, int) {
	var batch []sample
	diverse := 0
	order := rng.Perm(len(pool))
	for g := range groups {
		task, id := pool[order[g%len(pool)]], 11+rng.IntN(34)
		rewards := make([]float64, attempts)
		calls := make([][]episode.Call, attempts)
		for i := range attempts {
			e, _ := env.New(task, id)
			pl := &episode.Local{Policy: p, Rand: rng}
			out, _ := episode.Run(context.Background(), pl, e, env.DefaultMaxTurns)
			rewards[i], calls[i] = out.Reward, pl.Calls
		}
		// Leave-one-out advantages; a group without diversity teaches nothing.
		var sum float64
		for _, r := range rewards {
			sum += r
		}
		if sum == 0 || sum == attempts {
			continue
		}
		diverse++
		for i, r := range rewards {
			adv := r - (sum-r)/(attempts-1)
			sel := calls[i][:min(len(calls[i]), maxCalls)]
			for _, c := range sel {
				batch = append(batch, sample{prompt: c.Prompt, completion: c.Completion, logprobs: c.Logprobs, adv: adv,
					weight: 1 / float64(len(sel)), images: storeImages(t, images, c.Images)})
			}
		}
	}
	return batch, diverse
}

// trainRound writes batch into rdir and trains weights on it with the
// learning test's flags; it returns the metrics and the new policy.json.
func trainRound(t *testing.T, rdir string, batch []sample, weights, images string, seed uint64) (schemas.TrainerMetrics, string) {
	t.Helper()
	batchPath, out := filepath.Join(rdir, "batch.npz"), filepath.Join(rdir, "out", "policy.json")
	if err := mkdir(rdir); err != nil {
		t.Fatal(err)
	}
	if err := writeBatch(batchPath, batch); err != nil {
		t.Fatal(err)
	}
	m, err := runTrainer(t, 1, batchPath, weights, out, append(strings.Fields(*learnArgs), "--seed", fmt.Sprint(seed), "--images", images)...)
	if err != nil {
		t.Fatal(err)
	}
	return m, out
}

// learn plays the Roundhouse loop in process: validate, select the pool,
// collect groups, compute advantages, train with trainer.py, repeat. It returns validation success before each round and
// after the last.
func learn(t *testing.T, seed uint64, rounds, groups int) (val, exact []float64) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(seed, 7))
	weights := w0
	p, err := policy.Load(weights)
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; ; round++ {
		rates := validate(p, rng)
		val, exact = append(val, mean(rates)), append(exact, exactVal(t, p))
		if round > rounds {
			return val, exact
		}
		var pool []int
		for task, r := range rates {
			if r > 0 && r < 1 {
				pool = append(pool, task)
			}
		}
		if len(pool) == 0 {
			for task := range rates {
				pool = append(pool, task)
			}
		}
		images := filepath.Join(dir, "images")
		batch, diverse := collect(t, p, rng, pool, groups, images)
		if len(batch) == 0 {
			t.Logf("seed %d round %d: no group with reward diversity, weights unchanged", seed, round)
			continue
		}
		m, out := trainRound(t, filepath.Join(dir, fmt.Sprint(round)), batch, weights, images, seed*100+uint64(round))
		t.Logf("seed %d round %d: val %.3f (exact %.3f) pool %v, %d diverse groups, %d samples, loss %.4f clip %.3f dual %.3f mismatch %.2g",
			seed, round, val[len(val)-1], exact[len(exact)-1], pool, diverse, m.Samples, m.Loss, m.ClipFraction, m.DualClipFraction, m.LogprobMismatch)
		if p, err = policy.Load(out); err != nil {
			t.Fatal(err)
		}
		weights = out
	}
}

// TestLearns is the proof that the toy learns in the real loop: validation
// success after the rounds is clearly above the initial one, averaged over
// independent runs (single 30-episode validations are too noisy to compare
// one by one), and the noiseless success rises in every run.
func TestLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the trainer several times")
	}
	needTorch(t)
	var first, last, firstExact, lastExact []float64
	for s := range *learnSeeds {
		val, exact := learn(t, uint64(s+1), *learnRounds, *learnGroups)
		t.Logf("seed %d: validation success per round %.3f, exact %.3f", s+1, val, exact)
		first, last = append(first, val[0]), append(last, val[len(val)-1])
		firstExact, lastExact = append(firstExact, exact[0]), append(lastExact, exact[len(exact)-1])
		if exact[len(exact)-1] < exact[0]+0.1 {
			t.Errorf("seed %d: exact validation success %.3f → %.3f, want a rise of at least 0.1", s+1, exact[0], exact[len(exact)-1])
		}
	}
	t.Logf("mean validation success %.3f → %.3f (exact %.3f → %.3f)", mean(first), mean(last), mean(firstExact), mean(lastExact))
	if mean(last) < mean(first)+0.15 {
		t.Errorf("mean validation success %.3f → %.3f, want a rise of at least 0.15", mean(first), mean(last))
	}
}

// visionTask is the minimal env's task whose answer is only in the image.
const visionTask = 6

// exactTask is the noiseless success of one task on the validation ids.
func exactTask(t *testing.T, p *policy.Policy, task int) float64 {
	var s float64
	for id := 45; id <= 49; id++ {
		v, err := episode.SuccessProb(p, task, id, env.DefaultMaxTurns)
		if err != nil {
			t.Fatal(err)
		}
		s += v
	}
	return s / 5
}

// TestLearnsToSee trains on the vision task alone: its success rises round
// over round and ends above one half, the most a policy blind to the camera
// image can reach (the marked container is a coin toss without it). The
// trainer sees the images the episodes sent, through --images.
func TestLearnsToSee(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the trainer several times")
	}
	needTorch(t)
	rounds := max(*learnRounds, 3)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 7))
	weights := w0
	p, err := policy.Load(weights)
	if err != nil {
		t.Fatal(err)
	}
	images := filepath.Join(dir, "images")
	succ := []float64{exactTask(t, p, visionTask)}
	for round := 1; round <= rounds; round++ {
		batch, _ := collect(t, p, rng, []int{visionTask}, 12, images)
		m, out := trainRound(t, filepath.Join(dir, fmt.Sprint(round)), batch, weights, images, uint64(round))
		if p, err = policy.Load(out); err != nil {
			t.Fatal(err)
		}
		weights = out
		succ = append(succ, exactTask(t, p, visionTask))
		t.Logf("round %d: %d samples, mismatch %.2g, vision task success %.3f → %.3f, V %v", round, m.Samples, m.LogprobMismatch, succ[round-1], succ[round], p.Vision.V)
	}
	if succ[rounds] <= 0.5 || succ[rounds] < succ[0]+0.2 {
		t.Errorf("vision task success per round %.3f: want a rise of 0.2 and an end above 0.5", succ)
	}
}
