package chart

import (
	"bytes"
	"image/png"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// testComparison is the 3-round demo run vis1's comparison of w0 and r3
// (docs/operating.md), all seven tasks.
var testComparison = schemas.Comparison{Run: "vis1", A: "val-r1", B: "val-r4", WeightsA: "w0", WeightsB: "r3",
	Tasks: []schemas.PairedResult{
		{Task: 0, Name: "cube_in_drawer", Pairs: 5, SuccessA: 1, SuccessB: 4, OnlyB: 3, PValue: 0.25},
		{Task: 1, Name: "cube_in_drawer_closed", Pairs: 5, SuccessA: 2, SuccessB: 5, OnlyB: 3, PValue: 0.25},
		{Task: 2, Name: "bowl_on_plate", Pairs: 5, SuccessA: 3, SuccessB: 4, OnlyB: 1, PValue: 1},
		{Task: 3, Name: "bowl_in_cabinet", Pairs: 5, SuccessA: 3, SuccessB: 3, PValue: 1},
		{Task: 4, Name: "cube_in_cabinet_closed", Pairs: 5, SuccessA: 0, SuccessB: 2, OnlyB: 2, PValue: 0.5},
		{Task: 5, Name: "cube_on_plate", Pairs: 5, SuccessA: 3, SuccessB: 4, OnlyB: 1, PValue: 1},
		{Task: 6, Name: "cube_in_marked_container", Pairs: 5, SuccessA: 3, SuccessB: 3, OnlyA: 1, OnlyB: 1, PValue: 1},
	},
	Overall: schemas.PairedResult{Task: -1, Pairs: 35, SuccessA: 15, SuccessB: 25, OnlyA: 2, OnlyB: 12, PValue: 0.0129},
}

func TestComparisonSVG(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cmp.svg")
	b, err := Comparison(file, testComparison)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	svg := readSVG(t, file)
	// The legend names both sides with their overall rates; each pair is
	// labelled with its task, name and McNemar p; the axis runs 0–100 %.
	for _, s := range []string{
		"A: val-r1 (weights w0) — all tasks 42.9% [27–60]", "B: val-r4 (weights r3) — all tasks 71.4% [54–84]",
		"task 0", "cube_in_drawer", "task 6", "all tasks", "bowl_on_plate",
		"p = 0.25, 5 pairs", "p = 0.5, 5 pairs", "p = 0.0129, 35 pairs", "0%", "100%",
	} {
		if !svg.texts[s] {
			t.Errorf("chart lacks the text %q", s)
		}
	}
	// A name too long for its pair is wrapped, not run into the next.
	if !svg.texts["cube_in_marked_"] || !svg.texts["container"] || svg.texts["cube_in_marked_container"] {
		t.Errorf("task 6's name is not wrapped into cube_in_marked_ / container: %q", slices.Sorted(maps.Keys(svg.texts)))
	}
	// A bar per side and pair, in the side's colour, each with its whisker.
	if svg.fills[svgColor(colorA)] != 8 || svg.fills[svgColor(colorB)] != 8 {
		t.Errorf("bars by colour %v: want 8 of A's and 8 of B's", svg.fills)
	}
	if svg.bars[svgColor(colorWhisk)] != 16 {
		t.Errorf("error bars by colour %v: want 16", svg.bars)
	}

	// go-chart writes SVG text unescaped: a task name with < or & must
	// still give well-formed XML (readSVG fails the test otherwise).
	odd := testComparison
	odd.Tasks = []schemas.PairedResult{{Task: 9, Name: "cup & <saucer>", Pairs: 70, SuccessA: 16, SuccessB: 48, OnlyA: 1, OnlyB: 33, PValue: 4.07e-9}}
	odd.Overall = odd.Tasks[0]
	b, err = Comparison(file, odd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if svg := readSVG(t, file); !svg.texts["cup & <saucer>"] || !svg.texts["p = 4.07e-09, 70 pairs"] {
		t.Errorf("chart lacks the name %q or the p of 4.07e-9: %q", "cup & <saucer>", slices.Sorted(maps.Keys(svg.texts)))
	}

	none := testComparison
	none.Tasks, none.Overall = nil, schemas.PairedResult{Task: -1}
	if _, err := Comparison(file, none); err == nil || !strings.Contains(err.Error(), "no pair") {
		t.Errorf("chart of no pair: %v", err)
	}
	if _, err := Comparison("cmp.pdf", testComparison); err == nil || !strings.Contains(err.Error(), "cmp.pdf: give a file name ending in .svg or .png") {
		t.Errorf("chart to a .pdf: %v", err)
	}
}

func TestComparisonPNG(t *testing.T) {
	b, err := Comparison("cmp.png", testComparison)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if s := img.Bounds().Size(); s.X < 8*150 || s.Y < 460 {
		t.Errorf("size %v: want room for 8 pairs of bars", s)
	}
	// Both sides are drawn: B's bars are taller (25 successes to 15).
	found := pixels(img, colorA, colorB)
	if found[colorA] < 1000 || found[colorB] <= found[colorA] {
		t.Errorf("bar pixels: %d of A, %d of B; want both drawn, B's more", found[colorA], found[colorB])
	}
}

func TestWrapLabel(t *testing.T) {
	measure := func(s string) int { return 6 * len([]rune(s)) }
	for _, c := range []struct {
		in       string
		width    int
		want     string // lines joined by |
		maxLines int
	}{
		{"", 60, "", 3},
		{"bowl_on_plate", 90, "bowl_on_plate", 3},
		{"cube_in_marked_container", 90, "cube_in_marked_|container", 3},
		{"put both the soup and the sauce in the basket", 60, "put both|the soup|and the…", 3},
		{"averyveryverylongword", 60, "averyveryverylongword", 3}, // one word stays whole
	} {
		if got := strings.Join(wrapLabel(measure, c.in, c.width, c.maxLines), "|"); got != c.want {
			t.Errorf("wrapLabel(%q, %d) = %q, want %q", c.in, c.width, got, c.want)
		}
	}
}

// A protocol's comparison (here 20 tasks of two suites) is drawn per suite:
// a bar pair per suite and one over all, never one per task.
func TestComparisonPerSuite(t *testing.T) {
	c := testComparison
	c.Tasks = nil
	for i := range 20 {
		suite := "libero_object_swap"
		if i >= 10 {
			suite = "libero_goal_swap"
		}
		c.Tasks = append(c.Tasks, schemas.PairedResult{Task: int32(i), Name: "t", Suite: suite, Pairs: 10, SuccessA: 3, SuccessB: 6, OnlyB: 3, PValue: 0.25})
	}
	c.Suites = []schemas.PairedResult{
		{Task: -1, Suite: "libero_object_swap", Pairs: 100, SuccessA: 30, SuccessB: 60, OnlyB: 30, PValue: 1.9e-9},
		{Task: -1, Suite: "libero_goal_swap", Pairs: 100, SuccessA: 30, SuccessB: 60, OnlyB: 30, PValue: 1.9e-9},
	}
	c.Overall = schemas.PairedResult{Task: -1, Pairs: 200, SuccessA: 60, SuccessB: 120, OnlyB: 60, PValue: 1e-18}
	file := filepath.Join(t.TempDir(), "cmp.svg")
	b, err := Comparison(file, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	svg := readSVG(t, file)
	if svg.fills[svgColor(colorA)] != 3 || svg.fills[svgColor(colorB)] != 3 || !svg.texts["libero_goal_swap"] || !svg.texts["suite"] || svg.texts["task 0"] {
		t.Errorf("want two suites and all tasks as 3 bar pairs: bars %v, texts %q", svg.fills, slices.Sorted(maps.Keys(svg.texts)))
	}
}
