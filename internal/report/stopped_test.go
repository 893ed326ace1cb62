package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// A stopped evaluation's report says it is incomplete in its text form,
// is no validation score, and is refused as a final score even when the
// cells that ran would pass every other check.
func TestStoppedReport(t *testing.T) {
	task := schemas.TaskResult{Task: 0, Name: "stack", Episodes: 28, Valid: 28, Lost: 2, Successes: 14}
	rep := schemas.Report{Run: "demo", Tag: "v1", WeightsID: "r3", InitKey: ValKey, Harness: "minimal", MaxInvalidShare: 0.2, SplitCells: 30,
		Tasks: []schemas.TaskResult{task}, Overall: task, Stopped: &schemas.ReportStop{Reason: "operator: host maintenance", Skipped: 2}}
	rep.Overall.Task = -1
	var out bytes.Buffer
	if err := WriteTable(&out, rep, "b"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"!! INCOMPLETE: the evaluation was stopped (operator: host maintenance): 2 cells were skipped", "incomplete (val_init_ids)", "not a score of the split"} {
		if !strings.Contains(got, want) {
			t.Errorf("stopped report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "validation score") {
		t.Errorf("a stopped report is called a validation score:\n%s", got)
	}
	rep.InitKey = FinalKey
	out.Reset()
	err := WriteTable(&out, rep, "b")
	if err == nil || !strings.Contains(err.Error(), "not a score") || !strings.Contains(err.Error(), "2 of 30 cells skipped") || strings.Contains(out.String(), "final score (") {
		t.Errorf("stopped final score: error %v\n%s", err, out.String())
	}
	rep.Stopped = nil
	if err := FinalScoreError(rep); err != nil {
		t.Errorf("the same report, not stopped: %v", err)
	}
}
