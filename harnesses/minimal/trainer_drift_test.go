package minimal_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// With --drift-report the trainer measures instead of training (starter
// drift): every completion token's |log π_old − log π_rollout| in batch
// order and each sample's token count, whatever the guard's limits, and
// no weights or metrics. One decision token recorded 0.5 below π_old
// shows up as exactly that.
func TestTrainerDriftReport(t *testing.T) {
	needTorch(t)
	s1, s2 := twoDecisions(t)
	s1.logprobs = []float64{s1.logprobs[0] - 0.5, s1.logprobs[1]}
	dir := t.TempDir()
	batch, out := filepath.Join(dir, "batch.npz"), filepath.Join(dir, "out", "policy.json")
	if err := writeBatch(batch, []sample{s1, s2}); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "drift.json")
	// Limits the measured batch passes by far: the report must not stop at them.
	cmd := exec.Command(python, "torchrun.py", "--nnodes", "1", "--nproc_per_node", "2",
		"--rdzv_backend", "c10d", "--rdzv_endpoint", fmt.Sprintf("127.0.0.1:%d", itest.Port(t)), "--monitor_interval", "0.2",
		"trainer.py", "--batch", batch, "--weights-in", w0, "--weights-out", out, "--metrics-out", filepath.Join(dir, "out", "metrics.json"),
		"--drift-limit", "0.001", "--drift-call-limit", "0.001", "--drift-report", report)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("trainer --drift-report: %v\n%s", err, log.String())
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("no drift report: %v\n%s", err, log.String())
	}
	var r schemas.TrainerDriftReport
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.SampleTokens) != 2 || r.SampleTokens[0] != len(s1.completion) || r.SampleTokens[1] != len(s2.completion) ||
		len(r.TokenAbsDiff) != len(s1.completion)+len(s2.completion) {
		t.Fatalf("report %+v: want 2 samples of %d and %d tokens", r, len(s1.completion), len(s2.completion))
	}
	for i, d := range r.TokenAbsDiff {
		want := 0.0
		if i == 0 {
			want = 0.5
		}
		if math.Abs(d-want) > 1e-6 {
			t.Errorf("token %d: |Δ| %v, want %v", i, d, want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("--drift-report wrote weights")
	}
	if !strings.Contains(log.String(), "nothing trained") {
		t.Errorf("the trainer did not say it only measured:\n%s", log.String())
	}
}
