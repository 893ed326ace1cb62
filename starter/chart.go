package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	chart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"

	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
)

// roundLabel names a round on the chart and in the table; final is the
// round of the run's final validation (N+1), 0 when there is none.
func roundLabel(round, final int32) string {
	if round == final {
		return fmt.Sprintf("%d (final)", round)
	}
	return strconv.Itoa(int(round))
}

// printSuccess is the chart's data as a table, so the numbers can be read
// (and grepped) without opening the file.
func printSuccess(out io.Writer, rs []runs.RoundSuccess, final int32) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tcollection success / valid\t/ attempted\tvalidation success / valid\t/ attempted\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", roundLabel(r.Round, final), r.Train, r.Train.OfAttempted(), r.Val, r.Val.OfAttempted())
	}
	tw.Flush()
	printBySuite(out, rs, final)
}

// printBySuite splits the success table by task suite when the run has
// more than one (the minimal harness's vision task is suite "vision"), so
// a task family that does not learn is not hidden in the mean.
func printBySuite(out io.Writer, rs []runs.RoundSuccess, final int32) {
	set := map[string]bool{}
	for _, r := range rs {
		for s := range r.TrainBySuite {
			set[s] = true
		}
		for s := range r.ValBySuite {
			set[s] = true
		}
	}
	if len(set) < 2 {
		return
	}
	suites := slices.Sorted(maps.Keys(set))
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "round\t")
	for _, s := range suites {
		fmt.Fprintf(tw, "%s collection\t%s validation\t", s, s)
	}
	fmt.Fprintln(tw)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t", roundLabel(r.Round, final))
		for _, s := range suites {
			fmt.Fprintf(tw, "%s\t%s\t", r.TrainBySuite[s], r.ValBySuite[s])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// Series names, as the legend shows them.
const (
	seriesTrain = "collection (train episodes)"
	seriesVal   = "validation (val episodes)"
)

// Series colours: fixed, so a reader (and a test) can tell them apart.
var (
	colorTrain = drawing.Color{R: 0x1f, G: 0x77, B: 0xb4, A: 255}
	colorVal   = drawing.Color{R: 0xd6, G: 0x27, B: 0x28, A: 255}
)

// chartFormat is the renderer a file name asks for.
func chartFormat(file string) (chart.RendererProvider, error) {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".svg":
		return chart.SVG, nil
	case ".png":
		return chart.PNG, nil
	}
	return nil, fmt.Errorf("--chart %s: give a file name ending in .svg or .png", file)
}

// dodge moves the collection's points this far (in rounds) left of their
// round and the validation's right, so one round's error bars never hide
// each other.
const dodge = 0.08

// renderChart draws success per round over valid episodes, in percent on
// a 0–100 % axis: the collection's rate and the validation's, each point
// with its 95 % Wilson interval as an error bar. Points carry no value
// labels (they collided with each other and the lines; the table printed
// with the chart has the numbers); the legend, above the plot, names each
// series with its latest value.
func renderChart(file, run string, rs []runs.RoundSuccess, final int32) ([]byte, error) {
	format, err := chartFormat(file)
	if err != nil {
		return nil, err
	}
	var train, val chart.ContinuousSeries
	train.Style = chart.Style{StrokeColor: colorTrain, StrokeWidth: 2, DotColor: colorTrain, DotWidth: 4}
	val.Style = chart.Style{StrokeColor: colorVal, StrokeWidth: 2, DotColor: colorVal, DotWidth: 4}
	trainBars, valBars := errorBars{color: colorTrain}, errorBars{color: colorVal}
	entries := []legendEntry{{name: seriesTrain, color: colorTrain}, {name: seriesVal, color: colorVal}}
	var ticks []chart.Tick
	for _, r := range rs {
		x := float64(r.Round)
		ticks = append(ticks, chart.Tick{Value: x, Label: roundLabel(r.Round, final)})
		for i, p := range []struct {
			s    *chart.ContinuousSeries
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
			entries[i].last = fmt.Sprintf("round %s: %s", roundLabel(r.Round, final), stats.Rate(p.c.Successes, p.c.Valid))
		}
	}
	var series []chart.Series
	var shown []legendEntry
	for i, s := range []chart.ContinuousSeries{train, val} {
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
	ticks = append([]chart.Tick{{Value: lo}}, append(ticks, chart.Tick{Value: hi})...)
	title := fmt.Sprintf("run %s: success per round", run)
	g := chart.Chart{
		Width:  max(640, 120*len(rs)),
		Height: 420,
		// The top padding holds the title and, below it, the legend.
		Background: chart.Style{Padding: chart.Box{Top: 44 + 18*len(shown), Left: 20, Right: 28, Bottom: 20}},
		XAxis:      chart.XAxis{Name: "round", Ticks: ticks},
		YAxis:      percentAxis("success over valid episodes (bars: 95% interval)"),
		// Hidden, or go-chart draws an empty secondary axis off the canvas.
		YAxisSecondary: chart.YAxis{Style: chart.Hidden()},
		Series:         series,
	}
	g.Elements = []chart.Renderable{header(title, g.Width, shown)}
	return drawChart(g, format, "run "+run)
}

// percentAxis is a y axis of success in percent, 0–100 % whatever the
// data, so two charts (or two bars) read on one scale.
func percentAxis(name string) chart.YAxis {
	var ticks []chart.Tick
	var grid []chart.GridLine
	for v := 0; v <= 100; v += 20 {
		ticks = append(ticks, chart.Tick{Value: float64(v), Label: fmt.Sprintf("%d%%", v)})
		grid = append(grid, chart.GridLine{Value: float64(v)})
	}
	return chart.YAxis{Name: name, Ticks: ticks, GridLines: grid, Range: &chart.ContinuousRange{Min: 0, Max: 100},
		// Light grid lines; the SVG renderer rounds widths to whole pixels.
		GridMajorStyle: chart.Style{StrokeColor: drawing.Color{R: 0xdd, G: 0xdd, B: 0xdd, A: 255}, StrokeWidth: 1}}
}

// drawChart renders g in the format; what names the chart in the error.
func drawChart(g chart.Chart, format chart.RendererProvider, what string) ([]byte, error) {
	var buf bytes.Buffer
	if err := g.Render(format, &buf); err != nil {
		return nil, fmt.Errorf("draw chart of %s: %w", what, err)
	}
	return buf.Bytes(), nil
}

// writeChart writes a rendered chart to its file and prints where it is.
func writeChart(out io.Writer, file string, b []byte) error {
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return fmt.Errorf("--chart %s: %w", file, err)
	}
	path, err := filepath.Abs(file)
	if err != nil {
		path = file
	}
	fmt.Fprintf(out, "\nchart: %s\n", path)
	return nil
}

