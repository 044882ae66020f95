package reports

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/skew"
)

// Page is what an HTML report shows: saved results of every kind, each
// with the name it is shown by (its file, say). bench http runs are drawn
// together, one series per run, and bench rls runs apart from them, alike;
// the others one after another.
type Page struct {
	Bench   []Named[bench.Result]
	Race    []Named[race.Report]
	Compare []Named[compare.Report]
	Skew    []Named[skew.Report]
	Drill   []Named[drill.Report]
}

// Named is a result and the name the page shows it by.
type Named[T any] struct {
	Name   string
	Result T
}

// Add decodes one result saved with --output json (by race, compare,
// skew, drill, bench http or bench rls) into the page, shown by name.
func (p *Page) Add(name string, data []byte) error {
	var kind struct{ Command string }
	if err := json.Unmarshal(data, &kind); err != nil {
		return fmt.Errorf("not a ratelab JSON result: %w", err)
	}
	switch kind.Command {
	case "bench_http", "bench_rls":
		return addNamed(data, name, &p.Bench)
	case "race":
		return addNamed(data, name, &p.Race)
	case "compare":
		return addNamed(data, name, &p.Compare)
	case "skew":
		return addNamed(data, name, &p.Skew)
	case "drill":
		return addNamed(data, name, &p.Drill)
	}
	return fmt.Errorf("a %q result, which report html does not draw", kind.Command)
}

func addNamed[T any](data []byte, name string, into *[]Named[T]) error {
	var r T
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	*into = append(*into, Named[T]{Name: name, Result: r})
	return nil
}

