package chart

import (
	"fmt"
	"math"

	gochart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"

	"github.com/roundhouse-rl/roundhouse/internal/stats"
)

// LearningSeries is one curve of a learning chart: validation success
// after each amount of training, e.g. one max staleness's runs pooled.
type LearningSeries struct {
	Name   string
	Points []LearningPoint
}

// LearningPoint is one validation: the samples trained on before the
// weights it validated, and its successes out of valid episodes.
type LearningPoint struct {
	Samples          float64
	Successes, Valid int
}

// learningColors are the series' colours, in order: the success chart's
// two first, so the first two series read alike in both.
var learningColors = []drawing.Color{ColorTrain, ColorVal,
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 255}, {R: 0xff, G: 0x7f, B: 0x0e, A: 255}}

// Learning draws validation success against samples trained on, in
// percent on a 0–100 % axis, in the format file's extension names: a
// line per series (at most four), each point with its 95 % Wilson
// interval as an error bar, series nudged apart on x so their bars never
// hide each other. The legend names each series with its last point.
// Points without valid episodes are left out.
func Learning(file, title string, ss []LearningSeries) ([]byte, error) {
	format, err := renderer(file)
	if err != nil {
		return nil, err
	}
	if len(ss) > len(learningColors) {
		return nil, fmt.Errorf("learning chart %q: %d series, at most %d", title, len(ss), len(learningColors))
	}
	xmax := 0.0
	for _, s := range ss {
		for _, p := range s.Points {
			xmax = max(xmax, p.Samples)
		}
	}
	xmax = max(xmax, 1)
	var series []gochart.Series
	var shown []legendEntry
	for i, s := range ss {
		c := learningColors[i]
		line := gochart.ContinuousSeries{Style: gochart.Style{StrokeColor: c, StrokeWidth: 2, DotColor: c, DotWidth: 4}}
		bars := errorBars{color: c}
		dx := (float64(i) - float64(len(ss)-1)/2) * 0.006 * xmax
		last := ""
		for _, p := range s.Points {
			if p.Valid <= 0 {
				continue
			}
			iv := stats.Wilson(p.Successes, p.Valid)
			x := p.Samples + dx
			line.XValues = append(line.XValues, x)
			line.YValues = append(line.YValues, 100*float64(p.Successes)/float64(p.Valid))
			bars.bars = append(bars.bars, interval{x: x, lo: 100 * iv.Lo, hi: 100 * iv.Hi})
			last = fmt.Sprintf("%.0f samples: %s", p.Samples, stats.Rate(p.Successes, p.Valid))
		}
		if len(line.XValues) > 0 {
			series = append(series, line, bars)
			shown = append(shown, legendEntry{name: s.Name, color: c, last: last})
		}
	}
	if len(series) == 0 {
		return nil, fmt.Errorf("learning chart %q: no validation with valid episodes", title)
	}
	// Round ticks (1, 2 or 5 × 10^k apart) from 0, and unlabelled ones a
	// little beyond each end for a margin: go-chart takes the x range from
	// the ticks.
	step := math.Pow(10, math.Floor(math.Log10(xmax/5)))
	for _, m := range []float64{2, 5, 10} {
		if xmax/step <= 6 {
			break
		}
		step = m * math.Pow(10, math.Floor(math.Log10(xmax/5)))
	}
	ticks := []gochart.Tick{{Value: -0.04 * xmax}}
	for v := 0.0; v <= xmax; v += step {
		ticks = append(ticks, gochart.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
	}
	ticks = append(ticks, gochart.Tick{Value: 1.04 * xmax})
	g := gochart.Chart{
		Width:          720,
		Height:         420,
		Background:     gochart.Style{Padding: gochart.Box{Top: 44 + 18*len(shown), Left: 20, Right: 28, Bottom: 20}},
		XAxis:          gochart.XAxis{Name: "samples trained on", Ticks: ticks},
		YAxis:          percentAxis("validation success (bars: 95% interval)"),
		YAxisSecondary: gochart.YAxis{Style: gochart.Hidden()},
		Series:         series,
	}
	g.Elements = []gochart.Renderable{header(title, g.Width, shown)}
	return draw(g, format, title)
}
