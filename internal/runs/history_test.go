package runs

import (
	"bytes"
	"strings"
	"testing"
)

func TestPartition(t *testing.T) {
	for key, want := range map[string]struct {
		round int32
		phase string
		ok    bool
	}{
		"round=3/phase=val/part-00000.parquet":            {3, "val", true},
		"round=12/phase=train/r12-train-g001-a00.parquet": {12, "train", true},
		"round=x/phase=val/a.parquet":                     {0, "", false},
		"phase=val/round=1/a.parquet":                     {0, "", false},
		"round=1/a.parquet":                               {0, "", false},
	} {
		r, p, ok := partition(key)
		if r != want.round || p != want.phase || ok != want.ok {
			t.Errorf("partition(%q) = %d %q %v, want %+v", key, r, p, ok, want)
		}
	}
}

var testSuccess = []RoundSuccess{
	{Round: 1, Train: Counts{Episodes: 4, Valid: 4, Successes: 2}, Val: Counts{Episodes: 30, Valid: 30, Successes: 9}},
	{Round: 2, Train: Counts{Episodes: 36, Valid: 35, Successes: 20}, Val: Counts{Episodes: 30, Valid: 29, Successes: 14}},
	{Round: 3, Val: Counts{Episodes: 30, Valid: 30, Successes: 21}},
}

func TestWriteSuccess(t *testing.T) {
	var out bytes.Buffer
	rs := append([]RoundSuccess(nil), testSuccess...)
	rs[1].Train.Lost = 2 // as ReadRounds adds them from round 2's summary
	WriteSuccess(&out, rs, 3)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := [][]string{
		{"round", "collection", "success", "/", "valid", "/", "attempted", "validation", "success", "/", "valid", "/", "attempted"},
		{"1", "2/4", "(50.0%", "[15–85])", "2/4", "(50.0%", "[15–85])", "9/30", "(30.0%", "[16–48])", "9/30", "(30.0%", "[16–48])"},
		// One invalid collection episode, two lost: 20 of 38 attempted.
		{"2", "20/35", "(57.1%", "[40–73])", "20/38", "(52.6%", "[37–68])", "14/29", "(48.3%", "[31–66])", "14/30", "(46.7%", "[30–64])"},
		{"3", "(final)", "-", "-", "21/30", "(70.0%", "[52–84])", "21/30", "(70.0%", "[52–84])"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, l := range lines {
		if got := strings.Fields(l); strings.Join(got, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d = %q, want %q", i, got, want[i])
		}
	}
	if s := (Counts{Episodes: 3}).String(); s != "0/0 valid of 3" {
		t.Errorf("no valid episode: %q", s)
	}

	// Two suites: the table splits by suite as well, so a family that does
	// not learn shows.
	mixed := []RoundSuccess{{Round: 1,
		Train: Counts{Episodes: 6, Valid: 6, Successes: 3}, Val: Counts{Episodes: 2, Valid: 2, Successes: 1},
		TrainBySuite: map[string]Counts{"toy": {Episodes: 4, Valid: 4, Successes: 3}, "vision": {Episodes: 2, Valid: 2}},
		ValBySuite:   map[string]Counts{"toy": {Episodes: 1, Valid: 1, Successes: 1}, "vision": {Episodes: 1, Valid: 1}},
	}}
	out.Reset()
	WriteSuccess(&out, mixed, 0)
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	if n := len(lines); n != 5 || strings.Join(strings.Fields(lines[3]), " ") != "round toy collection toy validation vision collection vision validation" ||
		strings.Join(strings.Fields(lines[4]), " ") != "1 3/4 (75.0% [30–96]) 1/1 (100.0% [20–100]) 0/2 (0.0% [0–66]) 0/1 (0.0% [0–80])" {
		t.Errorf("by suite:\n%s", out.String())
	}
	out.Reset()
	WriteSuccess(&out, testSuccess, 3)
	if strings.Contains(out.String(), "toy") || strings.Count(out.String(), "round") != 1 {
		t.Errorf("one suite printed a suite table:\n%s", out.String())
	}
}
