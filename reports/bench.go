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

// auditNotes say what the audit found, in prose: per limit, what
// limitNotes say, in one line each when there are several, after a
// headline that counts their verdicts.
func auditNotes(r bench.Result, a *audit.Audit) []string {
	var notes []string
	switch {
	case len(a.Limits) == 0: // bench rls by a configuration no call met
		notes = append(notes, fmt.Sprintf("Audit: %s: %s.", verdictWord(a.Verdict), strings.Join(a.Reasons, "; ")))
	case len(a.Limits) > 1:
		notes = append(notes, auditHead(a))
	}
	for _, l := range a.Limits {
		lines := limitNotes(r, l)
		if len(a.Limits) > 1 {
			lines = []string{strings.Join(lines, " ")} // one line per limit
		}
		notes = append(notes, lines...)
	}
	return notes
}

// auditHead is the headline of an audit of several limits: the verdict
// they share, or how many have each. It never says held when a limit was
// not tested.
func auditHead(a *audit.Audit) string {
	order := []audit.Verdict{audit.Held, audit.NotReached, audit.NoVerdict, audit.Leaked, audit.NotJudged}
	count := map[audit.Verdict]int{}
	for _, l := range a.Limits {
		count[l.Verdict]++
	}
	head := fmt.Sprintf("Audit of %d limits: ", len(a.Limits))
	if count[a.Verdict] == len(a.Limits) {
		return head + verdictWord(a.Verdict) + "."
	}
	var parts []string
	for _, v := range order {
		if n := count[v]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, v))
		}
	}
	return head + strings.Join(parts, ", ") + "."
}

// auditTable is an audit of several limits as a table, a row per limit,
// with what the table cannot say below it: the reasons of every limit
// that did not hold, under-admission, wrong headers, Retry-After. ok is
// false for an audit of one limit or none, which auditNotes say better.
type auditTable struct {
	head    string
	headers []string
	rows    [][]string
	bad     []bool // the row's limit leaked or went untested
	notes   []string
}

func auditTableOf(r bench.Result, a *audit.Audit) (auditTable, bool) {
	if len(a.Limits) < 2 {
		return auditTable{}, false
	}
	w := r.Words()
	headers := strings.ToLower(w.Checks)
	t := auditTable{head: auditHead(a),
		headers: []string{"limit", "rule", "verdict", "most in a window / limit", "denials attributed", "under-admitted", headers}}
	var skipped string
	retryAfter := map[string][]string{}
	var ras []string // the distinct Retry-After lines, in order
	for _, l := range a.Limits {
		// The rule a rules limit is on; what the others allow.
		rule := l.Rule
		if l.Descriptor != "" && l.Descriptor != l.ID {
			rule = l.Descriptor
		}
		t.bad = append(t.bad, l.Verdict != audit.Held && l.Verdict != audit.NotJudged)
		if l.Verdict == audit.NotJudged {
			t.rows = append(t.rows, []string{l.Label(), rule, verdictWord(l.Verdict), "–", "–", "–", "–"})
			t.notes = append(t.notes, fmt.Sprintf("%s: %s: %s; %d requests met it, %d admitted.", l.Label(), verdictWord(l.Verdict),
				strings.Join(l.Reasons, "; "), l.Requests, l.Admitted))
			continue
		}
		under := fmt.Sprintf("%d of %d judged", l.UnderAdmitted, l.DenialsJudged)
		if l.UnderSkipped != "" {
			under, skipped = "not judged", l.UnderSkipped
		}
		h := fmt.Sprintf("%d checked, %d wrong", l.Headers.Checked, l.Headers.Violations)
		if l.Headers.NeverAdvertised != "" {
			h += ", never advertised"
		}
		full, span := l.FullAt, time.Duration(l.FullSpanMillis)*time.Millisecond
		if full == 0 { // a result written before the audit said it
			full, span = l.Limit, time.Duration(l.WindowMillis)*time.Millisecond
		}
		t.rows = append(t.rows, []string{l.Label(), rule, verdictWord(l.Verdict), fmt.Sprintf("%d / %d in %s", l.MostInWindow, full, windowText(span)),
			fmt.Sprintf("%d of %d", l.DenialsAttributed, l.Denials), under, h})
		if l.Verdict != audit.Held {
			n := fmt.Sprintf("%s: %s: %s.", l.Label(), verdictWord(l.Verdict), strings.Join(l.Reasons, "; "))
			if l.Verdict == audit.NoVerdict {
				n += " Statuses seen: " + statusesSeen(r) + "."
			}
			t.notes = append(t.notes, n)
		} else if l.Headers.NeverAdvertised != "" {
			t.notes = append(t.notes, fmt.Sprintf("%s: the gateway %s.", l.Label(), l.Headers.NeverAdvertised))
		}
		if l.UnderSkipped == "" && (l.UnderAdmitted > 0 || l.DenialsUnjudged > 0) {
			t.notes = append(t.notes, l.Label()+": "+underNote(l))
		}
		if l.Headers.Violations > 0 {
			t.notes = append(t.notes, fmt.Sprintf("%s: %s: %d of %d %s checked were wrong (%s).", l.Label(), w.Checks,
				l.Headers.Violations, l.Headers.Checked, w.Answers, l.Headers.Example))
		}
		ra := retryAfterNote(r, l)
		if _, seen := retryAfter[ra]; !seen {
			ras = append(ras, ra)
		}
		retryAfter[ra] = append(retryAfter[ra], l.Label())
	}
	if skipped != "" {
		t.notes = append(t.notes, "Under-admission: not judged ("+skipped+").")
	}
	for _, ra := range ras {
		if len(ras) > 1 {
			ra = strings.Join(retryAfter[ra], ", ") + ": " + ra
		}
		t.notes = append(t.notes, ra)
	}
	return t, true
}

