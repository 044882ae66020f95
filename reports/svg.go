package reports

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// chart is one picture, drawn as inline SVG: axes with labelled units,
// one element per mark (class "mark", or "mark bad" for one that breaks a
// limit) with its values in a tooltip, a dash pattern and a marker shape
// per series so that it reads without colour, and a legend. Nothing in it
// needs a script or a font from the network.
type chart struct {
	id, title      string
	xLabel, yLabel string
	// xLog and yLog draw that axis on a log scale (positive values only).
	xLog, yLog bool
	// xTicks, when set, label the x axis at these values instead of
	// evenly spaced ones.
	xTicks []tick
	series []series
	// limits are horizontal lines, such as a limit.
	limits []limitLine
	// bands shade stretches of the x axis, such as a fault.
	bands []band
}

// band is a stretch of the x axis, shaded and named.
type band struct {
	from, to float64
	label    string
}

type tick struct {
	at    float64
	label string
}

type series struct {
	name   string
	points []point
	// bars draws a bar per point instead of a line through marks.
	bars bool
	// look, when fixed, is how the series is drawn whatever its place in
	// the chart: a run's or an algorithm's own colour in every chart.
	look  look
	fixed bool
}

// look is how a series is drawn: its colour, and its line (dash and
// marker shape), as places in the palette and the patterns.
type look struct{ colour, line int }

// lookOf is how the i-th series of a chart is drawn: its own look when
// fixed, else the i-th colour and line.
func lookOf(i int, s series) look {
	if s.fixed {
		return look{s.look.colour % maxSeries, s.look.line % maxSeries}
	}
	return look{i % maxSeries, i % maxSeries}
}

type point struct {
	x, y float64
	// bad marks a point that breaks a limit.
	bad bool
}

type limitLine struct {
	y     float64
	label string
}

// Geometry of every chart, in px.
const (
	chartW, chartH                     = 760, 300
	marginL, marginR, marginT, marginB = 72, 20, 46, 46
	plotW, plotH                       = chartW - marginL - marginR, chartH - marginT - marginB
	maxSeries                          = 8
)

// palette is colour-blind safe (Okabe and Ito); dashes and shapes tell the
// series apart without it.
var (
	palette = [maxSeries]string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"}
	dashes  = [maxSeries]string{"", "6 3", "2 3", "8 3 2 3", "", "6 3", "2 3", "8 3 2 3"}
	shapes  = [maxSeries]string{"circle", "square", "triangle", "diamond", "square", "circle", "diamond", "triangle"}
)

