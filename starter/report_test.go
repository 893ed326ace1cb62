package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestPrintDiagnostics(t *testing.T) {
	sums := []schemas.RoundSummary{
		{Round: 1, WeightsIn: "w0", WeightsOut: "r1", ValSuccess: 0.3,
			BatchSummary: schemas.BatchSummary{Episodes: 36, Valid: 34, Invalid: 2, InvalidByCause: map[string]int{"timeout": 1, "infrastructure": 1},
				Groups: 6, GroupsWithSignal: 4, Calls: 200, UntrainableCalls: 10, Samples: 90},
			Trainer: schemas.TrainerMetrics{Loss: 0.0123, LogprobMismatch: 1e-8, Steps: 2}},
		{Round: 2, WeightsIn: "r1", WeightsOut: "r2", ValSuccess: 0.5},
	}
	var out bytes.Buffer
	printDiagnostics(&out, sums, schemas.State{Rounds: 2, RoundsDone: 2, FinalValSuccess: 0.7})
	got := out.String()
	for _, want := range []string{"95.0%", "infrastructure:1 timeout:1", "0.0123", "30.0% → 50.0% → 70.0% (final)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	// Round 1 had 2 groups without signal.
	lines := strings.Split(got, "\n")
	found := false
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == "1" && f[1] == "2" && strings.Contains(l, "timeout") {
			found = true
		}
	}
	if !found {
		t.Errorf("no diagnostics row for round 1 with 2 groups without signal:\n%s", got)
	}
}
