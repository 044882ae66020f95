package reports

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/plural"
)

// BenchHTTP renders an HTTP load run in the given format.
func BenchHTTP(w io.Writer, r bench.Result, f Format, opt Options) error {
	switch f {
	case JSON:
		return writeJSON(w, r)
	case Markdown:
		return benchMarkdown(w, r)
	default:
		return benchTable(w, r, NewStyles(w, opt))
	}
}

// benchTitle names the command that measured r: ratelab bench http, or
// ratelab bench rls.
func benchTitle(r bench.Result) string {
	if r.Command == "bench_rls" {
		return "ratelab bench rls"
	}
	return "ratelab bench http"
}

func benchSummary(r bench.Result) string {
	c := r.Config
	load := fmt.Sprintf("closed model, %d connections", c.Connections)
	if c.Model == "open" {
		load = fmt.Sprintf("open model at %g/s on %d connections", c.RatePerSec, c.Connections)
	}
	if c.Threads > 0 {
		load += fmt.Sprintf(", %d threads", c.Threads)
	}
	consumers := ""
	switch {
	case c.SourceIPs != "":
		consumers = fmt.Sprintf(" · %s from %s", plural.Count(c.Consumers, "consumer"), c.SourceIPs)
	case c.Consumers > 0:
		in := c.ConsumerHeader
		if len(c.IdentityIn) > 0 {
			in = strings.Join(c.IdentityIn, ", ")
		}
		consumers = fmt.Sprintf(" · %d consumers in %s", c.Consumers, in)
	}
	return fmt.Sprintf("%s %s · %s%s · %d requests in %.2fs (%.0f/s) · warm-up %s (%d requests, not counted)",
		c.Method, r.Target, load, consumers, r.Requests, r.DurationSeconds, r.ThroughputRPS,
		time.Duration(c.WarmupMillis)*time.Millisecond, r.WarmupRequests)
}

func benchHeaders() []string {
	return []string{"responses", "count", "p50", "p90", "p95", "p99", "p99.9", "max"}
}

