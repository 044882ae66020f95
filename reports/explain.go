package reports

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/race"
)

// momentsTold is how many moments an explanation tells in words.
const momentsTold = 3

// explainTitle heads a limiter's explanation.
func explainTitle(limiter string) string { return limiter + ", explained" }

// explainIntro says what the explained trial was, or why there is none.
func explainIntro(rep race.Report, ex race.Explanation) string {
	if ex.Skipped != "" {
		s := "No trace: " + ex.Skipped + "."
		if rep.Redis.Mode == "embedded" {
			s += " The embedded Redis (miniredis) has no MONITOR: run on a redis-server to see the trace."
		}
		return s
	}
	return fmt.Sprintf("One more trial at %s on %s, with MONITOR on: its latency is not comparable, and it is not in the table above. "+
		"In the trace, key stands for %s.", ex.Key, ex.Node, ex.Key)
}

// explainSummaryOf says what the trace shows, in numbers: of a rate
// limiter's trial, or of an in-flight limiter's.
func explainSummaryOf(rep race.Report, ex race.Explanation) string {
	if ex.InFlightTrial != nil {
		return inFlightExplainSummary(ex, rep.Config.Limit)
	}
	return explainSummary(ex)
}

// explainSummary says what the trace shows, in numbers.
func explainSummary(ex race.Explanation) string {
	parts := []string{fmt.Sprintf("%s, %s in %s", plural.Count(ex.Decisions, "decision"), plural.Count(ex.Commands, "command"), micros(ex.SpanMicros))}
	if ex.Reads > 0 {
		parts = append(parts, fmt.Sprintf("%d of %s stale (the goroutine wrote after another one had)", ex.StaleReads, plural.Count(ex.Reads, "read")))
	}
	allowed := ex.Trial.Expected
	if ex.OverAdmitted > 0 {
		parts = append(parts, fmt.Sprintf("%s beyond the %d allowed", plural.Count(ex.OverAdmitted, "admission"), allowed))
	} else {
		parts = append(parts, fmt.Sprintf("no admission beyond the %d allowed", allowed))
	}
	counted := fmt.Sprintf("the trial counted %d admitted", ex.Trial.Admitted)
	if ex.Trial.StateVerified != nil {
		counted += fmt.Sprintf(" and the key held %d", ex.Trial.State)
	}
	if ex.Admitted != ex.Trial.Admitted {
		counted += fmt.Sprintf(", where the trace shows %d: it is not the whole trial", ex.Admitted)
	}
	parts = append(parts, counted)
	if ex.AbortedExecs > 0 {
		parts = append(parts, fmt.Sprintf("Redis aborted %s: a WATCHed key had changed", plural.Count(ex.AbortedExecs, "EXEC")))
	}
	if ex.Phantoms > 0 {
		s := fmt.Sprintf("%s (ZADDs of requests then denied, counted until their ZREM)", plural.Count(ex.Phantoms, "phantom member"))
		if ex.PhantomDenials > 0 {
			s += fmt.Sprintf(", %s theirs", plural.Count(ex.PhantomDenials, "denial"))
		}
		parts = append(parts, s)
	}
	if ex.ScriptCalls > 0 {
		if ex.Interleaved == 0 {
			parts = append(parts, fmt.Sprintf("%s, each with nothing between its read and its write", plural.Count(ex.ScriptCalls, "script call")))
		} else {
			parts = append(parts, fmt.Sprintf("%d of %s had another goroutine's command between their read and their write",
				ex.Interleaved, plural.Count(ex.ScriptCalls, "script call")))
		}
	}
	if ex.Unmatched > 0 {
		parts = append(parts, fmt.Sprintf("%s matched nothing the goroutines sent", plural.Count(ex.Unmatched, "command")))
	}
	return strings.Join(parts, "; ") + "."
}

// at renders a step's time in whole µs, as the trace does: "+1628µs".
func at(s *race.Step) string { return "+" + strconv.FormatInt(s.Micros, 10) + "µs" }

// value renders a step's count.
func value(s *race.Step) string {
	if s.Value == nil {
		return "?"
	}
	return strconv.FormatInt(*s.Value, 10)
}

