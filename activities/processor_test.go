package activities_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/testsuite"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/host"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The model server's processor travels to the trainer: a rollout host runs
// model_server.processor_probe once per weights and stores what it prints;
// the trainer activity hands the file to the trainer as
// {rollout_processor} and records it with the round, beside the trainer's
// own (docs/design.md §4).
func TestRolloutProcessorReachesTheTrainer(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	dir := t.TempDir()
	const run = "probe"
	l := schemas.Layout{Run: run}
	runs := filepath.Join(dir, "probe-runs.txt")
	info := `{"processor":"Qwen2_5_VLProcessor","image_processor":"Qwen2VLImageProcessorFast","transformers":"4.57.1","torchvision":"0.22.0"}`
	h := schemas.Harness{Name: "fake", Dir: dir, Digest: "d1"}
	h.Model.Vision, h.Model.WeightsFile = true, "policy.json"
	h.Model.ProcessorProbe = []string{"sh", "-c", `echo "$1" >> "$2"; echo importing; echo '` + info + `'`, "probe", "{weights}", runs}
	// The trainer refuses to run without the file, and copies it to its metrics' neighbour.
	h.Trainer.Command = []string{"sh", "-c", `test -s "$3" || { echo "no rollout processor: '$3'"; exit 1; }
mkdir -p "$(dirname "$1")"; echo '{"w":1}' > "$1"; echo '{"loss":1}' > "$2"`, "trainer", "{weights_out}", "{metrics_out}", "{rollout_processor}"}

	hst, err := host.Start(ctx, host.Config{Store: s, WorkDir: filepath.Join(dir, "rollout"), ProxyListen: "127.0.0.1:0", Name: "probe",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer hst.Close()
	served := filepath.Join(dir, "served")
	for range 3 { // three episodes of the same weights: one probe
		hst.ProbeProcessor(ctx, h, run, "w0", map[string]string{"weights_dir": served})
	}
	if b, err := os.ReadFile(runs); err != nil || strings.Count(string(b), "\n") != 1 || strings.TrimSpace(string(b)) != filepath.Join(served, "policy.json") {
		t.Fatalf("probe runs %q (%v): want one, given the served weights file", b, err)
	}
	var stored schemas.ProcessorInfo
	if err := store.GetJSON(ctx, s, l.RolloutProcessor("w0"), &stored); err != nil || stored.ImageProcessor != "Qwen2VLImageProcessorFast" {
		t.Fatalf("stored processor %+v (%v)", stored, err)
	}

	if err := store.PutJSON(ctx, s, l.Harness(), h); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, l.Batch(1), []byte(imageBatch(t, nil))); err != nil {
		t.Fatal(err)
	}
	w0 := t.TempDir()
	if err := os.WriteFile(filepath.Join(w0, "policy.json"), []byte(`{"w":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	wf, err := weights.Dir(w0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := weights.Publish(ctx, s, l.Weights("w0"), wf, schemas.WeightsManifest{WeightsID: "w0"}); err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(&activities.Trainer{Store: s, WorkDir: filepath.Join(dir, "train")})
	var tr *activities.Trainer
	v, err := env.ExecuteActivity(tr.Train, activities.TrainInput{Run: run, Round: 1, BatchKey: l.Batch(1), WeightsID: "w0", NewWeightsID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	var m schemas.TrainerMetrics
	if err := v.Get(&m); err != nil {
		t.Fatal(err)
	}
	if m.RolloutProcessor == nil || *m.RolloutProcessor != stored {
		t.Errorf("round metrics' rollout processor %+v, want %+v", m.RolloutProcessor, stored)
	}
}
