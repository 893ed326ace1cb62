package minimal_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/npz"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

const python = "/usr/bin/python3"

// needTorch skips when the trainer's Python (Debian's torch) is missing.
func needTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import torch, numpy").Run(); err != nil {
		t.Skipf("%s cannot import torch and numpy: %v", python, err)
	}
}

// sample is one selected call of a training batch.
type sample struct {
	prompt, completion []int
	logprobs           []float64
	adv, weight        float64
	images             []string // blob names, in prompt order
}

// writeBatch writes batch.npz in the layout of schemas/batch.go, without
// the temperatures array (every sample at 1).
func writeBatch(path string, ss []sample) error { return writeBatchTemps(path, ss, nil) }

// writeBatchTemps writes batch.npz with temps as its temperatures array
// (none when nil).
func writeBatchTemps(path string, ss []sample, temps []float32) error {
	return writeBatchWith(path, ss, temps, nil)
}

// writeBatchWith writes batch.npz with temps and stale as its
// temperatures and staleness arrays (each left out when nil).
func writeBatchWith(path string, ss []sample, temps []float32, stale []int32) error {
	var pids, cids []int32
	var lps, advs, ws []float32
	poff, coff := []int64{0}, []int64{0}
	perSample := make([][]string, len(ss))
	for i, s := range ss {
		perSample[i] = s.images
	}
	names, index, ioff := schemas.IndexImages(perSample)
	for _, s := range ss {
		for _, id := range s.prompt {
			pids = append(pids, int32(id))
		}
		for i, id := range s.completion {
			cids = append(cids, int32(id))
			lps = append(lps, float32(s.logprobs[i]))
		}
		poff = append(poff, int64(len(pids)))
		coff = append(coff, int64(len(cids)))
		advs = append(advs, float32(s.adv))
		ws = append(ws, float32(s.weight))
	}
	w, err := npz.Create(path)
	if err != nil {
		return err
	}
	for _, f := range []func() error{
		func() error { return w.WriteInt32(schemas.BatchPromptIDs, pids) },
		func() error { return w.WriteInt64(schemas.BatchPromptOffsets, poff) },
		func() error { return w.WriteInt32(schemas.BatchCompletionIDs, cids) },
		func() error { return w.WriteInt64(schemas.BatchCompletionOffsets, coff) },
		func() error { return w.WriteFloat32(schemas.BatchRolloutLogprobs, lps) },
		func() error { return w.WriteFloat32(schemas.BatchAdvantages, advs) },
		func() error { return w.WriteFloat32(schemas.BatchWeights, ws) },
		func() error { return w.WriteStrings(schemas.BatchImages, names) },
		func() error { return w.WriteInt32(schemas.BatchImageIndex, index) },
		func() error { return w.WriteInt64(schemas.BatchImageOffsets, ioff) },
		func() error {
			if temps == nil {
				return nil
			}
			return w.WriteFloat32(schemas.BatchTemperatures, temps)
		},
		func() error {
			if stale == nil {
				return nil
			}
			return w.WriteInt32(schemas.BatchStaleness, stale)
		},
	} {
		if err := f(); err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}

// runTrainer runs trainer.py under torchrun with nproc workers and returns
// its metrics. args are extra trainer flags.
func runTrainer(t *testing.T, nproc int, batch, in, out string, args ...string) (schemas.TrainerMetrics, error) {
	t.Helper()
	metricsPath := filepath.Join(filepath.Dir(out), schemas.TrainerMetricsFile)
	cmdArgs := []string{"torchrun.py",
		"--nnodes", "1", "--nproc_per_node", strconv.Itoa(nproc),
		"--rdzv_backend", "c10d", "--rdzv_endpoint", fmt.Sprintf("127.0.0.1:%d", itest.Port(t)),
		"--monitor_interval", "0.2",
		"trainer.py", "--batch", batch, "--weights-in", in, "--weights-out", out, "--metrics-out", metricsPath,
		"--clip-low", "0.2", "--clip-high", "0.28", "--dual-clip", "3.0", "--is-cap", "2.0", "--global-batch", "128",
	}
	cmdArgs = append(cmdArgs, imagesNextTo(batch)...)
	cmd := exec.Command(python, append(cmdArgs, args...)...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return schemas.TrainerMetrics{}, fmt.Errorf("trainer: %w\n%s", err, output.String())
	}
	var m schemas.TrainerMetrics
	b, err := os.ReadFile(metricsPath)
	if err != nil {
		return m, fmt.Errorf("metrics: %w\n%s", err, output.String())
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("metrics: %w", err)
	}
	// The progress line the trainer activity heartbeats, once per step.
	last := fmt.Sprintf("step %d/%d loss ", m.Steps, m.Steps)
	if !strings.Contains(output.String(), last) || !strings.Contains(output.String(), " tokens/s ") {
		return m, fmt.Errorf("trainer printed no progress line %q…tokens/s:\n%s", last, output.String())
	}
	return m, nil
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o755) }

// storeImages writes each data-URL image into dir as <sha256>.png, as the
// trainer activity lays them out, and returns their names in order.
func storeImages(t *testing.T, dir string, urls []string) []string {
	t.Helper()
	var names []string
	for _, u := range urls {
		_, payload, ok := strings.Cut(u, ";base64,")
		data, err := base64.StdEncoding.DecodeString(payload)
		if !ok || err != nil {
			t.Fatalf("image URL %.40q: %v", u, err)
		}
		names = append(names, putBlob(t, dir, data))
	}
	return names
}

// putBlob writes a PNG into dir under its blob name, <sha256>.png, as the
// trainer activity lays images out, and returns the name.
func putBlob(t *testing.T, dir string, png []byte) string {
	t.Helper()
	sum := sha256.Sum256(png)
	name := hex.EncodeToString(sum[:]) + ".png"
	if err := mkdir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// imagesNextTo passes --images when the batch has an images folder beside
// it (storeImages'); explicit --images flags given later win.
func imagesNextTo(batch string) []string {
	dir := filepath.Join(filepath.Dir(batch), "images")
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return []string{"--images", dir}
	}
	return nil
}

// readMetrics reads a trainer's metrics.json.
func readMetrics(t *testing.T, path string) schemas.TrainerMetrics {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m schemas.TrainerMetrics
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
