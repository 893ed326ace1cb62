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

	"github.com/roundhouse-rl/roundhouse/internal/runs"
)

var testSuccess = []runs.RoundSuccess{
	{Round: 1, Train: runs.Counts{Episodes: 4, Valid: 4, Successes: 2}, Val: runs.Counts{Episodes: 30, Valid: 30, Successes: 9}},
	{Round: 2, Train: runs.Counts{Episodes: 36, Valid: 35, Successes: 20}, Val: runs.Counts{Episodes: 30, Valid: 29, Successes: 14}},
	{Round: 3, Val: runs.Counts{Episodes: 30, Valid: 30, Successes: 21}},
}

func TestSuccessSVG(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.svg")
	b, err := Success(file, "demo", testSuccess, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	svg := readSVG(t, file)
	// Title, axis on 0–100 %, round labels, and the legend naming each
	// series with its latest value and interval; no per-point value labels
	// (they collided), the table has those.
	for _, s := range []string{"run demo: success per round", "round", "1", "2", "3 (final)", "0%", "100%",
		SeriesTrain + " — round 2: 57.1% [40–73]", SeriesVal + " — round 3 (final): 70.0% [52–84]"} {
		if !svg.texts[s] {
			t.Errorf("chart lacks the text %q", s)
		}
	}
	for _, s := range []string{"50.0%", "48.3%", "120%"} {
		if svg.texts[s] {
			t.Errorf("chart has the text %q: no point labels, and the axis ends at 100%%", s)
		}
	}
	// Each point has its dot and its error bar, in its series' colour.
	if svg.dots[svgColor(ColorTrain)] != 2 || svg.dots[svgColor(ColorVal)] != 3 {
		t.Errorf("dots by colour %v: want 2 collection and 3 validation points", svg.dots)
	}
	if svg.bars[svgColor(ColorTrain)] != 2 || svg.bars[svgColor(ColorVal)] != 3 {
		t.Errorf("error bars by colour %v: want 2 collection and 3 validation bars", svg.bars)
	}
	// A round without validation has no validation point; one without valid
	// episodes has none at all, and a run without any is an error.
	b, err = Success(file, "x", []runs.RoundSuccess{{Round: 1, Train: runs.Counts{Episodes: 4, Valid: 4, Successes: 1}}, {Round: 2, Train: runs.Counts{Episodes: 4}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(file, b, 0o644)
	if svg := readSVG(t, file); svg.dots[svgColor(ColorTrain)] != 1 || svg.dots[svgColor(ColorVal)] != 0 || svg.bars[svgColor(ColorTrain)] != 1 ||
		!svg.texts[SeriesTrain+" — round 1: 25.0% [4–70]"] || slices.ContainsFunc(slices.Collect(maps.Keys(svg.texts)), func(s string) bool { return strings.HasPrefix(s, SeriesVal) }) {
		t.Errorf("one valid collection point only: dots %v", svg.dots)
	}
	if _, err := Success(file, "x", []runs.RoundSuccess{{Round: 1, Train: runs.Counts{Episodes: 4}}}, 0); err == nil || !strings.Contains(err.Error(), "no valid episode") {
		t.Errorf("chart of no valid episode: %v", err)
	}
}

func TestSuccessPNG(t *testing.T) {
	b, err := Success("out.PNG", "demo", testSuccess[:1], 0) // one round: the x range still has a width
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if s := img.Bounds().Size(); s.X != 640 || s.Y != 420 {
		t.Errorf("size %v, want 640×420", s)
	}
	// Both series are drawn: pixels of each series' colour exist.
	found := pixels(img, ColorTrain, ColorVal)
	if found[ColorTrain] < 20 || found[ColorVal] < 20 {
		t.Errorf("series pixels: %d collection, %d validation; want both drawn", found[ColorTrain], found[ColorVal])
	}
}
