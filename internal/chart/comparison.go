package chart

import (
	"fmt"
	"html"
	"path/filepath"
	"strings"

	gochart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"

	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Colours of the two sides of a comparison, and of the error bars drawn
// over both (in a bar's own colour they would vanish into it).
var (
	colorA     = drawing.Color{R: 0x1f, G: 0x77, B: 0xb4, A: 255}
	colorB     = drawing.Color{R: 0xff, G: 0x7f, B: 0x0e, A: 255}
	colorWhisk = drawing.Color{R: 0x22, G: 0x22, B: 0x22, A: 255}
)

// Bar geometry in x units (one unit per task): each bar's half width and
// its centre's distance from the task's position.
const (
	barHalf   = 0.17
	barOffset = 0.18
	// allGap sets the overall pair apart from the tasks.
	allGap = 0.6
	// pairWidth is the pixels a pair of bars (and its labels) gets.
	pairWidth = 170
	// labelFont and labelLine size the labels under the axis (font size,
	// pixels between baselines); a task name wraps to maxNameLines.
	labelFont    = 10
	labelLine    = 14
	maxNameLines = 3
)

// compareGroup is one pair of bars: a task's, or all tasks'.
type compareGroup struct {
	x     float64
	lines []string // the labels under the axis
	r     schemas.PairedResult
}

// compareLabel names the side of a comparison in the legend.
func compareLabel(side, tag, weights string, successes, pairs int) string {
	return fmt.Sprintf("%s: %s (weights %s) — all tasks %s", side, tag, weights, stats.Rate(successes, pairs))
}

// pText is a McNemar p-value as the chart prints it: as the table does.
func pText(p float64) string { return fmt.Sprintf("p = %.3g", p) }

// Comparison draws a comparison, in the format file's extension names:
// per task and over all tasks, A's and B's success over the paired cells
// side by side, each bar with its 95 % Wilson interval, on a 0–100 %
// axis. Under each pair: the task, its
// name, and the exact McNemar p with the number of pairs. The legend,
// above the plot, names each side with its overall rate; the printed
// table has every number.
func Comparison(file string, c schemas.Comparison) ([]byte, error) {
	const maxChartTasks = 16
	format, err := renderer(file)
	if err != nil {
		return nil, err
	}
	if c.Overall.Pairs == 0 {
		return nil, fmt.Errorf("comparison %s vs %s has no pair (no cell valid under both): nothing to chart", c.A, c.B)
	}
	measure, err := labelMeasure()
	if err != nil {
		return nil, err
	}
	// A protocol's 80 tasks would make the chart metres wide: past
	// maxChartTasks, a multi-suite comparison is drawn per suite (the
	// table and the JSON keep every task).
	type item struct {
		r          schemas.PairedResult
		head, name string
	}
	var items []item
	if len(c.Suites) > 1 && len(c.Tasks) > maxChartTasks {
		for _, r := range c.Suites {
			items = append(items, item{r, "suite", r.Suite})
		}
	} else {
		for _, t := range c.Tasks {
			items = append(items, item{t, fmt.Sprintf("task %d", t.Task), t.Name})
		}
	}
	n := len(items) + 1
	width := max(720, 80+pairWidth*n)
	last := float64(n-1) + allGap
	// A pair's share of the plot's width (less the y axis), less a gap:
	// long task names (LIBERO's are sentences) wrap to fit it.
	fit := int(float64(width-120)/(last+1)) - 12
	var groups []compareGroup
	lines := 0
	add := func(x float64, r schemas.PairedResult, head, name string) {
		ls := append(append([]string{head}, wrapLabel(measure, name, fit, maxNameLines)...), fmt.Sprintf("%s, %d pairs", pText(r.PValue), r.Pairs))
		lines = max(lines, len(ls))
		groups = append(groups, compareGroup{x: x, r: r, lines: ls})
	}
	for i, it := range items {
		add(float64(i), it.r, it.head, it.name)
	}
	add(last, c.Overall, "all tasks", "")

	// Task names come from the harness file and may hold < or &, which
	// go-chart's SVG renderer writes unescaped.
	esc := func(s string) string { return s }
	if strings.EqualFold(filepath.Ext(file), ".svg") {
		esc = html.EscapeString
	}
	barsA, barsB := columns{color: colorA}, columns{color: colorB}
	whisk := errorBars{color: colorWhisk}
	for _, g := range groups {
		for _, s := range []struct {
			b  *columns
			dx float64
			k  int
		}{{&barsA, -barOffset, g.r.SuccessA}, {&barsB, barOffset, g.r.SuccessB}} {
			iv := stats.Wilson(s.k, g.r.Pairs)
			s.b.bars = append(s.b.bars, column{x: g.x + s.dx, y: 100 * float64(s.k) / float64(g.r.Pairs)})
			whisk.bars = append(whisk.bars, interval{x: g.x + s.dx, lo: 100 * iv.Lo, hi: 100 * iv.Hi})
		}
	}
	legend := []legendEntry{
		{name: compareLabel("A", c.A, c.WeightsA, c.Overall.SuccessA, c.Overall.Pairs), color: colorA},
		{name: compareLabel("B", c.B, c.WeightsB, c.Overall.SuccessB, c.Overall.Pairs), color: colorB},
	}
	// Tick marks at each pair, and unlabelled ticks half a unit beyond the
	// ends: go-chart takes the x range from the ticks.
	ticks := []gochart.Tick{{Value: -0.5}}
	for _, g := range groups {
		ticks = append(ticks, gochart.Tick{Value: g.x})
	}
	ticks = append(ticks, gochart.Tick{Value: last + 0.5})
	title := fmt.Sprintf("run %s: B against A on %d paired cells", c.Run, c.Overall.Pairs)
	g := gochart.Chart{
		Width:  width,
		Height: 460 + labelLine*lines,
		// The top padding holds the title and the legend; the bottom one
		// the labels under each pair and the x axis name.
		Background: gochart.Style{Padding: gochart.Box{Top: 44 + 18*len(legend), Left: 20, Right: 28, Bottom: 36 + labelLine*lines}},
		XAxis:      gochart.XAxis{Ticks: ticks},
		YAxis:      percentAxis("success over paired cells (whiskers: 95% interval)"),
		// Hidden, or go-chart draws an empty secondary axis off the canvas.
		YAxisSecondary: gochart.YAxis{Style: gochart.Hidden()},
		Series:         []gochart.Series{barsA, barsB, whisk, groupLabels{groups: groups, lines: lines, esc: esc}},
	}
	g.Elements = []gochart.Renderable{header(title, g.Width, legend)}
	return draw(g, format, fmt.Sprintf("comparison %s vs %s", c.A, c.B))
}

// column is one filled bar from 0 to y, centred on x (chart units).
type column struct{ x, y float64 }

// columns draws filled bars of one colour. Unnamed, like errorBars, so
// go-chart's range and legend code pass it by.
type columns struct {
	color drawing.Color
	bars  []column
}

func (b columns) GetName() string             { return "" }
func (b columns) GetYAxis() gochart.YAxisType { return gochart.YAxisPrimary }
func (b columns) GetStyle() gochart.Style     { return gochart.Style{FillColor: b.color} }
func (b columns) Validate() error             { return nil }
func (b columns) Render(r gochart.Renderer, cb gochart.Box, xr, yr gochart.Range, _ gochart.Style) {
	r.SetFillColor(b.color)
	r.SetStrokeColor(b.color)
	r.SetStrokeWidth(1)
	r.SetStrokeDashArray(nil)
	for _, v := range b.bars {
		x0, x1 := cb.Left+xr.Translate(v.x-barHalf), cb.Left+xr.Translate(v.x+barHalf)
		y0, y1 := cb.Bottom-yr.Translate(0), cb.Bottom-yr.Translate(v.y)
		if y1 == y0 {
			y1-- // a 0 % bar shows as a line on the axis: its side was drawn
		}
		r.MoveTo(x0, y0)
		r.LineTo(x0, y1)
		r.LineTo(x1, y1)
		r.LineTo(x1, y0)
		r.Close()
		r.FillStroke()
	}
}

// groupLabels writes each pair's lines under the x axis, centred on the
// pair, and the axis's name below them. It draws as a series because a
// series is handed the x range: the labels land where the bars are.
type groupLabels struct {
	groups []compareGroup
	lines  int                 // the most lines of a pair
	esc    func(string) string // makes a text safe for the format
}

func (l groupLabels) GetName() string             { return "" }
func (l groupLabels) GetYAxis() gochart.YAxisType { return gochart.YAxisPrimary }
func (l groupLabels) GetStyle() gochart.Style     { return gochart.Style{} }
func (l groupLabels) Validate() error             { return nil }
func (l groupLabels) Render(r gochart.Renderer, cb gochart.Box, xr, _ gochart.Range, s gochart.Style) {
	// The SVG renderer keeps the y axis name's rotation.
	r.ClearTextRotation()
	r.SetFont(s.GetFont())
	r.SetFontColor(gochart.DefaultTextColor)
	r.SetFontSize(labelFont)
	for _, g := range l.groups {
		x := cb.Left + xr.Translate(g.x)
		for i, t := range g.lines {
			// The p line goes last, level with the other pairs' p lines.
			if i == len(g.lines)-1 {
				i = l.lines - 1
			}
			tb := r.MeasureText(t)
			r.Text(l.esc(t), x-tb.Width()/2, cb.Bottom+20+i*labelLine)
		}
	}
	name := "p: exact McNemar test on the cells only one of A and B solved"
	tb := r.MeasureText(name)
	r.Text(name, (cb.Left+cb.Right-tb.Width())/2, cb.Bottom+20+l.lines*labelLine+6)
}

// labelMeasure measures text as the labels under the axis are drawn, so
// names can be wrapped before the chart's size is fixed.
func labelMeasure() (func(string) int, error) {
	font, err := gochart.GetDefaultFont()
	if err != nil {
		return nil, fmt.Errorf("chart font: %w", err)
	}
	r, err := gochart.PNG(1, 1)
	if err != nil {
		return nil, fmt.Errorf("chart font: %w", err)
	}
	r.SetFont(font)
	r.SetFontSize(labelFont)
	return func(s string) int { return r.MeasureText(s).Width() }, nil
}

// wrapLabel breaks s after '_', ' ' or '-' into lines at most width wide
// (a single word wider stays whole); past maxLines the last line ends in
// "…". "" is no line.
func wrapLabel(measure func(string) int, s string, width, maxLines int) []string {
	var words []string
	start := 0
	for i, ch := range s {
		if ch == '_' || ch == ' ' || ch == '-' {
			words = append(words, s[start:i+1])
			start = i + 1
		}
	}
	if start < len(s) {
		words = append(words, s[start:])
	}
	var lines []string
	for _, w := range words {
		if n := len(lines); n > 0 && measure(lines[n-1]+w) <= width {
			lines[n-1] += w
			continue
		}
		lines = append(lines, w)
	}
	if len(lines) > maxLines {
		lines = lines[:maxLines]
		cut := []rune(strings.TrimRight(lines[maxLines-1], " "))
		for len(cut) > 0 && measure(string(cut)+"…") > width {
			cut = cut[:len(cut)-1]
		}
		lines[maxLines-1] = string(cut) + "…"
	}
	// A space a line was broken at would shift the centred line.
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	return lines
}