// HTML writes one self-contained page (inline SVG and CSS, no script, no
// font or anything else from the network) that draws the results.
func HTML(w io.Writer, p Page) error {
	var b strings.Builder
	b.WriteString(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ratelab report</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:800px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ccc}h3{font-size:15px}
figure.chart{margin:18px 0}svg{display:block;max-width:100%;height:auto}
.title{font-weight:600;font-size:13px}.tick,.legend,.limit-label{font-size:11px}.axis{font-size:12px}
.plot{fill:none;stroke:#888}.lane{stroke:#ccc;stroke-width:1}.grid{stroke:#e4e4e4}.line{fill:none;stroke-width:1.6}
.limit{stroke:#c00;stroke-dasharray:4 2}.limit-label{fill:#c00;text-anchor:end}
.mark.bad{stroke:#c00;stroke-width:1.5}.band{fill:#f2e3c8}.band-label{font-size:11px;fill:#8a5a00}.empty{text-anchor:middle;fill:#888}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f4f4f4}td:first-child{text-align:left}p.note{color:#555;font-size:12px}
</style></head><body>
<h1>ratelab report</h1>
`)
	b.WriteString(`<p class="note">Every chart labels its axes with their units; series differ in colour, dash and marker shape, and every mark
names its values when pointed at; a run, or an algorithm, keeps its colour in every chart. Marks drawn with a red outline
break the limit they are drawn against.</p>
`)
	for _, g := range benchGroups(p.Bench) {
		benchSection(&b, g, len(p.Bench) > 1)
	}
	for i, r := range p.Race {
		raceSection(&b, i, r)
	}
	for i, r := range p.Compare {
		compareSection(&b, i, r)
	}
	for i, r := range p.Skew {
		skewSection(&b, i, r)
	}
	for i, r := range p.Drill {
		drillSection(&b, i, r)
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func heading(b *strings.Builder, level int, text string) {
	fmt.Fprintf(b, "<h%d>%s</h%d>\n", level, html.EscapeString(text), level)
}

func note(b *strings.Builder, text string) {
	fmt.Fprintf(b, "<p class=\"note\">%s</p>\n", html.EscapeString(text))
}

// benchGroup is the runs of one command (bench http, bench rls), drawn
// together in a section of their own, and how that section speaks of them.
type benchGroup struct {
	runs []Named[bench.Result]
	// title is the section's heading; id begins its charts' ids.
	title, id string
	// call names what the runs sent (request, call), answers what came
	// back (responses, answers), and by what they are told apart (status,
	// code).
	call, answers, by string
	// classes are the timeline's status classes drawn, each with its
	// label: 2xx and 429 for HTTP; a rate limit service's codes, which
	// its runs keep as statuses (OK as 200, OVER_LIMIT as 429, UNKNOWN as
	// 500), for bench rls.
	classes [][2]string
}

// benchGroups splits runs by command, bench http's first, each keeping
// the order given.
func benchGroups(runs []Named[bench.Result]) []benchGroup {
	httpRuns := benchGroup{title: "bench http", id: "bench", call: "request", answers: "responses", by: "status", classes: [][2]string{
		{"2xx", "2xx"}, {"429", "429"}, {"4xx", "4xx"}, {"5xx", "5xx"}, {"errors", "errors"}, {"1xx", "1xx"}, {"3xx", "3xx"}}}
	rlsRuns := benchGroup{title: "bench rls", id: "rls", call: "call", answers: "answers", by: "code", classes: [][2]string{
		{"2xx", "OK"}, {"429", "OVER_LIMIT"}, {"5xx", "UNKNOWN"}, {"errors", "gRPC errors"},
		{"4xx", "other code (4xx)"}, {"1xx", "other code (1xx)"}, {"3xx", "other code (3xx)"}}}
	for _, r := range runs {
		if r.Result.Command == "bench_rls" {
			rlsRuns.runs = append(rlsRuns.runs, r)
		} else {
			httpRuns.runs = append(httpRuns.runs, r)
		}
	}
	var gs []benchGroup
	for _, g := range []benchGroup{httpRuns, rlsRuns} {
		if len(g.runs) > 0 {
			gs = append(gs, g)
		}
	}
	return gs
}

// benchSection draws a group's runs; labelled, when the page holds
// several runs, names the run of each audit paragraph.
func benchSection(b *strings.Builder, g benchGroup, labelled bool) {
	heading(b, 2, g.title)
	runs := g.runs
	for _, r := range runs {
		note(b, r.Name+": "+benchSummary(r.Result))
	}
	throughput := chart{id: g.id + "-throughput", title: "Throughput over time", xLabel: "time (s)", yLabel: g.answers + "/s"}
	latency := chart{id: g.id + "-latency", title: "Latency over time (from when each " + g.call + " was due)", xLabel: "time (s)", yLabel: "latency (ms)"}
	spectrum := chart{id: g.id + "-spectrum", title: "Latency by percentile", xLabel: "percentile", yLabel: "latency (ms)",
		xLog: true, xTicks: spectrumTicks()}
	for i, r := range runs {
		tl := r.Result.Timeline
		var rps, p50, p99 []point
		for _, iv := range tl.Intervals {
			x := float64(iv.StartMillis) / 1000
			rps = append(rps, point{x: x, y: iv.ThroughputRPS})
			if iv.Requests > 0 {
				p50 = append(p50, point{x: x, y: float64(iv.LatencyMicros.P50) / 1000})
				p99 = append(p99, point{x: x, y: float64(iv.LatencyMicros.P99) / 1000})
			}
		}
		// A run keeps its colour in every chart; its p50 and p99 differ by line.
		own := func(name string, pts []point, line int) series {
			return series{name: name, points: pts, look: look{colour: i, line: line}, fixed: true}
		}
		throughput.series = append(throughput.series, own(r.Name, rps, i))
		latency.series = append(latency.series, own(r.Name+" p50", p50, 2*i), own(r.Name+" p99", p99, 2*i+1))
		if h, err := r.Result.DecodeHistogram("all"); err == nil {
			spectrum.series = append(spectrum.series, own(r.Name, spectrumPoints(hdr.PercentilesOf(h)), i))
		}
	}
	b.WriteString(throughput.svg() + latency.svg())
	for i, r := range runs {
		status := chart{id: fmt.Sprintf("%s-status-%d", g.id, i), title: strings.ToUpper(g.answers[:1]) + g.answers[1:] + " by " + g.by + " over time: " + r.Name,
			xLabel: "time (s)", yLabel: g.answers + " per interval"}
		for _, class := range g.classes {
			var pts []point
			for _, iv := range r.Result.Timeline.Intervals {
				pts = append(pts, point{x: float64(iv.StartMillis) / 1000, y: float64(iv.Status[class[0]])})
			}
			if sum(pts) > 0 {
				status.series = append(status.series, series{name: class[1], points: pts})
			}
		}
		b.WriteString(status.svg())
	}
	b.WriteString(spectrum.svg())
	for i, r := range runs {
		a := r.Result.Audit
		if a == nil || len(a.Limits) == 0 {
			continue
		}
		for k, lim := range a.Limits {
			if lim.Descriptor != "" || lim.Verdict == audit.NotJudged {
				continue // drawn per consumer: a rules limit counts on counters of its own
			}
			if !auditChart(b, g.id, r, i, k, lim, a) {
				break
			}
		}
		for _, n := range benchNotes(r.Result)[1:] {
			if labelled {
				n = r.Name + ": " + n
			}
			note(b, n)
		}
	}
}

// auditChart draws the admissions of each consumer (the worst eight) in
// each window of the audit's limit k of run i of the group whose charts'
// ids begin with group. It says false when the run's responses were not
// kept, and nothing can be drawn of it.
func auditChart(b *strings.Builder, group string, r Named[bench.Result], i, k int, lim audit.LimitAudit, a *audit.Audit) bool {
	windows, err := r.Result.RollingAdmissionsOf(k, max(r.Result.Config.Consumers, 1))
	if err != nil {
		note(b, r.Name+": the audit's responses were not kept ("+err.Error()+"): no picture of it")
		return false
	}
	end := int64(r.Result.DurationSeconds * 1000)
	if a.CappedFromMillis != nil {
		end = min(end, *a.CappedFromMillis)
	}
	windows, cut := wholeWindows(windows, lim.WindowMillis, end)
	shown := worstFirst(windows)[:min(len(windows), maxSeries)]
	title := fmt.Sprintf("Admissions per consumer in each %d ms window: %s", lim.WindowMillis, r.Name)
	if len(shown) < len(windows) {
		title = fmt.Sprintf("Admissions per consumer in each %d ms window, the worst %d of %d: %s",
			lim.WindowMillis, len(shown), len(windows), r.Name)
	}
	if len(a.Limits) > 1 {
		title += " (" + lim.Label() + ")"
	}
	id := fmt.Sprintf("%s-audit-%d", group, i)
	if k > 0 {
		id = fmt.Sprintf("%s-audit-%d-%d", group, i, k)
	}
	c := chart{id: id, title: title, xLabel: "window start (s)", yLabel: "admitted in the window"}
	for _, cw := range shown {
		var pts []point
		for _, p := range cw.Points {
			pts = append(pts, point{x: float64(p.AtMillis) / 1000, y: float64(p.Admitted), bad: p.Admitted > cw.Allowed})
		}
		c.series = append(c.series, series{name: cw.Consumer, points: pts})
		if len(c.limits) == 0 {
			c.limits = append(c.limits, limitLine{y: float64(cw.Allowed), label: "allowed: " + strconv.FormatInt(cw.Allowed, 10)})
		}
	}
	b.WriteString(c.svg())
	if len(shown) < len(windows) {
		note(b, fmt.Sprintf("%s: the chart draws the worst %d consumers, those admitted the most in one window; the other %d are not drawn.",
			r.Name, len(shown), len(windows)-len(shown)))
	}
	if cut {
		note(b, fmt.Sprintf("%s: windows that begin less than %d ms before the run's end are not drawn: the run stopped inside them.",
			r.Name, lim.WindowMillis))
	}
	return true
}

// wholeWindows keeps, of each consumer's windows, those that end by end
// (ms since the run began): a window the run stopped inside would read as
// a fall in admissions. It says whether it left any out.
func wholeWindows(ws []bench.ConsumerWindows, windowMillis, end int64) ([]bench.ConsumerWindows, bool) {
	cut := false
	out := make([]bench.ConsumerWindows, 0, len(ws))
	for _, cw := range ws {
		whole := cw
		whole.Points = nil
		for _, p := range cw.Points {
			if p.AtMillis+windowMillis > end {
				cut = true
				continue
			}
			whole.Points = append(whole.Points, p)
		}
		out = append(out, whole)
	}
	return out, cut
}

// worstFirst orders consumers by the most they were admitted in one
// window, the most first; ties keep their order.
func worstFirst(ws []bench.ConsumerWindows) []bench.ConsumerWindows {
	peak := func(cw bench.ConsumerWindows) int64 {
		var m int64
		for _, p := range cw.Points {
			m = max(m, p.Admitted)
		}
		return m
	}
	out := slices.Clone(ws)
	slices.SortStableFunc(out, func(a, b bench.ConsumerWindows) int { return cmp.Compare(peak(b), peak(a)) })
	return out
}

// spectrumTicks label the percentile axis, drawn as 1/(1-p) on a log scale
// as HdrHistogram's plotter does.
func spectrumTicks() []tick {
	return []tick{{1, "0%"}, {10, "90%"}, {100, "99%"}, {1000, "99.9%"}, {10000, "99.99%"}, {100000, "99.999%"}}
}

// spectrumPoints places percentiles on that axis; max goes just past the
// last percentile the count supports.
func spectrumPoints(p hdr.Percentiles) []point {
	if p.Count == 0 {
		return nil
	}
	at := func(q float64) float64 { return 1 / (1 - q/100) }
	pts := []point{
		{x: at(50), y: float64(p.P50) / 1000}, {x: at(90), y: float64(p.P90) / 1000}, {x: at(95), y: float64(p.P95) / 1000},
		{x: at(99), y: float64(p.P99) / 1000}, {x: at(99.9), y: float64(p.P999) / 1000},
	}
	maxAt := math.Max(at(99.9)*2, float64(p.Count))
	return append(pts, point{x: maxAt, y: float64(p.Max) / 1000})
}

func sum(pts []point) float64 {
	var s float64
	for _, p := range pts {
		s += p.y
	}
	return s
}

func raceSection(b *strings.Builder, i int, r Named[race.Report]) {
	if len(r.Result.InFlight) > 0 {
		inFlightSection(b, i, r)
		return
	}
	heading(b, 2, "race: "+r.Name)
	note(b, raceSummary(r.Result))
	note(b, RaceVerdict(r.Result))
	admitted := chart{id: fmt.Sprintf("race-admitted-%d", i), title: "Admitted per trial",
		xLabel: "trial", yLabel: "requests admitted", limits: []limitLine{{y: float64(r.Result.Config.Limit), label: "limit"}}}
	lat := chart{id: fmt.Sprintf("race-latency-%d", i), title: "Decision latency by percentile", xLabel: "percentile",
		yLabel: "latency (ms)", xLog: true, xTicks: spectrumTicks()}
	perTrial := chart{id: fmt.Sprintf("race-trial-latency-%d", i), title: "Decision latency per trial, p99",
		xLabel: "trial", yLabel: "p99 latency (ms)"}
	for _, res := range r.Result.Results {
		var pts, p99s []point
		for t, tr := range res.TrialResults {
			pts = append(pts, point{x: float64(t + 1), y: float64(tr.Admitted), bad: tr.Admitted > tr.Expected})
			p99s = append(p99s, point{x: float64(t + 1), y: float64(tr.LatencyMicros.P99) / 1000})
		}
		admitted.series = append(admitted.series, series{name: res.Limiter, points: pts})
		lat.series = append(lat.series, series{name: res.Limiter, points: spectrumPoints(res.LatencyMicros)})
		perTrial.series = append(perTrial.series, series{name: res.Limiter, points: p99s})
	}
	b.WriteString(admitted.svg())
	note(b, "A red outline marks a trial that admitted more than the limiter's own guarantee allowed over the trial's span.")
	b.WriteString(lat.svg())
	b.WriteString(perTrial.svg())
	note(b, "Each trial's p99 is exact: the 99th percentile of that trial's decisions, retries included.")
	for j, res := range r.Result.Results {
		ex := res.Explain
		switch {
		case ex == nil:
		case ex.Skipped != "":
			note(b, res.Limiter+", explained: no trace: "+ex.Skipped)
		case len(ex.Lanes) > 0:
			title := fmt.Sprintf("%s, explained: %s of %s as Redis executed them", res.Limiter, plural.Count(ex.Commands, "command"),
				plural.Count(len(ex.Lanes), "goroutine"))
			b.WriteString(swimlanes(fmt.Sprintf("race-lanes-%d-%d", i, j), title, ex))
			text := fmt.Sprintf("One more trial of %s, with MONITOR on (its latency is not comparable): %s, %d of %s stale, "+
				"%d admitted where the guarantee allowed %d. A goroutine's lane runs from its first command to its last; a script's own commands are in its call.",
				res.Limiter, plural.Count(ex.Decisions, "decision"), ex.StaleReads, plural.Count(ex.Reads, "read"), ex.Admitted, ex.Trial.Expected)
			if ex.LanesCut > 0 {
				text += fmt.Sprintf(" The lanes stop after the first %d commands, leaving out %s.", race.MaxLaneCommands, plural.Count(ex.LanesCut, "more command"))
			}
			note(b, text)
		}
	}
}

func compareSection(b *strings.Builder, i int, r Named[compare.Report]) {
	rep := r.Result
	heading(b, 2, "compare: "+r.Name)
	note(b, compareSummary(rep))
	htmlTable(b, compareHeaders(rep), func(yield func([]string)) {
		for _, res := range rep.Results {
			yield(compareRow(rep, res))
		}
	})
	boundary := chart{id: fmt.Sprintf("compare-boundary-%d", i), title: "Boundary: a full limit 1 ms before a window edge, another at it",
		xLabel: "time (ms)", yLabel: "admitted at that instant", limits: []limitLine{{y: float64(rep.Config.Limit), label: "limit"}},
		xTicks: []tick{{0, "0: 1 ms before the edge"}, {1, "1: at the edge"}}}
	hammer := chart{id: fmt.Sprintf("compare-hammer-%d", i), title: "Hammer: one client at 3× the limit, then a retry every 100 ms",
		xLabel: "time (ms)", yLabel: "admitted in the window before", limits: []limitLine{{y: float64(rep.Config.Limit), label: "limit"}}}
	memory := chart{id: fmt.Sprintf("compare-memory-%d", i), title: "Memory per client by limit", xLabel: "limit (requests per window)",
		yLabel: "bytes per client", xLog: true, yLog: true}
	for k, res := range rep.Results {
		own := look{colour: k, line: k} // an algorithm looks the same in every chart
		if len(res.BoundaryTimeline) > 0 {
			byAt := map[int64]int64{}
			for _, d := range res.BoundaryTimeline {
				if d.Allowed {
					byAt[d.AtMillis]++
				}
			}
			var pts []point
			for _, at := range sortedKeys64(byAt) {
				pts = append(pts, point{x: float64(at), y: float64(byAt[at])})
			}
			boundary.series = append(boundary.series, series{name: res.Algorithm, points: pts, bars: true, look: own, fixed: true})
		}
		if len(res.HammerTimeline) > 0 {
			hammer.series = append(hammer.series, series{name: res.Algorithm, look: own, fixed: true,
				points: rolling(res.HammerTimeline, rep.Config.WindowMillis, rep.Config.Limit)})
		}
		var pts []point
		for _, limit := range sortedLimits(res.BytesPerClient) {
			pts = append(pts, point{x: float64(limit), y: float64(res.BytesPerClient[strconv.FormatInt(limit, 10)])})
		}
		if len(pts) > 0 {
			memory.series = append(memory.series, series{name: res.Algorithm, points: pts, look: own, fixed: true})
		}
	}
	b.WriteString(boundary.svg() + hammer.svg() + memory.svg())
}

// rolling is, at each admission, how many were admitted in the window up
// to it.
func rolling(ds []compare.Decision, windowMillis, limit int64) []point {
	var at []int64
	var pts []point
	for _, d := range ds {
		if !d.Allowed {
			continue
		}
		at = append(at, d.AtMillis)
		n := 0
		for _, t := range at {
			if d.AtMillis-t < windowMillis {
				n++
			}
		}
		pts = append(pts, point{x: float64(d.AtMillis), y: float64(n), bad: int64(n) > limit})
	}
	return pts
}

func sortedKeys64(m map[int64]int64) []int64 {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

func sortedLimits(m map[string]int64) []int64 {
	var limits []int64
	for k := range m {
		if n, err := strconv.ParseInt(k, 10, 64); err == nil {
			limits = append(limits, n)
		}
	}
	sort.Slice(limits, func(i, j int) bool { return limits[i] < limits[j] })
	return limits
}

func skewSection(b *strings.Builder, i int, r Named[skew.Report]) {
	heading(b, 2, "skew: "+r.Name)
	note(b, skewSummary(r.Result))
	note(b, SkewVerdict(r.Result))
	c := chart{id: fmt.Sprintf("skew-%d", i), title: "Over-admitted as the nodes' clocks drift apart",
		xLabel: "largest skew between two nodes (ms)", yLabel: "admissions over the guarantee"}
	byName := map[string][]point{}
	var names []string
	for _, row := range r.Result.Rows {
		name := row.Algorithm + ", " + row.Clock + "'s clock"
		if row.Clock == "caller" {
			name = row.Algorithm + ", the nodes' clocks"
		}
		if _, ok := byName[name]; !ok {
			names = append(names, name)
		}
		byName[name] = append(byName[name], point{x: float64(row.MaxSkewMillis), y: float64(row.OverAdmitted), bad: row.OverAdmitted > 0})
	}
	for _, n := range names {
		c.series = append(c.series, series{name: n, points: byName[n]})
	}
	b.WriteString(c.svg())
}

func drillSection(b *strings.Builder, i int, r Named[drill.Report]) {
	heading(b, 2, "drill: "+r.Name)
	note(b, drillSummary(r.Result))
	note(b, DrillVerdict(r.Result))
	for j, row := range r.Result.Results {
		tl := row.Timeline
		if tl == nil {
			continue
		}
		c := chart{id: fmt.Sprintf("drill-%d-%d", i, j), title: row.Name(), xLabel: "time (s)",
			yLabel: fmt.Sprintf("requests per %d ms", tl.IntervalMillis),
			bands:  []band{{from: float64(tl.FaultFromMillis) / 1000, to: float64(tl.FaultToMillis) / 1000, label: row.Fault}}}
		var admitted, over, errs, wrong []point
		for _, iv := range tl.Intervals {
			x := float64(iv.StartMillis) / 1000
			admitted = append(admitted, point{x: x, y: float64(iv.Admitted)})
			over = append(over, point{x: x, y: float64(iv.OverAdmitted), bad: iv.OverAdmitted > 0})
			errs = append(errs, point{x: x, y: float64(iv.Errors)})
			wrong = append(wrong, point{x: x, y: float64(iv.WronglyDenied)})
		}
		c.series = []series{{name: "admitted", points: admitted}, {name: "over the guarantee", points: over},
			{name: "not decided by Redis", points: errs}, {name: "wrongly refused", points: wrong}}
		b.WriteString(c.svg())
	}
}

func htmlTable(b *strings.Builder, headers []string, rows func(func([]string))) {
	b.WriteString("<table><tr>")
	for _, h := range headers {
		fmt.Fprintf(b, "<th>%s</th>", html.EscapeString(h))
	}
	b.WriteString("</tr>\n")
	rows(func(row []string) {
		b.WriteString("<tr>")
		for _, c := range row {
			fmt.Fprintf(b, "<td>%s</td>", html.EscapeString(c))
		}
		b.WriteString("</tr>\n")
	})
	b.WriteString("</table>\n")
}