// svg renders the chart, wrapped in a figure whose data-marks attribute
// says how many marks the data implies.
func (c chart) svg() string {
	marks := 0
	for _, s := range c.series {
		marks += len(s.points)
	}
	var b strings.Builder
	legend := c.legendRows()
	extra := legendRowH * max(len(legend)-1, 0) // the plot moves down under a legend of several rows
	fmt.Fprintf(&b, `<figure class="chart" id="%s" data-marks="%d">`, html.EscapeString(c.id), marks)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		chartW, chartH+extra, chartW, chartH+extra, html.EscapeString(c.title))
	fmt.Fprintf(&b, `<text class="title" x="%d" y="16">%s</text>`, marginL, html.EscapeString(c.title))
	if marks == 0 {
		fmt.Fprintf(&b, `<text class="empty" x="%d" y="%d">nothing to draw</text></svg></figure>`, chartW/2, chartH/2)
		return b.String()
	}
	if extra > 0 {
		fmt.Fprintf(&b, `<g transform="translate(0 %d)">`, extra)
	}
	xs, ys := c.scales()
	for _, bd := range c.bands {
		x0, x1 := xs.at(bd.from), xs.at(bd.to)
		fmt.Fprintf(&b, `<rect class="band" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s</title></rect>`,
			x0, marginT, max(x1-x0, 1), plotH, html.EscapeString(bd.label))
		fmt.Fprintf(&b, `<text class="band-label" x="%.1f" y="%d">%s</text>`, x0+3, marginT+12, html.EscapeString(bd.label))
	}
	c.axes(&b, xs, ys)
	for _, l := range c.limits {
		y := ys.at(l.y)
		fmt.Fprintf(&b, `<line class="limit" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, marginL, marginL+plotW, y, y)
		fmt.Fprintf(&b, `<text class="limit-label" x="%d" y="%.1f">%s</text>`, marginL+plotW-4, y-4, html.EscapeString(l.label))
	}
	for i, s := range c.series {
		c.draw(&b, i, s, xs, ys)
	}
	if extra > 0 {
		b.WriteString(`</g>`)
	}
	c.legend(&b, legend)
	b.WriteString(`</svg></figure>`)
	return b.String()
}

// scale maps data to pixels along one axis.
type scale struct {
	lo, hi   float64
	log      bool
	from, to float64 // pixels
}

func (s scale) at(v float64) float64 {
	f := 0.0
	if s.log {
		if v <= 0 {
			v = s.lo
		}
		f = (math.Log10(v) - math.Log10(s.lo)) / (math.Log10(s.hi) - math.Log10(s.lo))
	} else if s.hi > s.lo {
		f = (v - s.lo) / (s.hi - s.lo)
	}
	return s.from + f*(s.to-s.from)
}

func (c chart) scales() (scale, scale) {
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.series {
		for _, p := range s.points {
			if c.xLog && p.x <= 0 || c.yLog && p.y <= 0 {
				continue
			}
			xlo, xhi, ylo, yhi = min(xlo, p.x), max(xhi, p.x), min(ylo, p.y), max(yhi, p.y)
		}
	}
	for _, l := range c.limits {
		yhi = max(yhi, l.y)
	}
	for _, bd := range c.bands {
		xlo, xhi = min(xlo, bd.from), max(xhi, bd.to)
	}
	if math.IsInf(xlo, 1) { // nothing positive on a log axis
		xlo, xhi, ylo, yhi = 1, 10, 1, 10
	}
	if !c.yLog {
		ylo = min(ylo, 0)
	}
	xs := scale{lo: xlo, hi: xhi, log: c.xLog, from: marginL, to: marginL + plotW}
	ys := scale{lo: ylo, hi: yhi, log: c.yLog, from: marginT + plotH, to: marginT}
	bars := false
	for _, s := range c.series {
		bars = bars || s.bars
	}
	switch {
	case xs.log:
		xs.lo, xs.hi = decadeFloor(xs.lo), decadeCeil(xs.hi)
	case xs.hi == xs.lo:
		xs.lo, xs.hi = xs.lo-1, xs.hi+1
	case bars: // room for the bars at either end
		pad := (xs.hi - xs.lo) / 2
		xs.lo, xs.hi = xs.lo-pad, xs.hi+pad
	}
	if ys.log {
		ys.lo, ys.hi = decadeFloor(ys.lo), decadeCeil(ys.hi)
	} else {
		ys.hi = niceCeil(ys.hi * 1.05)
		if ys.hi == ys.lo {
			ys.hi = ys.lo + 1
		}
	}
	return xs, ys
}

func decadeFloor(v float64) float64 { return math.Pow(10, math.Floor(math.Log10(v))) }
func decadeCeil(v float64) float64 {
	c := math.Pow(10, math.Ceil(math.Log10(v)))
	if c == decadeFloor(v) {
		c *= 10
	}
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// ticksOf picks the values to label on an axis.
func ticksOf(s scale) []tick {
	var ts []tick
	if s.log {
		for v := s.lo; v <= s.hi*1.0001; v *= 10 {
			ts = append(ts, tick{v, number(v)})
		}
		return ts
	}
	step := niceCeil((s.hi - s.lo) / 5)
	for v := math.Ceil(s.lo/step) * step; v <= s.hi+step/1e6; v += step {
		ts = append(ts, tick{v, number(v)})
	}
	return ts
}

func number(v float64) string {
	v = math.Round(v*1e6) / 1e6 // no 0.6000000000000001 from adding steps
	switch a := math.Abs(v); {
	case a >= 1e6 && math.Mod(v, 1e6) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4 && math.Mod(v, 1e3) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func (c chart) axes(b *strings.Builder, xs, ys scale) {
	fmt.Fprintf(b, `<rect class="plot" x="%d" y="%d" width="%d" height="%d"/>`, marginL, marginT, plotW, plotH)
	xt := c.xTicks
	if xt == nil {
		xt = ticksOf(xs)
	}
	for _, t := range xt {
		x := xs.at(t.at)
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/>`, x, x, marginT, marginT+plotH)
		fmt.Fprintf(b, `<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, marginT+plotH+14, html.EscapeString(t.label))
	}
	for _, t := range ticksOf(ys) {
		y := ys.at(t.at)
		fmt.Fprintf(b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, marginL, marginL+plotW, y, y)
		fmt.Fprintf(b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, marginL-6, y+4, html.EscapeString(t.label))
	}
	fmt.Fprintf(b, `<text class="axis" x="%d" y="%d" text-anchor="middle">%s</text>`, marginL+plotW/2, chartH-8, html.EscapeString(c.xLabel))
	fmt.Fprintf(b, `<text class="axis" transform="translate(14 %d) rotate(-90)" text-anchor="middle">%s</text>`,
		marginT+plotH/2, html.EscapeString(c.yLabel))
}

// draw draws the i-th series.
func (c chart) draw(b *strings.Builder, i int, s series, xs, ys scale) {
	lk := lookOf(i, s)
	colour := palette[lk.colour]
	fmt.Fprintf(b, `<g class="series" data-series="%s">`, html.EscapeString(s.name))
	if s.bars {
		// Bars of the same x stand side by side, one per series.
		w := max(2, min(18, float64(plotW)/float64(max(len(s.points), 1))*0.5/float64(len(c.series))))
		offset := (float64(i) - float64(len(c.series)-1)/2) * w
		for _, p := range s.points {
			x, y, y0 := xs.at(p.x)+offset, ys.at(p.y), ys.at(max(ys.lo, 0))
			fmt.Fprintf(b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="#222" stroke-width="0.5"><title>%s</title></rect>`,
				markClass(p), x-w/2, min(y, y0), w, math.Abs(y0-y), colour, tip(c, s, p))
		}
		b.WriteString(`</g>`)
		return
	}
	var path strings.Builder
	for i, p := range s.points {
		cmd := "L"
		if i == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, xs.at(p.x), ys.at(p.y))
	}
	fmt.Fprintf(b, `<path class="line" d="%s" stroke="%s" stroke-dasharray="%s"/>`, strings.TrimSpace(path.String()), colour, dashes[lk.line])
	for _, p := range s.points {
		fmt.Fprintf(b, `%s`, marker(shapes[lk.line], xs.at(p.x), ys.at(p.y), markerSize, colour, markClass(p), tip(c, s, p)))
	}
	b.WriteString(`</g>`)
}