// interval is one point's 95 % interval, in chart units (round, percent).
type interval struct{ x, lo, hi float64 }

// errorBars draws a series' intervals: a vertical line from lo to hi with
// a cap at each end. It has no name, so go-chart's range and legend code
// ignore it.
type errorBars struct {
	color drawing.Color
	bars  []interval
}

func (e errorBars) GetName() string           { return "" }
func (e errorBars) GetYAxis() chart.YAxisType { return chart.YAxisPrimary }
func (e errorBars) GetStyle() chart.Style     { return chart.Style{StrokeColor: e.color} }
func (e errorBars) Validate() error           { return nil }
func (e errorBars) Render(r chart.Renderer, cb chart.Box, xr, yr chart.Range, _ chart.Style) {
	const capHalf = 5 // pixels
	r.SetStrokeColor(e.color)
	r.SetStrokeWidth(1.5)
	r.SetStrokeDashArray(nil)
	for _, b := range e.bars {
		x := cb.Left + xr.Translate(b.x)
		ylo, yhi := cb.Bottom-yr.Translate(b.lo), cb.Bottom-yr.Translate(b.hi)
		for _, l := range [][4]int{{x, ylo, x, yhi}, {x - capHalf, ylo, x + capHalf, ylo}, {x - capHalf, yhi, x + capHalf, yhi}} {
			r.MoveTo(l[0], l[1])
			r.LineTo(l[2], l[3])
			r.Stroke()
		}
	}
}

// legendEntry is one legend row: a series, its colour, its latest value.
type legendEntry struct {
	name, last string
	color      drawing.Color
}

// header draws the title and, below it, the legend, between the top of
// the picture and the plot, so the legend never covers a point. go-chart's
// own title is not used: its SVG renderer keeps the y axis name's rotation
// and would draw the title sideways.
func header(title string, width int, es []legendEntry) chart.Renderable {
	return func(r chart.Renderer, cb chart.Box, defaults chart.Style) {
		r.ClearTextRotation()
		r.SetFont(defaults.GetFont())
		r.SetFontColor(chart.DefaultTextColor)
		r.SetFontSize(chart.DefaultTitleFontSize)
		tb := r.MeasureText(title)
		r.Text(title, (width-tb.Width())/2, 10+tb.Height())
		r.SetFontSize(10)
		y := cb.Top - 10 - 18*(len(es)-1)
		for _, e := range es {
			r.SetStrokeColor(e.color)
			r.SetStrokeWidth(3)
			r.SetStrokeDashArray(nil)
			r.MoveTo(cb.Left, y-4)
			r.LineTo(cb.Left+24, y-4)
			r.Stroke()
			text := e.name
			if e.last != "" {
				text += " — " + e.last
			}
			r.Text(text, cb.Left+32, y)
			y += 18
		}
	}
}