func benchRows(r bench.Result) [][]string {
	row := func(name string, p hdr.Percentiles) []string {
		if p.Count == 0 {
			return []string{name, "0", "–", "–", "–", "–", "–", "–"}
		}
		return []string{name, strconv.FormatInt(p.Count, 10), micros(p.P50), micros(p.P90), micros(p.P95),
			micros(p.P99), micros(p.P999), micros(p.Max)}
	}
	// Responses only above the line; the time failed connections took to
	// fail is no response time, and gets a row of its own.
	names := [5]string{"all responses", "2xx", "429", "other status", "no response (time to fail)"}
	if r.Command == "bench_rls" { // an OK call counts as a 2xx, OVER_LIMIT as a 429
		names = [5]string{"all answers", "OK (2xx)", "OVER_LIMIT (429)", "other code", "no answer (time to fail)"}
	}
	rows := [][]string{
		row(names[0], r.LatencyMicros), row(names[1], r.Latency2xxMicros), row(names[2], r.Latency429Micros),
		row(names[3], r.LatencyOtherMicros), row(names[4], r.LatencyErrorMicros),
	}
	kinds := make([]string, 0, len(r.ErrorKinds))
	for k, e := range r.ErrorKinds {
		if e.Count > 0 {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		rows = append(rows, []string{"  " + k, strconv.FormatInt(r.ErrorKinds[k].Count, 10), "–", "–", "–", "–", "–", "–"})
	}
	return rows
}

// benchNotes are a run's notes, its audit's in prose (a line per limit):
// what the HTML page prints.
func benchNotes(r bench.Result) []string {
	before, after := benchNoteParts(r)
	if a := r.Audit; a != nil {
		before = append(before, auditNotes(r, a)...)
	}
	return append(before, after...)
}

// benchNoteParts are a run's notes around its audit: those before it (the
// statuses, the failures) and after it (the audit's own note, where it
// stopped keeping responses, the load model).
func benchNoteParts(r bench.Result) (before, after []string) {
	codes := make([]string, 0, len(r.StatusCounts))
	for k := range r.StatusCounts {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	var status []string
	for _, k := range codes {
		status = append(status, fmt.Sprintf("%s × %d", k, r.StatusCounts[k]))
	}
	before = []string{
		"status: " + orNone(strings.Join(status, ", ")) + fmt.Sprintf("; transport errors: %d%s; %s of bodies received.",
			r.Errors, errorKindsText(r.ErrorKinds), bytesText(r.Bytes)),
	}
	if f := r.Failures(); f > 0 && r.Requests > 0 {
		why := []string{}
		if st := r.FailedStatuses(); st != "" {
			why = append(why, "errors by status: "+st)
		}
		if r.Errors > 0 {
			why = append(why, fmt.Sprintf("transport errors: %d", r.Errors))
		}
		before = append(before, fmt.Sprintf("Failed: %d of %d requests (%.1f%%), as --max-error-rate counts them (%s).",
			f, r.Requests, 100*float64(f)/float64(r.Requests), strings.Join(why, "; ")))
	}
	if f := r.InFlightAudit; f != nil {
		before = append(before, inFlightAuditNotes(*f)...)
	}
	if r.AuditNote != "" {
		after = append(after, "Audit: "+r.AuditNote+".")
	}
	for _, h := range r.AuditHints {
		after = append(after, "Hint: "+h+".")
	}
	if a := r.Audit; a != nil && a.CappedFromMillis != nil {
		after = append(after, fmt.Sprintf("The audit kept %d responses and judged none after %s into the run.",
			a.Samples, time.Duration(*a.CappedFromMillis)*time.Millisecond))
	}
	if r.Config.Model == "open" {
		after = append(after, fmt.Sprintf("Latency is timed from when each request should have been sent (no coordinated omission); "+
			"send lag p50 %s, p99 %s, max %s; unsent (due, but their connection was still busy when the run ended): %d.",
			micros(r.SendLagMicros.P50), micros(r.SendLagMicros.P99), micros(r.SendLagMicros.Max), r.Unsent))
		if r.RateShortfall {
			after = append(after, fmt.Sprintf("The achieved rate, %.0f/s, is under 99%% of the %g/s asked for: the server (or the "+
				"load generator) could not keep up; with one request in flight per connection, more --connections may help.",
				r.ThroughputRPS, r.Config.RatePerSec))
		}
	} else {
		after = append(after, "Closed model: each worker waits for a response before it sends again, so a stall delays "+
			"the requests that were never sent, and the percentiles do not show it (use --rate for that).")
	}
	return before, after
}

// statusesSeen lists every status of the run, and its transport errors.
func statusesSeen(r bench.Result) string {
	codes := make([]string, 0, len(r.StatusCounts))
	for k := range r.StatusCounts {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	var seen []string
	for _, k := range codes {
		seen = append(seen, fmt.Sprintf("%s × %d", k, r.StatusCounts[k]))
	}
	if r.Errors > 0 {
		seen = append(seen, fmt.Sprintf("transport errors × %d", r.Errors))
	}
	return orNone(strings.Join(seen, ", "))
}

// errorKindsText lists the error kinds with a count, and the first message of each.
func errorKindsText(kinds map[string]bench.ErrorKind) string {
	names := make([]string, 0, len(kinds))
	for k, e := range kinds {
		if e.Count > 0 {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, kinds[k].Count)
		if f := kinds[k].First; f != "" {
			parts[i] += fmt.Sprintf(" (first: %s)", f)
		}
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func benchTable(w io.Writer, r bench.Result, s Styles) error {
	t := table.New().Border(lipgloss.RoundedBorder()).BorderStyle(s.Border).
		Headers(benchHeaders()...).Rows(benchRows(r)...).
		StyleFunc(func(row, _ int) lipgloss.Style {
			if row == table.HeaderRow {
				return s.Header
			}
			return s.Cell
		})
	var b strings.Builder
	b.WriteString(s.Title.Render(benchTitle(r)) + "  " + benchSummary(r) + "\n")
	b.WriteString(t.Render() + "\n")
	for _, line := range benchSparklines(r) {
		b.WriteString(line + "\n")
	}
	before, after := benchNoteParts(r)
	for _, n := range before {
		b.WriteString(s.Dim.Render(n) + "\n")
	}
	if a := r.Audit; a != nil {
		if at, ok := auditTableOf(r, a); ok {
			b.WriteString(at.head + "\n")
			lt := table.New().Border(lipgloss.RoundedBorder()).BorderStyle(s.Border).Headers(at.headers...).Rows(at.rows...).
				StyleFunc(func(row, col int) lipgloss.Style {
					switch {
					case row == table.HeaderRow:
						return s.Header
					case col == 2 && at.bad[row]:
						return s.Bad
					case col == 2 && at.rows[row][2] == verdictWord(audit.Held):
						return s.Good
					}
					return s.Cell
				})
			b.WriteString(lt.Render() + "\n")
			for _, n := range at.notes {
				b.WriteString(s.Dim.Render(n) + "\n")
			}
		} else {
			for _, n := range auditNotes(r, a) {
				b.WriteString(s.Dim.Render(n) + "\n")
			}
		}
	}
	for _, n := range after {
		b.WriteString(s.Dim.Render(n) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// benchSparklines draw throughput and p99 over the timeline, one character
// per interval (at most the last 60), with the range they span and units.
func benchSparklines(r bench.Result) []string {
	ivs := r.Timeline.Intervals
	if len(ivs) < 2 {
		return nil
	}
	ivs = ivs[max(0, len(ivs)-60):]
	rps := make([]float64, len(ivs))
	p99 := make([]float64, len(ivs))
	for i, iv := range ivs {
		rps[i], p99[i] = iv.ThroughputRPS, float64(iv.LatencyMicros.P99)
	}
	every := (time.Duration(r.Timeline.IntervalMillis) * time.Millisecond).String()
	return []string{
		fmt.Sprintf("throughput %s  %.0f–%.0f responses/s, one mark per %s", sparkline(rps), minOf(rps), maxOf(rps), every),
		fmt.Sprintf("p99        %s  %s–%s", sparkline(p99), micros(int64(minOf(p99))), micros(int64(maxOf(p99)))),
	}
}

// sparkline draws values as block characters scaled from their minimum to
// their maximum.
func sparkline(v []float64) string {
	const bars = "▁▂▃▄▅▆▇█"
	blocks := []rune(bars)
	lo, hi := minOf(v), maxOf(v)
	var b strings.Builder
	for _, x := range v {
		i := 0
		if hi > lo {
			i = int((x - lo) / (hi - lo) * float64(len(blocks)-1))
		}
		b.WriteRune(blocks[i])
	}
	return b.String()
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func benchMarkdown(w io.Writer, r bench.Result) error {
	var b strings.Builder
	b.WriteString("## " + benchTitle(r) + "\n\n" + benchSummary(r) + "\n\n")
	writeMarkdownTable(&b, benchHeaders(), func(yield func([]string)) {
		for _, row := range benchRows(r) {
			yield(row)
		}
	})
	b.WriteString("\n")
	before, after := benchNoteParts(r)
	for _, n := range before {
		b.WriteString("- " + n + "\n")
	}
	if a := r.Audit; a != nil {
		if at, ok := auditTableOf(r, a); ok {
			b.WriteString("- " + at.head + "\n\n")
			writeMarkdownTable(&b, at.headers, func(yield func([]string)) {
				for _, row := range at.rows {
					yield(slices.Clone(row))
				}
			})
			b.WriteString("\n")
			for _, n := range at.notes {
				b.WriteString("- " + n + "\n")
			}
		} else {
			for _, n := range auditNotes(r, a) {
				b.WriteString("- " + n + "\n")
			}
		}
	}
	for _, n := range after {
		b.WriteString("- " + n + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// BenchProgress is the live line of a run, in the words of its protocol
// (bench.HTTPWords, bench.RLSWords).
func BenchProgress(p bench.Progress, w bench.Words) string {
	if p.Phase == "probes" {
		return fmt.Sprintf("probing %s: %s left, --no-probes skips this", w.Wait, p.ProbesLeft.Round(time.Second))
	}
	line := fmt.Sprintf("%s  done %d  %.0f/s  p99 %s  %s %.1f%%", p.Elapsed.Round(time.Second), p.Done, p.RatePerSec,
		micros(p.P99Micros), w.Denied, 100*p.LimitedShare)
	if p.Phase == "warm-up" {
		line = "warm-up  " + line
	}
	return line
}
