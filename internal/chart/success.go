package chart

import (
	"fmt"

	gochart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"

	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
)

// Series names, as the legend shows them.
const (
	SeriesTrain = "collection (train episodes)"
	SeriesVal   = "validation (val episodes)"
)

// Series colours: fixed, so a reader (and a test) can tell them apart.
var (
	ColorTrain = drawing.Color{R: 0x1f, G: 0x77, B: 0xb4, A: 255}
	ColorVal   = drawing.Color{R: 0xd6, G: 0x27, B: 0x28, A: 255}
)

// dodge moves the collection's points this far (in rounds) left of their
// round and the validation's right, so one round's error bars never hide
// each other.
const dodge = 0.08

// Success draws a run's success per round over valid episodes, in percent
// on a 0–100 % axis, in the format file's extension names: the
// collection's rate and the validation's, each point with its 95 % Wilson
// interval as an error bar. Points carry no value labels (they collided
// with each other and the lines; the table printed with the chart has the
// numbers); the legend, above the plot, names each series with its latest
// value.
func Success(file, run string, rs []runs.RoundSuccess, final int32) ([]byte, error) {
	format, err := renderer(file)
	if err != nil {
		return nil, err
	}
	var train, val gochart.ContinuousSeries
	train.Style = gochart.Style{StrokeColor: ColorTrain, StrokeWidth: 2, DotColor: ColorTrain, DotWidth: 4}
	val.Style = gochart.Style{StrokeColor: ColorVal, StrokeWidth: 2, DotColor: ColorVal, DotWidth: 4}
	trainBars, valBars := errorBars{color: ColorTrain}, errorBars{color: ColorVal}
	entries := []legendEntry{{name: SeriesTrain, color: ColorTrain}, {name: SeriesVal, color: ColorVal}}
	var ticks []gochart.Tick
	for _, r := range rs {
		x := float64(r.Round)
		ticks = append(ticks, gochart.Tick{Value: x, Label: runs.RoundLabel(r.Round, final)})
		for i, p := range []struct {
			s    *gochart.ContinuousSeries
			bars *errorBars
			c    runs.Counts
			dx   float64
		}{{&train, &trainBars, r.Train, -dodge}, {&val, &valBars, r.Val, dodge}} {
			if p.c.Rate() < 0 {
				continue
			}
			iv := stats.Wilson(p.c.Successes, p.c.Valid)
			p.s.XValues = append(p.s.XValues, x+p.dx)
			p.s.YValues = append(p.s.YValues, 100*p.c.Rate())
			p.bars.bars = append(p.bars.bars, interval{x: x + p.dx, lo: 100 * iv.Lo, hi: 100 * iv.Hi})
			entries[i].last = fmt.Sprintf("round %s: %s", runs.RoundLabel(r.Round, final), stats.Rate(p.c.Successes, p.c.Valid))
		}
	}
	var series []gochart.Series
	var shown []legendEntry
	for i, s := range []gochart.ContinuousSeries{train, val} {
		if len(s.XValues) > 0 {
			series = append(series, s, []errorBars{trainBars, valBars}[i])
			shown = append(shown, entries[i])
		}
	}
	if len(series) == 0 {
		return nil, fmt.Errorf("run %s has no valid episode to chart", run)
	}
	// Unlabelled ticks half a round beyond each end set the x range (go-chart
	// takes it from the ticks): a margin, and a range for one round too.
	lo, hi := float64(rs[0].Round)-0.5, float64(rs[len(rs)-1].Round)+0.5
	ticks = append([]gochart.Tick{{Value: lo}}, append(ticks, gochart.Tick{Value: hi})...)
	title := fmt.Sprintf("run %s: success per round", run)
	g := gochart.Chart{
		Width:  max(640, 120*len(rs)),
		Height: 420,
		// The top padding holds the title and, below it, the legend.
		Background: gochart.Style{Padding: gochart.Box{Top: 44 + 18*len(shown), Left: 20, Right: 28, Bottom: 20}},
		XAxis:      gochart.XAxis{Name: "round", Ticks: ticks},
		YAxis:      percentAxis("success over valid episodes (bars: 95% interval)"),
		// Hidden, or go-chart draws an empty secondary axis off the canvas.
		YAxisSecondary: gochart.YAxis{Style: gochart.Hidden()},
		Series:         series,
	}
	g.Elements = []gochart.Renderable{header(title, g.Width, shown)}
	return draw(g, format, "run "+run)
}
