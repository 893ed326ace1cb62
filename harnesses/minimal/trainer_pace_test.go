package minimal_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// TestTrainerMinSeconds trains the same batch with and without
// --min-seconds: pacing makes a training last longer and changes nothing
// it writes (weights and metrics.json byte for byte). A negative or
// non-number pace is refused before anything runs.
func TestTrainerMinSeconds(t *testing.T) {
	needTorch(t)
	s1, s2 := twoDecisions(t)
	dir := t.TempDir()
	batch := filepath.Join(dir, "batch.npz")
	if err := writeBatch(batch, []sample{s1, s2}); err != nil {
		t.Fatal(err)
	}
	outputs := func(name string, extra ...string) (weights, metrics []byte) {
		out := filepath.Join(dir, name, "policy.json")
		if _, err := runTrainer(t, 1, batch, w0, out, append([]string{"--lr", "0.01", "--epochs", "2"}, extra...)...); err != nil {
			t.Fatal(err)
		}
		w, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		m, err := os.ReadFile(filepath.Join(dir, name, schemas.TrainerMetricsFile))
		if err != nil {
			t.Fatal(err)
		}
		return w, m
	}
	w, m := outputs("plain")
	pw, pm := outputs("paced", "--min-seconds", "0.5")
	if !bytes.Equal(w, pw) || !bytes.Equal(m, pm) {
		t.Errorf("paced outputs differ:\nmetrics %s\nwithout pacing %s", pm, m)
	}
	if in, err := os.ReadFile(w0); err != nil || bytes.Equal(in, w) {
		t.Fatalf("the training changed no weight (%v): the comparison says nothing", err)
	}
	for _, bad := range []string{"-1", "nan"} {
		_, err := runTrainer(t, 1, batch, w0, filepath.Join(dir, "bad", "policy.json"), "--min-seconds", bad)
		if err == nil || !strings.Contains(err.Error(), "--min-seconds must be in [0, 86400]") {
			t.Errorf("--min-seconds %s: %v, want a refusal", bad, err)
		}
	}
}
