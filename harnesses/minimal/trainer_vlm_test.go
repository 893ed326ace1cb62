package minimal_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Token ids of the fake vision-language model (vocabulary 16): 0-11 text,
// then Qwen2.5-VL's <|vision_start|>, <|image_pad|> (config.image_token_id)
// and <|vision_end|>.
const (
	visionStart = 12
	imagePad    = 13
	visionEnd   = 14
)

// fakeVLM writes a vision-language model directory for
// testdata/fake_transformers as a servable Qwen2.5-VL directory looks:
// config.json with vision_config, processor, tokenizer and chat template
// files. The processor's pixel bounds keep the test images small: a 56×56
// image is a 4×4 patch grid, 4 image tokens after the 2×2 merge.
func fakeVLM(t *testing.T, dir string, seed int) string {
	t.Helper()
	return fakeVLMOf(t, dir, seed, "")
}

// fakeVLMOf is fakeVLM with extra config.json fields (`"key": value, `).
func fakeVLMOf(t *testing.T, dir string, seed int, extra string) string {
	t.Helper()
	if err := mkdir(dir); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"config.json": fmt.Sprintf(`{`+extra+`"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
 "vocab_size": 16, "hidden_size": 6, "seed": %d, "image_token_id": %d, "vision_start_token_id": %d,
 "vision_end_token_id": %d, "vision_config": {"patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2, "hidden_size": 8}}`,
			seed, imagePad, visionStart, visionEnd),
		"preprocessor_config.json": `{"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
 "min_pixels": 3136, "max_pixels": 12544, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}`,
		"video_preprocessor_config.json": `{"video_processor_type": "Qwen2VLVideoProcessor"}`,
		"chat_template.json":             `{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"}`,
		"tokenizer.json":                 `{"fake": true}`,
		"tokenizer_config.json":          `{"model_max_length": 32768}`,
		"generation_config.json":         `{"temperature": 1.0}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Pixel modes of writeImage.
const (
	opaque  = iota // an RGB PNG
	alpha          // an RGBA PNG, each pixel fully transparent or fully opaque
	onWhite        // the alpha image composited onto white, as an RGB PNG
)

// writeImage writes a w×h PNG of seeded random pixels into dir under its
// blob name <sha256>.png and returns the name.
func writeImage(t *testing.T, dir string, w, h int, seed int64, mode int) string {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			a := uint8(255)
			if mode != opaque {
				a = uint8(255 * rng.Intn(2))
			}
			c := color.NRGBA{uint8(rng.Intn(256)), uint8(rng.Intn(256)), uint8(rng.Intn(256)), a}
			if mode == onWhite {
				if a == 0 {
					c = color.NRGBA{255, 255, 255, 255}
				}
				c.A = 255
			}
			img.SetNRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return putBlob(t, dir, buf.Bytes())
}

// imagePrompt is text, then per image <|vision_start|> n×<|image_pad|>
// <|vision_end|> (the ids vLLM records), then more text.
func imagePrompt(head []int, pads []int, tail ...int) []int {
	p := append([]int(nil), head...)
	for _, n := range pads {
		p = append(p, visionStart)
		for range n {
			p = append(p, imagePad)
		}
		p = append(p, visionEnd)
	}
	return append(p, tail...)
}

// runTrainerPy runs trainer.py --model hf as one plain process with the
// fake transformers and returns its exit code and output.
func runTrainerPy(t *testing.T, args ...string) (int, string) {
	t.Helper()
	fake, err := filepath.Abs(filepath.Join("testdata", "fake_transformers"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, append([]string{"trainer.py", "--model", "hf"}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+fake, "OMP_NUM_THREADS=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestTrainerVLM runs the vision-language path of trainer.py on the fake
// Qwen2.5-VL (testdata/fake_transformers) with one rank and two: text-only
// samples and samples with images give the loss and per-token gradients of
// rl.PPOLoss, the same logprobs on either rank count and in micro-batches
// of several samples; the images change the logprobs (--drop-images gives
// others); a training step with 1 and 2 ranks (micro-batches of 2, and of 1
// with gradient checkpointing) moves the model the same way and leaves a
// servable directory that loads again as --weights-in.
func TestTrainerVLM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torchrun several times")
	}
	needTorch(t)
	dir := t.TempDir()
	old := fakeVLM(t, filepath.Join(dir, "old"), 1)
	theta := fakeVLM(t, filepath.Join(dir, "theta"), 2)
	images := filepath.Join(dir, "images")
	if err := mkdir(images); err != nil {
		t.Fatal(err)
	}

	// Text-only calls on a vision-language model.
	text := []sample{
		{[]int{1, 2}, []int{3}, []float64{-4}, 1, 1, nil},
		{[]int{4, 5}, []int{6, 7}, []float64{-1.5, -0.5}, -1, 0.5, nil},
		{[]int{1, 6, 2}, []int{5, 3, 0, 9}, []float64{-2, -6, -0.1, -3}, 0.6, 0.25, nil},
	}
	textPath := filepath.Join(dir, "text.npz")
	if err := writeBatch(textPath, text); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2} {
		checkAgainstGo(t, fmt.Sprintf("text-only, %d ranks", n), text, hfEvaluate(t, n, textPath, old, theta))
	}

	// Calls with images: a 56×56 image is 4 image tokens, 84×56 is 6; one
	// call has two images (one repeated from another call), one none, one
	// a partly transparent RGBA image.
	a := writeImage(t, images, 56, 56, 1, opaque)
	b := writeImage(t, images, 84, 56, 2, opaque)
	c := writeImage(t, images, 56, 56, 3, alpha)
	withImages := []sample{
		{imagePrompt([]int{1}, []int{4}, 2), []int{3, 5}, []float64{-2, -1}, 1, 1, []string{a}},
		{imagePrompt([]int{4}, []int{6, 4}, 5), []int{6}, []float64{-2.5}, -1, 0.5, []string{b, a}},
		{[]int{1, 2}, []int{7}, []float64{-1}, 0.5, 0.5, nil},
		{imagePrompt([]int{8}, []int{4}), []int{2, 2}, []float64{-3, -0.5}, -0.3, 0.25, []string{c}},
	}
	imgPath := filepath.Join(dir, "images.npz")
	if err := writeBatch(imgPath, withImages); err != nil {
		t.Fatal(err)
	}
	var first hfEval
	for _, n := range []int{1, 2} {
		got := hfEvaluate(t, n, imgPath, old, theta, "--images", images)
		checkAgainstGo(t, fmt.Sprintf("images, %d ranks", n), withImages, got)
		if n == 1 {
			first = got
			continue
		}
		for i := range got.LogpTheta {
			if got.LogpTheta[i] != first.LogpTheta[i] || got.LogpOld[i] != first.LogpOld[i] {
				t.Errorf("images: token %d: logprobs differ between 1 and 2 ranks", i)
			}
		}
	}
	// Several calls per forward: padded ids, their images in one
	// pixel_values; the same logprobs up to float32 rounding.
	micro := hfEvaluate(t, 1, imgPath, old, theta, "--images", images, "--micro-batch", "3")
	for i := range micro.LogpOld {
		if math.Abs(micro.LogpOld[i]-first.LogpOld[i]) > 1e-6 || math.Abs(micro.LogpTheta[i]-first.LogpTheta[i]) > 1e-6 {
			t.Errorf("token %d: micro-batch 3 gives log π %v/%v, one call per forward %v/%v",
				i, micro.LogpOld[i], micro.LogpTheta[i], first.LogpOld[i], first.LogpTheta[i])
		}
	}
	// The same weights as a model without logits_to_keep (the fake's
	// Qwen2-VL): all logits computed, the same logprobs.
	oldV2 := fakeVLM(t, filepath.Join(dir, "old-qwen2vl"), 1)
	cfg, err := os.ReadFile(filepath.Join(oldV2, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.Replace(cfg, []byte(`"qwen2_5_vl"`), []byte(`"qwen2_vl"`), 1)
	if err := os.WriteFile(filepath.Join(oldV2, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	all := hfEvaluate(t, 1, imgPath, oldV2, oldV2, "--images", images, "--micro-batch", "3")
	for i := range all.LogpOld {
		if math.Abs(all.LogpOld[i]-micro.LogpOld[i]) > 1e-9 {
			t.Errorf("token %d: log π_old %v from all logits, %v from the kept ones", i, all.LogpOld[i], micro.LogpOld[i])
		}
	}
	// The images matter: without pixels (the ablation) the calls with
	// images get other logprobs, the call without the same.
	dropped := hfEvaluate(t, 1, imgPath, old, theta, "--drop-images")
	k := 0
	for s, smp := range withImages {
		for range smp.completion {
			diff := math.Abs(dropped.LogpOld[k] - first.LogpOld[k])
			if len(smp.images) > 0 && diff < 1e-4 {
				t.Errorf("sample %d token %d: log π_old %v with its images and %v without: the images made no difference",
					s, k, first.LogpOld[k], dropped.LogpOld[k])
			}
			if len(smp.images) == 0 && diff != 0 {
				t.Errorf("sample %d (no images) token %d: log π_old %v, %v with --drop-images", s, k, first.LogpOld[k], dropped.LogpOld[k])
			}
			k++
		}
	}

	// RGBA is composited onto white before the processor, as vLLM does:
	// the same call with c's white-backed twin gets the same logprobs.
	white := writeImage(t, images, 56, 56, 3, onWhite)
	twin := append([]sample(nil), withImages...)
	twin[3].images = []string{white}
	twinPath := filepath.Join(dir, "twin.npz")
	if err := writeBatch(twinPath, twin); err != nil {
		t.Fatal(err)
	}
	tw := hfEvaluate(t, 1, twinPath, old, theta, "--images", images)
	for i := range tw.LogpOld {
		if math.Abs(tw.LogpOld[i]-first.LogpOld[i]) > 1e-12 {
			t.Errorf("token %d: log π_old %v with the RGBA image, %v with it composited on white", i, first.LogpOld[i], tw.LogpOld[i])
		}
	}

	// Training: one step at θ = θ_old, on 1 rank in micro-batches of 2 and
	// on 2 ranks one call at a time with gradient checkpointing.
	var after []hfEval
	for _, run := range []struct {
		n    int
		args []string
	}{
		{1, []string{"--micro-batch", "2"}},
		{2, []string{"--micro-batch", "1", "--gradient-checkpointing", "on"}},
	} {
		out := filepath.Join(dir, fmt.Sprintf("out%d", run.n))
		metrics := filepath.Join(dir, fmt.Sprintf("metrics%d.json", run.n))
		args := append([]string{"--batch", imgPath, "--images", images, "--weights-in", old, "--weights-out", out,
			"--metrics-out", metrics, "--lr", "0.002", "--epochs", "1"}, run.args...)
		if err := runHF(t, run.n, args...); err != nil {
			t.Fatal(err)
		}
		// A directory the next round's vLLM serves: config and weights,
		// tokenizer, processor and chat template, byte for byte where they
		// came from --weights-in.
		for _, f := range []string{"config.json", "model.pt", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
			"preprocessor_config.json", "video_preprocessor_config.json", "chat_template.json"} {
			got, err := os.ReadFile(filepath.Join(out, f))
			if err != nil {
				t.Errorf("%d ranks: output lacks %s: %v", run.n, f, err)
				continue
			}
			if want, err := os.ReadFile(filepath.Join(old, f)); err == nil && f != "config.json" && !bytes.Equal(got, want) {
				t.Errorf("%d ranks: %s differs from --weights-in's:\n%s\n%s", run.n, f, got, want)
			}
		}
		m := readMetrics(t, metrics)
		want := goPPO(t, withImages, first.LogpOld, first.LogpOld)
		if m.Steps != 1 || m.Samples != 4 || m.Tokens != 6 || math.Abs(m.Loss-want.Loss) > 1e-6 || math.Abs(m.MeanRatio-1) > 1e-12 {
			t.Errorf("%d ranks: metrics %+v, Go loss %v", run.n, m, want.Loss)
		}
		// The output loads again as pi_old.
		ev := hfEvaluate(t, 1, imgPath, out, old, "--images", images)
		if ev.LogpOld[0] <= first.LogpOld[0] {
			t.Errorf("%d ranks: positive advantage: log π %.6f → %.6f, want a rise", run.n, first.LogpOld[0], ev.LogpOld[0])
		}
		if ev.LogpOld[2] >= first.LogpOld[2] {
			t.Errorf("%d ranks: negative advantage: log π %.6f → %.6f, want a fall", run.n, first.LogpOld[2], ev.LogpOld[2])
		}
		t.Logf("%d ranks: log π(positive) %.6f → %.6f, log π(negative) %.6f → %.6f",
			run.n, first.LogpOld[0], ev.LogpOld[0], first.LogpOld[2], ev.LogpOld[2])
		after = append(after, ev)
	}
	for i := range after[0].LogpOld {
		// float32 parameters: agreement to rounding, relative to the value.
		if math.Abs(after[0].LogpOld[i]-after[1].LogpOld[i]) > 1e-5*math.Max(1, math.Abs(after[0].LogpOld[i])) {
			t.Errorf("token %d after training: log π %v with 1 rank, %v with 2", i, after[0].LogpOld[i], after[1].LogpOld[i])
		}
	}
}

// TestTrainerVLMRefuses: inputs the vision-language path must not train on
// end with exit status 2 and a message naming the input.
func TestTrainerVLMRefuses(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	vlm := fakeVLM(t, filepath.Join(dir, "vlm"), 1)
	images := filepath.Join(dir, "images")
	if err := mkdir(images); err != nil {
		t.Fatal(err)
	}
	a := writeImage(t, images, 56, 56, 1, opaque) // 4 image tokens
	b := writeImage(t, images, 84, 56, 2, opaque) // 6
	good := sample{imagePrompt([]int{1}, []int{4}, 2), []int{3}, []float64{-1}, 1, 1, []string{a}}
	batch := func(name string, ss ...sample) string {
		p := filepath.Join(dir, name+".npz")
		if err := writeBatch(p, ss); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noProc := fakeVLM(t, filepath.Join(dir, "noproc"), 1)
	if err := os.Remove(filepath.Join(noProc, "preprocessor_config.json")); err != nil {
		t.Fatal(err)
	}
	textModel := fakeHFModel(t, filepath.Join(dir, "text"), 1)
	// A file under a's name holding b's bytes: not the picture the model saw.
	swapped := filepath.Join(dir, "swapped")
	if err := mkdir(swapped); err != nil {
		t.Fatal(err)
	}
	bBytes, err := os.ReadFile(filepath.Join(images, b))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(swapped, a), bBytes, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name    string
		weights string
		batch   string
		images  string
		want    []string
	}{
		{"placeholder count", vlm,
			batch("count", good, sample{imagePrompt([]int{4}, []int{6, 3}, 5), []int{6}, []float64{-1}, -1, 1, []string{b, a}}),
			images, []string{"sample 1: image 1 (" + a + ") has 3 placeholder tokens", "makes 4"}},
		{"images without placeholders", vlm,
			batch("runs", good, sample{[]int{4, 5}, []int{6}, []float64{-1}, -1, 1, []string{a}}),
			images, []string{"sample 1: its prompt has 0 runs of image tokens", "carried 1 images"}},
		// A completion holding an image token: the forward would fail on
		// features that no longer match the image tokens.
		{"image token in a completion", vlm,
			batch("gen", good, sample{imagePrompt([]int{4}, []int{4}, 5), []int{6, imagePad, 7}, []float64{-1, -1, -1}, -1, 1, []string{a}}),
			images, []string{"sample 1: its completion holds 1 image tokens", "first at completion position 1", "leave the call out of the batch"}},
		{"no processor files", noProc, batch("noproc", good), images,
			[]string{"weights " + noProc + ": config.json declares a vision-language model", "lacks preprocessor_config.json"}},
		// The text model's vocabulary has 10 ids: the placeholders are
		// beyond it, but the images alone must be refused.
		{"text-only model", textModel, batch("textmodel", sample{[]int{1, 2}, []int{3}, []float64{-1}, 1, 1, []string{a}},
			sample{[]int{4}, []int{5}, []float64{-1}, -1, 1, []string{b}}), images,
			[]string{"weights " + textModel + ": config.json declares a text-only model but the batch carries 2 images"}},
		{"image not its name", vlm, batch("swapped", good), swapped,
			[]string{"image " + filepath.Join(swapped, a) + " of sample 0: its content hashes to"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := runTrainerPy(t, "--batch", c.batch, "--images", c.images, "--weights-in", c.weights,
				"--weights-out", filepath.Join(dir, "out-"+c.name), "--metrics-out", filepath.Join(dir, "m.json"))
			if code != 2 {
				t.Errorf("exit %d, want 2:\n%s", code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "out-"+c.name)); err == nil {
				t.Error("a refused run wrote --weights-out")
			}
		})
	}
}

// TestTrainerHFMasterWeights trains the fake Qwen2.5-VL, its weights
// bfloat16 values as in a real checkpoint, in bfloat16 at a learning rate
// whose updates are far below a bfloat16 step (AdamW moves each weight by
// about lr = 1e-5; bfloat16's step is 2^-8 of the weight): the trainer
// steps float32 master weights and saves them, so the update survives (on
// bfloat16 parameters it rounds away and log π stays put), with one rank
// and two alike; pi_old and pi_theta are the same bfloat16 model at the step.
func TestTrainerHFMasterWeights(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torchrun several times")
	}
	needTorch(t)
	dir := t.TempDir()
	old := fakeVLMOf(t, filepath.Join(dir, "old"), 1, `"init_dtype": "bfloat16", `)
	images := filepath.Join(dir, "images")
	if err := mkdir(images); err != nil {
		t.Fatal(err)
	}
	a := writeImage(t, images, 56, 56, 1, opaque)
	train := []sample{
		{imagePrompt([]int{1}, []int{4}, 2), []int{3}, []float64{-2}, 1, 1, []string{a}},
		{[]int{4, 5}, []int{6}, []float64{-2}, -1, 1, nil},
	}
	trainPath := filepath.Join(dir, "train.npz")
	if err := writeBatch(trainPath, train); err != nil {
		t.Fatal(err)
	}
	f32 := []string{"--images", images, "--torch-dtype", "float32"}
	before := hfEvaluate(t, 1, trainPath, old, old, f32...)
	// step trains once and returns how far log π of the two tokens moved,
	// evaluated in float32.
	step := func(n int, dtype string) [2]float64 {
		out := filepath.Join(dir, fmt.Sprintf("out-%s-%d", dtype, n))
		metrics := filepath.Join(dir, fmt.Sprintf("metrics-%s-%d.json", dtype, n))
		if err := runHF(t, n, "--batch", trainPath, "--images", images, "--weights-in", old, "--weights-out", out,
			"--metrics-out", metrics, "--lr", "1e-5", "--torch-dtype", dtype); err != nil {
			t.Fatal(err)
		}
		m := readMetrics(t, metrics)
		if m.Steps != 1 || m.MeanRatio != 1 {
			t.Errorf("%s, %d ranks: %d steps, mean ratio %v: want 1 step at ratio exactly 1", dtype, n, m.Steps, m.MeanRatio)
		}
		ev := hfEvaluate(t, 1, trainPath, out, out, f32...)
		d := [2]float64{ev.LogpOld[0] - before.LogpOld[0], ev.LogpOld[1] - before.LogpOld[1]}
		t.Logf("%s, %d ranks: log π(positive) %+.4g, log π(negative) %+.4g", dtype, n, d[0], d[1])
		return d
	}
	// The same step in float32 throughout is the reference: bfloat16
	// compute changes the gradients a little, losing the update changes
	// the result entirely (measured: positive token +0.0068 instead of
	// +0.054, negative -5e-6 instead of -1.5e-4).
	want := step(1, "float32")
	if want[0] <= 0 || want[1] >= 0 {
		t.Fatalf("float32: log π moved by %g (positive advantage) and %g (negative)", want[0], want[1])
	}
	for _, n := range []int{1, 2} {
		got := step(n, "bfloat16")
		for i := range got {
			if math.Abs(got[i]-want[i]) > 0.2*math.Abs(want[i]) {
				t.Errorf("bfloat16, %d ranks: token %d: log π moved %g, in float32 %g: the update was lost", n, i, got[i], want[i])
			}
		}
	}
}

// TestTrainerVLMFSDPStandin runs --parallel fsdp with 2 ranks through
// testdata/fsdp_standin.py, a stand-in with FSDP's collectives (one per
// forward, gradients averaged over the ranks after every backward, unused
// parameters included), since torch 1.13 here cannot run FSDP itself. Three
// calls, two with images, split 2/1 over the ranks in micro-batches of one:
// every rank runs as many forwards as the other, and two epochs of
// training end where one plain rank does.
func TestTrainerVLMFSDPStandin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torchrun several times")
	}
	needTorch(t)
	dir := t.TempDir()
	old := fakeVLM(t, filepath.Join(dir, "old"), 1)
	images := filepath.Join(dir, "images")
	if err := mkdir(images); err != nil {
		t.Fatal(err)
	}
	a := writeImage(t, images, 56, 56, 1, opaque)
	b := writeImage(t, images, 84, 56, 2, opaque)
	train := []sample{
		{imagePrompt([]int{1}, []int{4}, 2), []int{3, 5}, []float64{-2, -1}, 1, 1, []string{a}},
		{[]int{4, 5}, []int{6}, []float64{-2}, -1, 1, nil},
		{imagePrompt([]int{8}, []int{6}), []int{2}, []float64{-3}, 0.5, 0.5, []string{b}},
	}
	trainPath := filepath.Join(dir, "train.npz")
	if err := writeBatch(trainPath, train); err != nil {
		t.Fatal(err)
	}
	common := []string{"--batch", trainPath, "--images", images, "--weights-in", old, "--lr", "0.002", "--epochs", "2",
		"--micro-batch", "1"}
	standin := filepath.Join("testdata", "fsdp_standin.py")
	ref := filepath.Join(dir, "ref")
	refLog, err := runTorchrun(t, 1, standin, append(common, "--weights-out", ref, "--metrics-out", filepath.Join(dir, "m-ref.json"))...)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "fsdp")
	log, err := runTorchrun(t, 2, standin,
		append(common, "--parallel", "fsdp", "--weights-out", out, "--metrics-out", filepath.Join(dir, "m-fsdp.json"))...)
	if err != nil {
		t.Fatal(err)
	}
	// The summed gradient of each step, which AdamW's step would not show
	// (it is invariant to the gradients' scale).
	norms := func(log string) []float64 {
		var v []float64
		for _, line := range strings.Split(log, "\n") {
			if _, rest, ok := strings.Cut(line, "fsdp-standin: grad L1 "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err != nil {
					t.Fatal(err)
				}
				v = append(v, f)
			}
		}
		return v
	}
	wantN, gotN := norms(refLog), norms(log)
	if len(wantN) != 2 || len(gotN) != 2 {
		t.Fatalf("gradient norms of 2 steps: 1 rank %v, FSDP %v", wantN, gotN)
	}
	for i := range wantN {
		if math.Abs(gotN[i]-wantN[i]) > 1e-5*wantN[i] {
			t.Errorf("step %d: gradient L1 %v with FSDP on 2 ranks, %v with 1 rank", i+1, gotN[i], wantN[i])
		}
	}
	// pi_old: 2 forwards a rank (rank 1's second on a stand-in sample);
	// each epoch 2 more.
	for _, r := range []int{0, 1} {
		if want := fmt.Sprintf("fsdp-standin: rank %d: 6 forwards", r); !strings.Contains(log, want) {
			t.Errorf("output lacks %q:\n%s", want, log)
		}
	}
	want := hfEvaluate(t, 1, trainPath, ref, ref, "--images", images)
	got := hfEvaluate(t, 1, trainPath, out, out, "--images", images)
	for i := range want.LogpOld {
		if math.Abs(got.LogpOld[i]-want.LogpOld[i]) > 1e-5*math.Max(1, math.Abs(want.LogpOld[i])) {
			t.Errorf("token %d after training: log π %v with FSDP on 2 ranks, %v with 1 rank", i, got.LogpOld[i], want.LogpOld[i])
		}
	}
	t.Logf("log π after training, 1 rank vs FSDP stand-in on 2: %v vs %v", want.LogpOld, got.LogpOld)
}

// TestTrainerVLMProcessorPinned: the trainer asks for the image processor
// variant the model server uses (fast by default, as vLLM for Qwen2.5-VL;
// the fake transformers, like releases before the fast default, hands out
// the slow one unless asked) and records it with the versions in
// metrics.json; a rollout side that used another class is refused before
// any forward, other versions are flagged.
func TestTrainerVLMProcessorPinned(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	vlm := fakeVLM(t, filepath.Join(dir, "vlm"), 1)
	images := filepath.Join(dir, "images")
	if err := mkdir(images); err != nil {
		t.Fatal(err)
	}
	a := writeImage(t, images, 56, 56, 1, opaque)
	batch := filepath.Join(dir, "batch.npz")
	if err := writeBatch(batch, []sample{{imagePrompt([]int{1}, []int{4}, 2), []int{3}, []float64{-1}, 1, 1, []string{a}}}); err != nil {
		t.Fatal(err)
	}
	rollout := func(name string, p schemas.ProcessorInfo) string {
		f := filepath.Join(dir, name+".json")
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	train := func(name string, flags ...string) (int, string, schemas.TrainerMetrics) {
		m := filepath.Join(dir, name, "metrics.json")
		code, out := runTrainerPy(t, append([]string{"--batch", batch, "--images", images, "--weights-in", vlm,
			"--weights-out", filepath.Join(dir, name, "out"), "--metrics-out", m, "--lr", "1e-3", "--global-batch", "1"}, flags...)...)
		var got schemas.TrainerMetrics
		if code == 0 {
			b, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
		}
		return code, out, got
	}
	for _, c := range []struct {
		name, variant, want string
	}{{"fast", "fast", "Qwen2VLImageProcessorFast"}, {"slow", "slow", "Qwen2VLImageProcessor"}} {
		code, out, m := train(c.name, "--image-processor", c.variant)
		if code != 0 {
			t.Fatalf("%s: exit %d:\n%s", c.name, code, out)
		}
		if m.Processor == nil || m.Processor.ImageProcessor != c.want || m.Processor.Processor != "Qwen2_5_VLProcessor" || m.Processor.Transformers != "0.0-fake" {
			t.Errorf("%s: processor %+v, want image processor %s of transformers 0.0-fake", c.name, m.Processor, c.want)
		}
		if m.ProcessorMismatch != "" {
			t.Errorf("%s: mismatch %q without a rollout side", c.name, m.ProcessorMismatch)
		}
	}
	code, out, _ := train("other-class", "--rollout-processor", rollout("slowside", schemas.ProcessorInfo{ImageProcessor: "Qwen2VLImageProcessor", Transformers: "0.0-fake"}))
	if code != 2 || !strings.Contains(out, "the model server made pixels with Qwen2VLImageProcessor, this trainer would use Qwen2VLImageProcessorFast") {
		t.Errorf("a slow rollout processor against the fast one: exit %d, want 2 naming both:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "other-class", "out")); err == nil {
		t.Error("a refused run wrote --weights-out")
	}
	code, out, m := train("other-version", "--rollout-processor", rollout("newer", schemas.ProcessorInfo{ImageProcessor: "Qwen2VLImageProcessorFast", Transformers: "4.57.1", Torchvision: "0.22.0"}))
	if code != 0 {
		t.Fatalf("other versions: exit %d:\n%s", code, out)
	}
	if m.ProcessorMismatch != "transformers 4.57.1 at the model server, 0.0-fake here; torchvision 0.22.0 at the model server, none here" {
		t.Errorf("mismatch %q", m.ProcessorMismatch)
	}
}
