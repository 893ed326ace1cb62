package minimal_test

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// denseWeights writes w0 with seeded noise on every W row and on V: the
// state of a trained model, where every token and the image matter (w0's
// prior leaves most rows and V at zero, so dropping a token or an image
// would change nothing and prove nothing).
func denseWeights(t *testing.T, dir string) (*policy.Policy, string) {
	t.Helper()
	p, err := policy.Load(w0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for _, row := range p.W {
		for a := range row {
			row[a] += 0.5 * rng.NormFloat64()
		}
	}
	for _, row := range p.Vision.V {
		for a := range row {
			row[a] = 0.5 * rng.NormFloat64()
		}
	}
	path := filepath.Join(dir, "dense", "policy.json")
	if err := mkdir(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	return p, path
}

// visionBatch collects groups of the vision task under p into batch.npz,
// its images into dir/images.
func visionBatch(t *testing.T, p *policy.Policy, dir string, edit func([]int) []int) string {
	t.Helper()
	batch, _ := collect(t, p, rand.New(rand.NewPCG(3, 3)), []int{visionTask}, 6, filepath.Join(dir, "images"))
	if len(batch) == 0 {
		t.Fatal("no group with reward diversity")
	}
	if edit != nil {
		for i := range batch {
			batch[i].prompt = edit(batch[i].prompt)
		}
	}
	path := filepath.Join(dir, "batch.npz")
	if err := writeBatch(path, batch); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTrainerSeesImages: with the episodes' images the trainer's π_old
// matches what the model server recorded; withholding them (the ablation,
// --drop-images: what a text-only pipeline does to a VLM's batch) trips the
// drift guard before any update; a batch with images but no --images, an
// image whose content is not its name, and an image the processor would
// expand to other placeholders are refused.
func TestTrainerSeesImages(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	p, weights := denseWeights(t, dir)
	batch := visionBatch(t, p, dir, nil)
	images := filepath.Join(dir, "images")
	const limit = "0.001" // harness.yaml's
	m, err := runTrainer(t, 1, batch, weights, filepath.Join(dir, "ok", "policy.json"), "--images", images, "--drift-limit", limit)
	if err != nil {
		t.Fatal(err)
	}
	if m.LogprobMismatch > 1e-6 || m.LogprobMismatchMax > 1e-5 {
		t.Fatalf("with the images: mismatch mean %g max %g, want ~0", m.LogprobMismatch, m.LogprobMismatchMax)
	}

	out := filepath.Join(dir, "ablation", "policy.json")
	_, err = runTrainer(t, 1, batch, weights, out, "--images", images, "--drop-images", "--drift-limit", limit)
	if err == nil || !strings.Contains(err.Error(), schemas.TrainerDriftGuard) || !strings.Contains(err.Error(), "first: sample ") {
		t.Fatalf("withheld images: want the drift guard naming samples, got %v", err)
	}
	if _, serr := os.Stat(out); serr == nil {
		t.Error("the guard fired, yet weights were written")
	}

	alone := filepath.Join(dir, "alone")
	if err := mkdir(alone); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(batch)
	os.WriteFile(filepath.Join(alone, "batch.npz"), b, 0o644)
	if _, err := runTrainer(t, 1, filepath.Join(alone, "batch.npz"), weights, filepath.Join(dir, "x", "policy.json")); err == nil || !strings.Contains(err.Error(), "pass --images") {
		t.Errorf("images without --images: %v", err)
	}
	entries, err := os.ReadDir(images)
	if err != nil || len(entries) == 0 {
		t.Fatalf("images: %v", err)
	}
	forged := filepath.Join(dir, "forged")
	if err := mkdir(forged); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(images, e.Name()))
		os.WriteFile(filepath.Join(forged, e.Name()), append(b, 0), 0o644)
	}
	if _, err := runTrainer(t, 1, batch, weights, filepath.Join(dir, "y", "policy.json"), "--images", forged); err == nil ||
		!strings.Contains(err.Error(), "refused") {
		t.Errorf("forged image: %v", err)
	}

	// One placeholder fewer per image: the server's processor made more.
	pad, _ := p.ID(policy.ImagePad)
	short := visionBatch(t, p, filepath.Join(dir, "short"), func(ids []int) []int {
		for i, id := range ids {
			if id == pad {
				return append(append([]int{}, ids[:i]...), ids[i+1:]...)
			}
		}
		return ids
	})
	if _, err := runTrainer(t, 1, short, weights, filepath.Join(dir, "z", "policy.json"), "--images", filepath.Join(dir, "short", "images")); err == nil ||
		!strings.Contains(err.Error(), "placeholder tokens") || !strings.Contains(err.Error(), "sample 0 image 0") {
		t.Errorf("placeholder count: %v", err)
	}
}

// TestTrainerCatchesTemplateChange: a trainer that re-renders the chat with
// a template differing from the model server's in one detail — tool
// results under the role "user" instead of "tool", a real difference
// between chat templates — computes π_old on other tokens than the model
// saw, and the drift guard stops the round before it trains on them.
func TestTrainerCatchesTemplateChange(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	p, weights := denseWeights(t, dir)
	imStart, _ := p.ID(policy.ImStart)
	tool, _ := p.ID("tool")
	user, _ := p.ID("user")
	changed := 0
	batch := visionBatch(t, p, dir, func(ids []int) []int {
		out := append([]int{}, ids...)
		for i := 1; i < len(out); i++ {
			if out[i-1] == imStart && out[i] == tool {
				out[i] = user
				changed++
			}
		}
		return out
	})
	if changed == 0 {
		t.Fatal("no tool turn to re-template")
	}
	_, err := runTrainer(t, 1, batch, weights, filepath.Join(dir, "out", "policy.json"), "--images", filepath.Join(dir, "images"), "--drift-limit", "0.001")
	if err == nil || !strings.Contains(err.Error(), schemas.TrainerDriftGuard) {
		t.Fatalf("re-templated prompts: want the drift guard, got %v", err)
	}
	// The same batch rendered as the server did passes: the guard fired on
	// the template, not on the weights.
	same := visionBatch(t, p, filepath.Join(dir, "same"), nil)
	m, err := runTrainer(t, 1, same, weights, filepath.Join(dir, "same", "out", "policy.json"), "--images", filepath.Join(dir, "same", "images"), "--drift-limit", "0.001")
	if err != nil || math.IsNaN(m.LogprobMismatch) || m.LogprobMismatch > 1e-6 {
		t.Fatalf("server-rendered batch: %+v %v", m, err)
	}
}
