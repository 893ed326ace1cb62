package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	chart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"

	"github.com/roundhouse-rl/roundhouse/internal/runs"
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
	fmt.Fprintln(tw, "round\tcollection success\tvalidation success\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", roundLabel(r.Round, final), r.Train, r.Val)
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

// renderChart draws success per round, in percent: the collection's rate
// and the validation's, each point labelled with its value.
func renderChart(file, run string, rs []runs.RoundSuccess, final int32) ([]byte, error) {
	format, err := chartFormat(file)
	if err != nil {
		return nil, err
	}
	var train, val chart.ContinuousSeries
	train.Name, val.Name = seriesTrain, seriesVal
	train.Style = chart.Style{StrokeColor: colorTrain, StrokeWidth: 2, DotColor: colorTrain, DotWidth: 4}
	val.Style = chart.Style{StrokeColor: colorVal, StrokeWidth: 2, DotColor: colorVal, DotWidth: 4}
	var notes []chart.Value2
	var ticks []chart.Tick
	for _, r := range rs {
		x := float64(r.Round)
		ticks = append(ticks, chart.Tick{Value: x, Label: roundLabel(r.Round, final)})
		for _, p := range []struct {
			s *chart.ContinuousSeries
			c runs.Counts
		}{{&train, r.Train}, {&val, r.Val}} {
			if p.c.Rate() < 0 {
				continue
			}
			y := 100 * p.c.Rate()
			p.s.XValues = append(p.s.XValues, x)
			p.s.YValues = append(p.s.YValues, y)
			notes = append(notes, chart.Value2{XValue: x, YValue: y, Label: fmt.Sprintf("%.1f%%", y),
				Style: chart.Style{StrokeColor: p.s.Style.StrokeColor}})
		}
	}
	var series []chart.Series
	for _, s := range []chart.ContinuousSeries{train, val} {
		if len(s.XValues) > 0 {
			series = append(series, s)
		}
	}
	if len(series) == 0 {
		return nil, fmt.Errorf("run %s has no valid episode to chart", run)
	}
	series = append(series, chart.AnnotationSeries{Annotations: notes})
	var yticks []chart.Tick
	for v := 0; v <= 100; v += 20 {
		yticks = append(yticks, chart.Tick{Value: float64(v), Label: fmt.Sprintf("%d%%", v)})
	}
	// Headroom above 100% (an unlabelled tick sets the range) keeps the
	// legend in the plot's top-left corner clear of the points.
	yticks = append(yticks, chart.Tick{Value: 125})
	// Unlabelled ticks half a round beyond each end set the x range (go-chart
	// takes it from the ticks): a margin, and a range for one round too.
	lo, hi := float64(rs[0].Round)-0.5, float64(rs[len(rs)-1].Round)+0.5
	ticks = append([]chart.Tick{{Value: lo}}, append(ticks, chart.Tick{Value: hi})...)
	g := chart.Chart{
		Title:      fmt.Sprintf("run %s: success per round", run),
		Width:      max(640, 120*len(rs)),
		Height:     400,
		Background: chart.Style{Padding: chart.Box{Top: 50, Left: 20, Right: 20, Bottom: 20}},
		XAxis:      chart.XAxis{Name: "round", Ticks: ticks},
		YAxis:      chart.YAxis{Name: "success over valid episodes", Ticks: yticks},
		// Hidden, or go-chart draws an empty secondary axis off the canvas.
		YAxisSecondary: chart.YAxis{Style: chart.Hidden()},
		Series:         series,
	}
	g.Elements = []chart.Renderable{chart.Legend(&g)}
	var buf bytes.Buffer
	if err := g.Render(format, &buf); err != nil {
		return nil, fmt.Errorf("draw chart of run %s: %w", run, err)
	}
	return buf.Bytes(), nil
}