func markClass(p point) string {
	if p.bad {
		return "mark bad"
	}
	return "mark"
}

func tip(c chart, s series, p point) string {
	return html.EscapeString(fmt.Sprintf("%s: %s %s, %s %s", s.name, c.xLabel, number(round3(p.x)), c.yLabel, number(round3(p.y))))
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// markerSize is the half-width of a chart's marks, in px.
const markerSize = 3.5

// marker draws one mark of a shape, r px from its centre to its side, at
// x, y: a circle, a square, a triangle, a diamond, or a tick (a thin bar
// 2r tall).
func marker(shape string, x, y, r float64, colour, class, title string) string {
	t := "<title>" + title + "</title>"
	switch shape {
	case "square":
		return fmt.Sprintf(`<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s">%s</rect>`, class, x-r, y-r, 2*r, 2*r, colour, t)
	case "triangle":
		return fmt.Sprintf(`<polygon class="%s" points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s">%s</polygon>`,
			class, x, y-r-1, x-r-1, y+r, x+r+1, y+r, colour, t)
	case "diamond":
		return fmt.Sprintf(`<polygon class="%s" points="%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s">%s</polygon>`,
			class, x, y-r-1, x+r+1, y, x, y+r+1, x-r-1, y, colour, t)
	case "tick":
		return fmt.Sprintf(`<rect class="%s" x="%.1f" y="%.1f" width="1.2" height="%.1f" fill="%s">%s</rect>`, class, x-0.6, y-r, 2*r, colour, t)
	}
	return fmt.Sprintf(`<circle class="%s" cx="%.1f" cy="%.1f" r="%.1f" fill="%s">%s</circle>`, class, x, y, r, colour, t)
}

// legendRowH is the height of a row of the legend, in px.
const legendRowH = 16

// legendRows lays the series out in rows of the legend, as many as fit
// across the chart each: rows of their indexes.
func (c chart) legendRows() [][]int {
	var rows [][]int
	x := float64(marginL)
	for i, s := range c.series {
		w := legendWidth(s.name)
		if len(rows) == 0 || x+w > chartW {
			rows, x = append(rows, nil), marginL
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], i)
		x += w
	}
	return rows
}

func legendWidth(label string) float64 { return 28 + 7*float64(len([]rune(label))) }

// legend names every series, with its colour, dash and shape, above the
// plot, in rows.
func (c chart) legend(b *strings.Builder, rows [][]int) {
	for r, row := range rows {
		x, y := float64(marginL), float64(marginT-10+r*legendRowH)
		for _, i := range row {
			s := c.series[i]
			lk := lookOf(i, s)
			fmt.Fprintf(b, `<g class="legend-item"><line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="%s"/>`,
				x, x+18, y, y, palette[lk.colour], dashes[lk.line])
			b.WriteString(marker(shapes[lk.line], x+9, y, markerSize, palette[lk.colour], "legend-mark", html.EscapeString(s.name)))
			fmt.Fprintf(b, `<text class="legend" x="%.1f" y="%.1f">%s</text></g>`, x+22, y+4, html.EscapeString(s.name))
			x += legendWidth(s.name)
		}
	}
}
