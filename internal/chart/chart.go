// Package chart draws Roundhouse's charts: a run's success per round
// (Success) and two tags compared (Comparison), as SVG or PNG by the file
// name's extension. It returns the picture's bytes; writing them is the
// caller's.
package chart

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	gochart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"
)

// CheckFile refuses a file name whose extension names no format a chart
// is drawn in; the error starts with the name.
func CheckFile(file string) error {
	_, err := renderer(file)
	return err
}

// renderer is the format a file name asks for.
func renderer(file string) (gochart.RendererProvider, error) {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".svg":
		return gochart.SVG, nil
	case ".png":
		return gochart.PNG, nil
	}
	return nil, fmt.Errorf("%s: give a file name ending in .svg or .png", file)
}

// percentAxis is a y axis of success in percent, 0–100 % whatever the
// data, so two charts (or two bars) read on one scale.
func percentAxis(name string) gochart.YAxis {
	var ticks []gochart.Tick
	var grid []gochart.GridLine
	for v := 0; v <= 100; v += 20 {
		ticks = append(ticks, gochart.Tick{Value: float64(v), Label: fmt.Sprintf("%d%%", v)})
		grid = append(grid, gochart.GridLine{Value: float64(v)})
	}
	return gochart.YAxis{Name: name, Ticks: ticks, GridLines: grid, Range: &gochart.ContinuousRange{Min: 0, Max: 100},
		// Light grid lines; the SVG renderer rounds widths to whole pixels.
		GridMajorStyle: gochart.Style{StrokeColor: drawing.Color{R: 0xdd, G: 0xdd, B: 0xdd, A: 255}, StrokeWidth: 1}}
}

// draw renders g in the format; what names the chart in the error.
func draw(g gochart.Chart, format gochart.RendererProvider, what string) ([]byte, error) {
	var buf bytes.Buffer
	if err := g.Render(format, &buf); err != nil {
		return nil, fmt.Errorf("draw chart of %s: %w", what, err)
	}
	return buf.Bytes(), nil
}

// interval is one point's 95 % interval, in chart units (x, percent).
type interval struct{ x, lo, hi float64 }

// errorBars draws a series' intervals: a vertical line from lo to hi with
// a cap at each end. It has no name, so go-chart's range and legend code
// ignore it.
type errorBars struct {
	color drawing.Color
	bars  []interval
}

func (e errorBars) GetName() string             { return "" }
func (e errorBars) GetYAxis() gochart.YAxisType { return gochart.YAxisPrimary }
func (e errorBars) GetStyle() gochart.Style     { return gochart.Style{StrokeColor: e.color} }
func (e errorBars) Validate() error             { return nil }
func (e errorBars) Render(r gochart.Renderer, cb gochart.Box, xr, yr gochart.Range, _ gochart.Style) {
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
func header(title string, width int, es []legendEntry) gochart.Renderable {
	return func(r gochart.Renderer, cb gochart.Box, defaults gochart.Style) {
		r.ClearTextRotation()
		r.SetFont(defaults.GetFont())
		r.SetFontColor(gochart.DefaultTextColor)
		r.SetFontSize(gochart.DefaultTitleFontSize)
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
