package reports

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/ratelab/ratelab/race"
)

// laneStyle is how a command of a lane is drawn: its shape by what it did
// to the count, its fill by its mark in the race. Shapes and fills both
// tell, so the picture reads without colour.
type laneStyle struct {
	label, shape, fill string
}

var (
	laneRoles = []struct {
		role string
		laneStyle
	}{
		{race.RoleRead, laneStyle{"read of the count", "circle", "#0072B2"}},
		{race.RoleWrite, laneStyle{"write of the count", "square", "#0072B2"}},
		{race.RoleCall, laneStyle{"script call", "diamond", "#0072B2"}},
		{race.RoleOther, laneStyle{"other command", "tick", "#999999"}},
	}
	laneMarks = []struct {
		mark, label, fill string
		bad               bool
	}{
		{"stale", "stale read", "#E69F00", false},
		{"over", "admitted over the guarantee", "#D55E00", true},
		{"aborted", "EXEC aborted", "#D55E00", true},
		{"phantom", "phantom member", "#CC79A7", false},
	}
)

// Geometry of a swimlane chart, in px.
const (
	laneTop      = 64 // room for two rows of legend
	lanesHeight  = 480
	laneMin      = 3
	laneMax      = 16
	laneLabelMin = 10 // lanes thinner than this label only some of their goroutines
)

// swimlanes draws an explained trial: one lane per goroutine on a shared
// time axis (µs since the trace's first command, on Redis's clock), a mark
// per command. Its figure's data-marks is the number of commands.
func swimlanes(id, title string, ex *race.Explanation) string {
	n := len(ex.Lanes)
	commands := 0
	var span int64 = 1
	for _, l := range ex.Lanes {
		commands += len(l.Commands)
		for _, c := range l.Commands {
			span = max(span, c.Micros)
		}
	}
	laneH := max(laneMin, min(laneMax, lanesHeight/max(n, 1)))
	h := laneTop + n*laneH + marginB
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="chart" id="%s" data-marks="%d">`, html.EscapeString(id), commands)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		chartW, h, chartW, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<text class="title" x="%d" y="16">%s</text>`, marginL, html.EscapeString(title))
	xs := scale{lo: 0, hi: float64(span) * 1.02, from: marginL, to: marginL + plotW}
	bottom := laneTop + n*laneH
	fmt.Fprintf(&b, `<rect class="plot" x="%d" y="%d" width="%d" height="%d"/>`, marginL, laneTop, plotW, n*laneH)
	for _, t := range ticksOf(xs) {
		x := xs.at(t.at)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/>`, x, x, laneTop, bottom)
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, bottom+14, html.EscapeString(t.label))
	}
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="middle">%s</text>`, marginL+plotW/2, h-8,
		"time since the trial's first command, on Redis's clock (µs)")
	fmt.Fprintf(&b, `<text class="axis" transform="translate(14 %d) rotate(-90)" text-anchor="middle">goroutine</text>`, laneTop+n*laneH/2)
	every := 1
	if laneH < laneLabelMin {
		every = int(math.Ceil(float64(laneLabelMin) / float64(laneH)))
	}
	r := max(1.2, min(3.5, float64(laneH)*0.35))
	for i, l := range ex.Lanes {
		y := float64(laneTop) + (float64(i)+0.5)*float64(laneH)
		if i%every == 0 {
			fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, marginL-6, y+3.5, html.EscapeString(l.Goroutine))
		}
		fmt.Fprintf(&b, `<g class="series" data-series="%s">`, html.EscapeString(l.Goroutine))
		if len(l.Commands) > 1 {
			fmt.Fprintf(&b, `<line class="lane" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`,
				xs.at(float64(l.Commands[0].Micros)), xs.at(float64(l.Commands[len(l.Commands)-1].Micros)), y, y)
		}
		for _, c := range l.Commands {
			st, class := commandStyle(c)
			tipText := fmt.Sprintf("%s %s at +%d µs", l.Goroutine, c.Name, c.Micros)
			if c.Mark != "" {
				tipText += " (" + c.Mark + ")"
			}
			b.WriteString(marker(st.shape, xs.at(float64(c.Micros)), y, r, st.fill, class, html.EscapeString(tipText)))
		}
		b.WriteString(`</g>`)
	}
	laneLegend(&b, ex, r)
	b.WriteString(`</svg></figure>`)
	return b.String()
}

// commandStyle is the shape and fill of a command, and its class.
func commandStyle(c race.LaneCommand) (laneStyle, string) {
	st := laneRoles[len(laneRoles)-1].laneStyle
	for _, r := range laneRoles {
		if r.role == c.Role {
			st = r.laneStyle
		}
	}
	for _, m := range laneMarks {
		if m.mark == c.Mark {
			st.fill = m.fill
			if m.bad {
				return st, "mark bad"
			}
		}
	}
	return st, "mark"
}

// laneLegend names the shapes of the roles the trace has, and the fills of
// its marks, in up to two rows above the lanes.
func laneLegend(b *strings.Builder, ex *race.Explanation, r float64) {
	roles, marks := map[string]bool{}, map[string]bool{}
	for _, l := range ex.Lanes {
		for _, c := range l.Commands {
			roles[c.Role], marks[c.Mark] = true, true
		}
	}
	type item struct{ shape, fill, label string }
	var items []item
	for _, ro := range laneRoles {
		if roles[ro.role] {
			items = append(items, item{ro.shape, ro.fill, ro.label})
		}
	}
	for _, m := range laneMarks {
		if marks[m.mark] {
			items = append(items, item{"square", m.fill, m.label})
		}
	}
	x, y := float64(marginL), 34.0
	for _, it := range items {
		w := 22 + 6.5*float64(len(it.label))
		if x+w > chartW {
			x, y = marginL, y+16
		}
		b.WriteString(`<g class="legend-item">`)
		b.WriteString(marker(it.shape, x+6, y, max(r, 3), it.fill, "legend-mark", html.EscapeString(it.label)))
		fmt.Fprintf(b, `<text class="legend" x="%.1f" y="%.1f">%s</text></g>`, x+14, y+4, html.EscapeString(it.label))
		x += w
	}
}