// momentText tells one moment in a sentence.
func momentText(m race.Moment) string {
	switch m.Kind {
	case race.MomentOver:
		return overText(m)
	case race.MomentAborted:
		return abortedText(m)
	case race.MomentPhantom:
		s := fmt.Sprintf("%s's %s at %s added its member", m.Goroutine, m.Write.Command, at(m.Write))
		if m.Read != nil {
			s += fmt.Sprintf(", its %s counted %s and it was denied", m.Read.Command, value(m.Read))
		}
		s += fmt.Sprintf("; the member stayed until its %s at %s: %s counted it", m.Undo.Command, at(m.Undo), plural.Count(m.Counted, "other decision"))
		if m.Denied > 0 {
			s += fmt.Sprintf(", %d of them denied that its absence would have admitted", m.Denied)
		}
		return s + "."
	case race.MomentAtomic:
		s := fmt.Sprintf("%s's %s at %s", m.Goroutine, m.Call.Command, at(m.Call))
		switch {
		case m.Read != nil && m.Write != nil:
			s += fmt.Sprintf(" read the count (%s at %s) and wrote it (%s at %s)", m.Read.Command, at(m.Read), m.Write.Command, at(m.Write))
		case m.Read != nil:
			s += fmt.Sprintf(" read the count (%s at %s) and wrote nothing", m.Read.Command, at(m.Read))
		}
		if m.Between == 0 {
			return s + " with nothing of another goroutine's between."
		}
		return s + fmt.Sprintf(", with %s of other goroutines between.", plural.Count(m.Between, "command"))
	}
	return m.Kind
}

// overText tells an admission beyond the guarantee: the read it was based
// on and, when there was one, another goroutine's read of the same count
// before either wrote: "g42 read 3 at +4µs, after g17 read 3 at +0µs and
// before g17's INCR at +9µs: both admitted".
func overText(m race.Moment) string {
	made := fmt.Sprintf("%s's %s at %s was admission %d", m.Goroutine, m.Write.Command, at(m.Write), m.Admission)
	switch {
	case m.HeldAtOnce > 0:
		made = fmt.Sprintf("%s's %s at %s was admitted with %d held at once", m.Goroutine, m.Write.Command, at(m.Write), m.HeldAtOnce)
	case m.Write.Value != nil:
		made = fmt.Sprintf("%s's %s at %s made it %s", m.Goroutine, m.Write.Command, at(m.Write), value(m.Write))
	}
	made += fmt.Sprintf(", over the %d allowed.", m.Allowed)
	switch {
	case m.Read == nil:
		return made
	case m.OtherRead == nil:
		return fmt.Sprintf("%s read %s at %s; %s of other goroutines came before its own: %s",
			m.Goroutine, value(m.Read), at(m.Read), plural.Count(m.WritesBetween, "write"), made)
	}
	first, second, firstWrite := m.OtherRead, m.Read, m.OtherWrite
	if m.Read.Event < m.OtherRead.Event {
		first, second, firstWrite = m.Read, m.OtherRead, m.Write
	}
	return fmt.Sprintf("%s read %s at %s, after %s read %s at %s and before %s's %s at %s: both admitted; %s",
		second.Goroutine, value(second), at(second), first.Goroutine, value(first), at(first),
		first.Goroutine, firstWrite.Command, at(firstWrite), made)
}

// abortedText tells an aborted EXEC, its steps in the order Redis ran them.
func abortedText(m race.Moment) string {
	type clause struct {
		event int
		text  string
	}
	var cs []clause
	if m.Watch != nil {
		cs = append(cs, clause{m.Watch.Event, fmt.Sprintf("%s WATCHed the key at %s", m.Goroutine, at(m.Watch))})
	}
	if m.OtherWrite != nil {
		cs = append(cs, clause{m.OtherWrite.Event, fmt.Sprintf("%s's %s at %s wrote it", m.OtherWrite.Goroutine, m.OtherWrite.Command, at(m.OtherWrite))})
	}
	if m.Read != nil {
		cs = append(cs, clause{m.Read.Event, fmt.Sprintf("%s read %s at %s", m.Goroutine, value(m.Read), at(m.Read))})
	}
	cs = append(cs, clause{m.Write.Event, fmt.Sprintf("%s's EXEC at %s aborted", m.Goroutine, at(m.Write))})
	slices.SortStableFunc(cs, func(a, b clause) int { return a.event - b.event })
	texts := make([]string, len(cs))
	for i, c := range cs {
		texts[i] = c.text
	}
	return strings.Join(texts, "; ") + "."
}

// moreMoments says, for each kind, how many moments were not told.
func moreMoments(ex race.Explanation) []string {
	told := map[string]int64{}
	for i, m := range ex.Moments {
		if i < momentsTold {
			told[m.Kind]++
		}
	}
	var more []string
	for _, k := range []struct {
		kind       string
		total      int64
		noun, rest string
	}{
		{race.MomentOver, ex.OverAdmitted, "admission", " beyond the limit"},
		{race.MomentAborted, ex.AbortedExecs, "aborted EXEC", ""},
		{race.MomentPhantom, ex.Phantoms, "phantom member", ""},
		{race.MomentAtomic, ex.Interleaved, "script call", " with another goroutine's command inside"},
	} {
		if n := k.total - told[k.kind]; n > 0 && (k.kind != race.MomentAtomic || ex.Interleaved > 0) {
			more = append(more, "… and "+plural.Count(n, "more "+k.noun)+k.rest+".")
		}
	}
	return more
}

