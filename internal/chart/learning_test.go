package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testLearning = []LearningSeries{
	{Name: "η = 0", Points: []LearningPoint{{0, 15, 49}, {100, 25, 49}, {210, 35, 49}}},
	{Name: "η = 1", Points: []LearningPoint{{0, 15, 49}, {95, 0, 0}, {205, 33, 49}}},
}

func TestLearningSVG(t *testing.T) {
	file := filepath.Join(t.TempDir(), "l.svg")
	b, err := Learning(file, "validation success per sample", testLearning)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	svg := readSVG(t, file)
	// The legend names each series with its last point; the x axis is
	// samples, not rounds.
	for _, s := range []string{"validation success per sample", "samples trained on", "0", "50", "200", "0%", "100%",
		"η = 0 — 210 samples: 71.4% [57–83]", "η = 1 — 205 samples: 67.3% [53–79]"} {
		if !svg.texts[s] {
			t.Errorf("chart lacks the text %q", s)
		}
	}
	// A point without valid episodes has neither dot nor bar.
	if svg.dots[svgColor(ColorTrain)] != 3 || svg.dots[svgColor(ColorVal)] != 2 {
		t.Errorf("dots by colour %v: want 3 and 2", svg.dots)
	}
	if svg.bars[svgColor(ColorTrain)] != 3 || svg.bars[svgColor(ColorVal)] != 2 {
		t.Errorf("error bars by colour %v: want 3 and 2", svg.bars)
	}
	if _, err := Learning(file, "x", []LearningSeries{{Name: "a", Points: []LearningPoint{{0, 0, 0}}}}); err == nil || !strings.Contains(err.Error(), "no validation") {
		t.Errorf("chart of no valid episode: %v", err)
	}
	if _, err := Learning(file, "x", make([]LearningSeries, 5)); err == nil {
		t.Error("five series: want an error, there are four colours")
	}
}
