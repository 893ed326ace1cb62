package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/wcharczuk/go-chart/v2/drawing"

	"github.com/roundhouse-rl/roundhouse/internal/chart"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestPrintDiagnostics(t *testing.T) {
	sums := []schemas.RoundSummary{
		{Round: 1, WeightsID: "w0", NewWeightsID: "r1", ValSuccess: 0.3,
			BatchSummary: schemas.BatchSummary{Episodes: 36, Valid: 34, Invalid: 2, InvalidByCause: map[string]int{"timeout": 1, "infrastructure": 1},
				Successes: 20, Groups: 6, GroupsWithSignal: 4, Calls: 200, UntrainableCalls: 10, Samples: 90, Images: 12, ImageRefs: 90,
				TaskFailuresByReason: map[string]int{"max_turns": 3, "finish_claimed": 7}},
			Trainer: schemas.TrainerMetrics{Loss: 0.0123, LogprobMismatch: 1e-8, LogprobMismatchMax: 3.5e-7, DriftShare: 0.25, Steps: 2}},
		// Round 2: 4 timeouts and 2 lost of 20 attempted (30 %) is over the
		// 20 % limit; its validation has counts, so an interval.
		{Round: 2, WeightsID: "r1", NewWeightsID: "r2", ValSuccess: 0.5, Val: &schemas.TaskResult{Episodes: 30, Valid: 30, Successes: 15},
			BatchSummary: schemas.BatchSummary{Episodes: 18, Valid: 14, Invalid: 4, Successes: 7, InvalidByCause: map[string]int{"timeout": 4, "lost": 2}}},
	}
	var out bytes.Buffer
	printDiagnostics(&out, sums, schemas.State{Rounds: 2, RoundsDone: 2, FinalValSuccess: 0.7})
	got := out.String()
	for _, want := range []string{"95.0%", "infrastructure:1 timeout:1", "0.0123", "30.0% → 50.0% → 70.0% (final)", "logprob Δ mean", "3.5e-07", "25.0%", "12 (90 uses)", "task failures by reason: r1 finish_claimed:7 max_turns:3"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	// Both denominators with intervals; the round over the limit is named.
	for _, want := range []string{"collection success / valid", "success / attempted", "58.8% [42–74]", "55.6% [39–71]", "2/36",
		"50.0% [33–67]", "50.0% [26–74]", "35.0% [18–57]", "6/20",
		"!! round 2: too many invalid or lost episodes, over the limit of 20% (collect.max_invalid_share): collection 6 of 20 (lost:2 timeout:4)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "round 1: too many") {
		t.Errorf("round 1 (2 of 36 invalid) flagged:\n%s", got)
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

// svgColor is a colour as go-chart writes it into SVG styles.
func svgColor(c drawing.Color) string { return c.String() }

// The success chart's series, by which the end-to-end test finds them in
// the chart `starter report` draws.
var (
	seriesTrain, seriesVal = chart.SeriesTrain, chart.SeriesVal
	colorTrain, colorVal   = chart.ColorTrain, chart.ColorVal
)

func TestChartFormat(t *testing.T) {
	for _, f := range []string{"a.svg", "b.PNG", "dir/c.png"} {
		if err := checkChartFile(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, f := range []string{"a.pdf", "chart", "a.svg.gz"} {
		if err := checkChartFile(f); err == nil || !strings.Contains(err.Error(), "--chart "+f) || !strings.Contains(err.Error(), ".svg or .png") {
			t.Errorf("%s: error %v, want one naming the flag and the formats", f, err)
		}
	}
}

// A leaderboard stored before intervals existed is shown with them: the
// entries within noise of the leader get their ≈.
func TestPrintOldLeaderboard(t *testing.T) {
	stored := `{"sweep":"n","source":"demo","run":"demo","init_key":"val_init_ids","entries":[
		{"weights_id":"r5","success_rate":0.7667,"successes":23,"valid":30,"episodes":30},
		{"weights_id":"r4","success_rate":0.6333,"successes":19,"valid":30,"episodes":30},
		{"weights_id":"r1","success_rate":0.4,"successes":12,"valid":30,"episodes":30}]}`
	get := func(_ string, v any) error { return json.Unmarshal([]byte(stored), v) }
	var out bytes.Buffer
	if err := printLeaderboard(&out, "b", get, "n"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 1 | ≈ | `r5` | 76.7% [59–89] |", "| 2 | ≈ | `r4` | 63.3% [45–79] |", "| 3 |  | `r1` | 40.0% [24–58] |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("leaderboard lacks %q:\n%s", want, out.String())
		}
	}
}