var sha = regexp.MustCompile(`\b[0-9a-f]{40}\b`)

// traceCommand shortens a command for the trace: the key as "key", a
// script's SHA1 to its first 8 digits, the whole to 72 characters.
func traceCommand(ex race.Explanation, c string) string {
	c = strings.ReplaceAll(c, ex.Key, "key")
	c = sha.ReplaceAllStringFunc(c, func(s string) string { return s[:8] + "…" })
	return cutRunes(c, 72)
}

func cutRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// traceRow is one line of a trace: an event, or the commands cut out.
type traceRow struct {
	cells  []string // +µs, goroutine, command, reply, mark
	mark   string
	gap    bool
	script bool // a script's own command, shown under its call
}

// traceRows lays out the events, with a row for each run of commands the
// cut left out.
func traceRows(ex race.Explanation) []traceRow {
	var rows []traceRow
	gap := func(n int) {
		if n > 0 {
			rows = append(rows, traceRow{cells: []string{"⋮", "", plural.Count(n, "command"), "", ""}, gap: true})
		}
	}
	next := 0
	for _, e := range ex.Events {
		gap(e.Index - next)
		next = e.Index + 1
		rows = append(rows, traceRow{cells: []string{strconv.FormatInt(e.Micros, 10), e.Goroutine, traceCommand(ex, e.Command),
			cutRunes(e.Reply, 24), e.Mark}, mark: e.Mark, script: e.Script})
	}
	gap(ex.Commands - next)
	return rows
}

var traceHeaders = []string{"+µs", "goroutine", "command", "reply", ""}

// explainText renders an explanation for the terminal.
func explainText(b *strings.Builder, rep race.Report, limiter string, ex race.Explanation, s Styles) {
	b.WriteString("\n" + s.Title.Render(explainTitle(limiter)) + "\n")
	b.WriteString(s.Dim.Render(explainIntro(rep, ex)) + "\n")
	if ex.Skipped != "" {
		return
	}
	b.WriteString(explainSummaryOf(rep, ex) + "\n")
	for i, m := range ex.Moments {
		if i < momentsTold {
			b.WriteString("  • " + momentText(m) + "\n")
		}
	}
	for _, more := range moreMoments(ex) {
		b.WriteString("  " + more + "\n")
	}
	rows := traceRows(ex)
	for i := range rows {
		if rows[i].script {
			rows[i].cells[2] = "  " + rows[i].cells[2]
		}
	}
	widths := make([]int, len(traceHeaders))
	for i, h := range traceHeaders {
		widths[i] = lipgloss.Width(h)
	}
	for _, row := range rows {
		for i, c := range row.cells {
			widths[i] = max(widths[i], lipgloss.Width(c))
		}
	}
	// The padding is outside the styles, so that a line ends in spaces the
	// trim takes, in colour as without.
	line := func(cells []string, style func(i int) lipgloss.Style) {
		out := make([]string, len(cells))
		for i, c := range cells {
			p := strings.Repeat(" ", widths[i]-lipgloss.Width(c))
			if c != "" {
				c = style(i).Render(c)
			}
			if i == 0 {
				out[i] = p + c // times right-aligned
			} else {
				out[i] = c + p
			}
		}
		b.WriteString(strings.TrimRight("  "+strings.Join(out, "  "), " ") + "\n")
	}
	b.WriteString("\n")
	line(traceHeaders, func(int) lipgloss.Style { return s.Title })
	for _, row := range rows {
		line(row.cells, func(i int) lipgloss.Style {
			switch {
			case row.gap:
				return s.Dim
			case i == 4 && (row.mark == "over" || row.mark == "aborted"):
				return s.Bad.UnsetPadding()
			case i == 4 && row.mark != "":
				return s.Warn.UnsetPadding()
			}
			return s.Plain
		})
	}
}

// explainMarkdown renders an explanation as markdown.
func explainMarkdown(b *strings.Builder, rep race.Report, limiter string, ex race.Explanation) {
	b.WriteString("\n### " + explainTitle(limiter) + "\n\n")
	b.WriteString(explainIntro(rep, ex) + "\n")
	if ex.Skipped != "" {
		return
	}
	b.WriteString("\n" + explainSummaryOf(rep, ex) + "\n\n")
	for i, m := range ex.Moments {
		if i < momentsTold {
			b.WriteString("- " + momentText(m) + "\n")
		}
	}
	for _, more := range moreMoments(ex) {
		b.WriteString("- " + more + "\n")
	}
	b.WriteString("\n")
	writeMarkdownTable(b, traceHeaders, func(yield func([]string)) {
		for _, row := range traceRows(ex) {
			switch {
			case row.script:
				row.cells[2] = "↳ `" + row.cells[2] + "`"
			case !row.gap:
				row.cells[2] = "`" + row.cells[2] + "`"
			}
			yield(row.cells)
		}
	})
}
