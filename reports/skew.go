package reports

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"

	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/skew"
)

// Skew renders a skew report in the given format.
func Skew(w io.Writer, rep skew.Report, f Format, opt Options) error {
	switch f {
	case JSON:
		return writeJSON(w, rep)
	case Markdown:
		return skewMarkdown(w, rep)
	default:
		return skewTable(w, rep, NewStyles(w, opt))
	}
}

// SkewVerdict says in one line how over-admission moved with the skew on
// each clock.
func SkewVerdict(rep skew.Report) string {
	var parts []string
	for _, clock := range rep.Config.Clocks {
		var skews []int64
		over := map[int64]int64{}
		rows := 0
		for _, r := range rep.Rows {
			if r.Clock != clock {
				continue
			}
			rows++
			if _, ok := over[r.MaxSkewMillis]; !ok {
				skews = append(skews, r.MaxSkewMillis)
			}
			over[r.MaxSkewMillis] += r.OverAdmitted
		}
		if rows == 0 {
			continue
		}
		name := map[string]string{"caller": "on the nodes' own clocks", "redis": "on Redis's clock"}[clock]
		var total int64
		counts := make([]string, len(skews))
		ms := make([]string, len(skews))
		for i, s := range skews {
			total += over[s]
			counts[i] = strconv.FormatInt(over[s], 10)
			ms[i] = strconv.FormatInt(s, 10)
		}
		if total == 0 {
			in := fmt.Sprintf("in all %d rows", rows)
			if rows == 1 {
				in = "in its one row"
			}
			parts = append(parts, name+" nothing was over-admitted, "+in)
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s over-admitted at %s ms of skew", name, list(counts), list(ms)))
	}
	return strings.Join(parts, "; ")
}

func skewSummary(rep skew.Report) string {
	c := rep.Config
	offsets := make([]string, len(c.SkewsMillis))
	for i, o := range c.SkewsMillis {
		offsets[i] = (time.Duration(o) * time.Millisecond).String()
	}
	return fmt.Sprintf("%s (%s, %s) · limit %d per %s · %s, clocks off by %s · %s per row at %g× their limit · %s",
		serverName(rep.Redis.Version), rep.Redis.Mode, rep.Redis.Addr, c.Limit, time.Duration(c.WindowMillis)*time.Millisecond,
		plural.Count(len(c.SkewsMillis), "node"), strings.Join(offsets, ", "), plural.Count(c.Clients, "client"), c.Load, time.Duration(c.DurationMilli)*time.Millisecond)
}

func skewNotes(rep skew.Report) []string {
	fr := make([]string, 0, len(skew.Fractions()))
	for _, f := range skew.Fractions() {
		fr = append(fr, strconv.FormatFloat(f, 'g', -1, 64))
	}
	notes := []string{
		"over: admissions beyond the algorithm's own guarantee on the true time (this process's clock), counting a request " +
			"against a span only when its whole flight, send to reply, lies inside it; a limiter that keeps its guarantee on one " +
			"clock is never counted, whatever the latency.",
		fmt.Sprintf("false denied: denials that an exact sliding window on the true time would have admitted for certain. "+
			"offsets: each node's clock offset in that row, --skews scaled by %s; max skew: the widest gap between two nodes' clocks.",
			list(fr)),
		fmt.Sprintf("Redis's clock was %s to %s ahead of this process's (TIME); on it, spans are mapped onto Redis's clock. "+
			"Requests left %s late at p50, %s at p99, %s at most. Run took %s.",
			micros(rep.RedisClockOffsetMicros.Lo), micros(rep.RedisClockOffsetMicros.Hi),
			micros(rep.SendLagMicros.P50), micros(rep.SendLagMicros.P99), micros(rep.SendLagMicros.Max), micros(rep.ElapsedMillis*1000)),
	}
	var errs int64
	for _, r := range rep.Rows {
		errs += r.Errors
	}
	if errs > 0 {
		notes = append(notes, fmt.Sprintf("%s failed: they are never counted as over-admitted, and count as possible "+
			"admissions when denials are judged.", plural.Count(errs, "decision")))
	}
	if rep.Redis.Mode == "embedded" {
		notes = append(notes, "These results come from an embedded in-process Redis (miniredis), not a redis-server.")
	}
	return notes
}

func skewHeaders() []string {
	return []string{"algorithm", "clock", "max skew", "offsets", "decisions", "admitted", "over", "false denied", "worst client", "errors"}
}

func skewRow(r skew.Row) []string {
	offsets := make([]string, len(r.OffsetsMillis))
	for i, o := range r.OffsetsMillis {
		offsets[i] = strconv.FormatInt(o, 10)
	}
	worst := "–"
	if r.WorstClient != "" {
		worst = fmt.Sprintf("%s (%d over, %d denied)", r.WorstClient, r.WorstClientOverAdmitted, r.WorstClientFalseDenied)
	}
	return []string{
		r.Algorithm,
		r.Clock,
		strconv.FormatInt(r.MaxSkewMillis, 10) + "ms",
		strings.Join(offsets, " ") + " ms",
		strconv.FormatInt(r.Decisions, 10),
		strconv.FormatInt(r.Admitted, 10),
		strconv.FormatInt(r.OverAdmitted, 10),
		strconv.FormatInt(r.FalseDenied, 10),
		worst,
		strconv.FormatInt(r.Errors, 10),
	}
}

func skewTable(w io.Writer, rep skew.Report, s Styles) error {
	rows := make([][]string, len(rep.Rows))
	for i, r := range rep.Rows {
		rows[i] = skewRow(r)
	}
	t := table.New().
		Border(lipgloss.RoundedBorder()).
		BorderStyle(s.Border).
		Headers(skewHeaders()...).
		Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			if row == table.HeaderRow {
				return s.Header
			}
			r := rep.Rows[row]
			switch {
			case col == 6 && r.OverAdmitted > 0:
				return s.Bad
			case col == 6:
				return s.Good
			case col == 7 && r.FalseDenied > 0, col == 9 && r.Errors > 0:
				return s.Warn
			}
			return s.Cell
		})
	var b strings.Builder
	b.WriteString(s.Title.Render("ratelab skew") + "  " + skewSummary(rep) + "\n\n")
	b.WriteString(SkewVerdict(rep) + "\n")
	b.WriteString(t.Render() + "\n")
	for _, n := range skewNotes(rep) {
		b.WriteString(s.Dim.Render(n) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func skewMarkdown(w io.Writer, rep skew.Report) error {
	var b strings.Builder
	b.WriteString("## ratelab skew\n\n")
	b.WriteString(skewSummary(rep) + "\n\n")
	b.WriteString("**" + SkewVerdict(rep) + "**\n\n")
	writeMarkdownTable(&b, skewHeaders(), func(yield func([]string)) {
		for _, r := range rep.Rows {
			yield(skewRow(r))
		}
	})
	b.WriteString("\n")
	for _, n := range skewNotes(rep) {
		b.WriteString("- " + n + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