// limitNotes say what the audit found of one limit: its verdict and then,
// unless it could not judge (when it says why, and nothing else), what it
// found of admissions, denials, Retry-After and the headers.
func limitNotes(r bench.Result, l audit.LimitAudit) []string {
	held := "the sliding-window rule"
	if l.Algorithm != "" {
		held = l.Algorithm
	}
	window := time.Duration(l.WindowMillis) * time.Millisecond
	head := fmt.Sprintf("Audit against %d per %s as %s (%s): %s", l.Limit, window, held, l.Rule, verdictWord(l.Verdict))
	switch {
	case l.Descriptor != "" && l.Descriptor == l.ID: // a descriptor of bench rls, or a limit named as its rule
		head = fmt.Sprintf("Limit %s, %d per %s as %s (%s): %s", l.ID, l.Limit, window, held, l.Rule, verdictWord(l.Verdict))
	case l.Descriptor != "": // a limit of a rules file
		head = fmt.Sprintf("Limit %s (%s), %d per %s as %s (%s): %s", l.ID, l.Descriptor, l.Limit, window, held, l.Rule, verdictWord(l.Verdict))
	}
	got := fmt.Sprintf("got %d through in %s where %d were allowed", l.WorstWindowAdmitted,
		time.Duration(l.WorstSpanMillis)*time.Millisecond, l.WorstSpanAllowed)
	var notes []string
	switch l.Verdict {
	case audit.NotJudged:
		return []string{fmt.Sprintf("%s: %s; %d requests met it, %d admitted.", head, strings.Join(l.Reasons, "; "), l.Requests, l.Admitted)}
	case audit.NoVerdict:
		return []string{fmt.Sprintf("%s: %s. Statuses seen: %s.", head, strings.Join(l.Reasons, "; "), statusesSeen(r))}
	case audit.NotReached:
		notes = append(notes, fmt.Sprintf("%s: %s.", head, strings.Join(l.Reasons, "; ")))
	case audit.Leaked:
		notes = append(notes, fmt.Sprintf("%s: %s %s (%d over).", head, orDash(l.WorstConsumer), got, l.OverAdmitted))
	default:
		notes = append(notes, fmt.Sprintf("%s: the worst consumer, %s, %s; %d of the %d denials were its own (its window full).",
			head, orDash(l.WorstConsumer), got, l.DenialsAttributed, l.Denials))
	}
	notes = append(notes, underNote(l), retryAfterNote(r, l))
	w := r.Words()
	headers := w.Checks
	h := fmt.Sprintf("%s: %d %s checked, %d violations", headers, l.Headers.Checked, w.Answers, l.Headers.Violations)
	if l.Headers.Example != "" {
		h += " (" + l.Headers.Example + ")"
	}
	if l.Headers.NeverAdvertised != "" && l.Verdict != audit.NotReached {
		h += "; the gateway " + l.Headers.NeverAdvertised
	}
	notes = append(notes, h+".")
	if l.Headers.Named > 0 {
		notes = append(notes, fmt.Sprintf("violated-policies: named it in %d 429s.", l.Headers.Named))
	}
	return notes
}

// windowText is a window as the rules write it: 1s, 10m, 1h (not 1h0m0s).
func windowText(d time.Duration) string {
	s := d.String()
	s, _ = strings.CutSuffix(s, "m0s")
	if s != d.String() {
		s += "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// retryAfterNote says what the probes found of one limit's Retry-After
// (bench rls: duration_until_reset).
func retryAfterNote(r bench.Result, l audit.LimitAudit) string {
	retryAfter := r.Words().Wait
	ra := l.RetryAfter
	switch {
	case ra.Honest == nil:
		return retryAfter + ": not probed (" + orDash(ra.Skipped) + ")."
	case *ra.Honest:
		return fmt.Sprintf("%s: honest in %d probes (each admitted at its first try after the advertised time).", retryAfter, ra.Probes)
	}
	return fmt.Sprintf("%s: FALSE in %d probes: %s.", retryAfter, ra.Probes, ra.Fault())
}

// verdictWord is a verdict as the notes shout it.
func verdictWord(v audit.Verdict) string {
	return strings.ToUpper(string(v))
}

// underNote says what the audit found of the limit's denials.
func underNote(l audit.LimitAudit) string {
	switch {
	case l.UnderSkipped != "":
		return "Under-admission: not judged (" + l.UnderSkipped + ")."
	case l.Denials == 0:
		return "Under-admission: no request was denied."
	}
	var s string
	switch {
	case l.DenialsJudged == 0:
		s = fmt.Sprintf("Under-admission: none of the %d denials could be judged", l.Denials)
	case l.UnderAdmitted == 0:
		s = fmt.Sprintf("Under-admission: none of the %d denials judged (of %d) would have been admitted", l.DenialsJudged, l.Denials)
	default:
		s = fmt.Sprintf("UNDER-ADMITTING: %d of the %d denials judged (%.1f%%) would have been admitted by the rule; the most, %d, to %s",
			l.UnderAdmitted, l.DenialsJudged, 100*l.UnderAdmittedShare, l.WorstUnderAdmitted, l.WorstUnderConsumer)
	}
	if l.DenialsJudged > 0 && l.DenialsUnjudged > 0 {
		s += fmt.Sprintf("; %d not judged", l.DenialsUnjudged)
	}
	if l.UnjudgedReason != "" {
		s += ": " + l.UnjudgedReason
	}
	return s + "."
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
