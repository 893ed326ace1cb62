package workflows

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Histories recorded from real runs of an earlier version (testdata/replay:
// a two-round train chain, episode chunks, a stopped run, a final eval, a
// sweep, the fleet serving a demo run) must replay against the current code: workers can then be upgraded
// one by one while runs go on. A change to what a workflow does must be
// guarded with workflow.GetVersion, or this test fails.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/replay/*.json")
	if err != nil || len(files) != len(recordedIDs) {
		t.Fatalf("recorded histories %v (%v); recordedIDs names %d", files, err, len(recordedIDs))
	}
	r := replayer()
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			if err := replay(r, f, recordedIDs[name]); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}

// recordedIDs are the workflow ids of the recorded histories: child
// workflow ids derive from them, so a replay must run under the same id.
var recordedIDs = map[string]string{
	"train-round1-continued": "train-hist",
	"train-round2-final":     "train-hist",
	"train-stopped":          "train-histstop",
	"episodes-train":         "train-hist-r1-train-0",
	"episodes-val":           "train-hist-r1-val-0",
	"eval-final":             "eval-hist-final-r2",
	"sweep":                  "sweep-hs-2026-12-02T16:55:10Z",
	"fleet":                  "roundhouse-fleet",
}

func replay(r worker.WorkflowReplayer, file, id string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		return err
	}
	quiet := tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	return r.ReplayWorkflowHistoryWithOptions(quiet, h, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: id, RunID: "recorded"}})
}

// The replayer notices a change that is not guarded: a Train that does
// something else first fails the replay of a recorded Train history.
func TestReplayCatchesUnguardedChange(t *testing.T) {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(func(ctx workflow.Context, in api.TrainInput) (api.TrainResult, error) {
		var records *activities.Records
		err := workflow.ExecuteActivity(controlContext(ctx), records.SaveState, nil).Get(ctx, nil)
		return api.TrainResult{}, err
	}, workflow.RegisterOptions{Name: "Train"})
	r.RegisterWorkflow(Episodes)
	err := replay(r, "testdata/replay/train-round2-final.json", "train-hist")
	if err == nil {
		t.Fatal("a changed Train replayed a recorded history without error")
	}
	if !strings.Contains(err.Error(), "TMPRL1100") {
		t.Fatalf("want a nondeterminism error, got %v", err)
	}
}

func replayer() worker.WorkflowReplayer {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflow(Train)
	r.RegisterWorkflow(Episodes)
	r.RegisterWorkflow(Eval)
	r.RegisterWorkflow(Sweep)
	r.RegisterWorkflow(Fleet)
	return r
}
