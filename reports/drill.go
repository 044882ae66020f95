package reports

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"

	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/internal/plural"
)

// Drill renders a drill report in the given format.
func Drill(w io.Writer, rep drill.Report, f Format, opt Options) error {
	switch f {
	case JSON:
		return writeJSON(w, rep)
	case Markdown:
		return drillMarkdown(w, rep)
	default:
		return drillTable(w, rep, NewStyles(w, opt))
	}
}

func drillSummary(rep drill.Report) string {
	c := rep.Config
	return fmt.Sprintf("%s · %s, %d per %s (%s) · %s at %g× their limit, %g requests/s per gateway, %s · "+
		"steady %s, fault %s, after %s · Redis timeout %s, %s",
		serverName(rep.RedisVersion), c.Algorithm, c.Limit, time.Duration(c.WindowMillis)*time.Millisecond, rep.Guarantee,
		plural.Count(c.Consumers, "consumer"), c.Load, c.RatePerSec, plural.Count(c.Nodes, "gateway"), ms(c.SteadyMillis), ms(c.FaultMillis), ms(c.AfterMillis),
		ms(c.TimeoutMillis), breaker(c.BreakerFailures)) + batched(c.Batch)
}

// batched says how many decisions share a round trip, when more than one.
func batched(batch int) string {
	if batch <= 1 {
		return ""
	}
	return fmt.Sprintf(", up to %d decisions per round trip (go, rls)", batch)
}

func breaker(failures int) string {
	if failures == 0 {
		return "no circuit breaker"
	}
	return "circuit after " + plural.Count(failures, "failure")
}

func ms(v int64) string { return (time.Duration(v) * time.Millisecond).String() }

func drillNotes(rep drill.Report) []string {
	ran := map[string]bool{}
	for _, r := range rep.Results {
		ran[r.OnRedisError] = true
	}
	undecided := "fail open passed them, fail closed answered 503"
	if ran["local"] {
		undecided += ", fail local, the gateway's own limiter answered 200 or 429"
	}
	notes := []string{
		"decisions: requests sent over the whole run. over: admitted beyond the algorithm's guarantee, judged on the " +
			"requests' whole flights. wrong 429/503: refusals an exact sliding window would have admitted. errors: requests " +
			"Redis did not decide, whatever the answer: " + undecided + " (answers without RateLimit fields), and those " +
			"that got no answer at all; clients saw only the 503s and the unanswered fail. detect: fault start to the first " +
			"answer made without Redis; recover: fault end to the last one before Redis decided again (– when it did not). p50/p99: requests due " +
			fmt.Sprintf("during the fault, timed from when they were due. The drill took %s.", ms(rep.ElapsedMillis)),
	}
	if ran["open"] {
		notes = append(notes, "fail open over-admits by design: it lets every request through while Redis fails.")
	}
	if ran["local"] {
		c := rep.Config
		share := max(c.Limit/int64(max(c.Nodes, 1)), 1)
		who := plural.Count(c.Nodes, "gateway")
		if c.Nodes > 1 {
			who = "each of " + who
		}
		notes = append(notes, fmt.Sprintf("fail local over-admits by design too: %s limits alone to %d per %s from an empty count "+
			"when Redis fails, and Redis never learns what was admitted without it, so up to about one more limit per consumer "+
			"passes at each edge of the fault.", who, share, ms(c.WindowMillis)))
	}
	for _, s := range rep.Skipped {
		notes = append(notes, fmt.Sprintf("skipped %s on %s, fail %s: %s", s.Fault, s.Engine, s.OnRedisError, s.Reason))
	}
	return notes
}

func drillHeaders() []string {
	return []string{"fault", "engine", "on error", "decisions", "over", "wrong 429/503", "errors", "detect", "recover", "p50", "p99"}
}

func drillRow(r drill.Row) []string {
	fault := r.Fault
	if r.Fault == drill.Latency {
		fault += " " + ms(r.LatencyMillis)
	}
	if r.FailoverMillis != nil {
		fault += fmt.Sprintf(" (%s)", ms(*r.FailoverMillis))
	}
	return []string{fault, r.Engine, r.OnRedisError, strconv.FormatInt(r.Decisions, 10), strconv.FormatInt(r.OverAdmitted, 10),
		strconv.FormatInt(r.WronglyDenied, 10), strconv.FormatInt(r.Errors, 10), optMillis(r.DetectMillis), optMillis(r.RecoverMillis),
		micros(int64(r.P50Millis * 1000)), micros(int64(r.P99Millis * 1000))}
}

func optMillis(v *int64) string {
	if v == nil {
		return "–"
	}
	return ms(*v)
}

// DrillVerdict says in one line which runs let requests over the limit.
func DrillVerdict(rep drill.Report) string {
	leaked := rep.Leaked()
	if len(leaked) == 0 {
		if len(rep.Results) == 1 {
			return "the run admitted nothing beyond the guarantee"
		}
		return fmt.Sprintf("no run admitted beyond the guarantee, in all %d runs", len(rep.Results))
	}
	return fmt.Sprintf("%d of %s admitted beyond the guarantee: %s", len(leaked), plural.Count(len(rep.Results), "run"), strings.Join(leaked, "; "))
}

func drillTable(w io.Writer, rep drill.Report, s Styles) error {
	rows := make([][]string, len(rep.Results))
	for i, r := range rep.Results {
		rows[i] = drillRow(r)
	}
	t := table.New().Border(lipgloss.RoundedBorder()).BorderStyle(s.Border).Headers(drillHeaders()...).Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			if row == table.HeaderRow {
				return s.Header
			}
			r := rep.Results[row]
			switch {
			case col == 4 && r.OverAdmitted > 0:
				return s.Bad
			case col == 5 && r.WronglyDenied > 0, col == 6 && r.Errors > 0:
				return s.Warn
			}
			return s.Cell
		})
	var b strings.Builder
	b.WriteString(s.Title.Render("ratelab drill") + "  " + drillSummary(rep) + "\n\n")
	b.WriteString(DrillVerdict(rep) + "\n")
	b.WriteString(t.Render() + "\n")
	for _, n := range drillNotes(rep) {
		b.WriteString(s.Dim.Render(n) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func drillMarkdown(w io.Writer, rep drill.Report) error {
	var b strings.Builder
	b.WriteString("## ratelab drill\n\n" + drillSummary(rep) + "\n\n**" + DrillVerdict(rep) + "**\n\n")
	writeMarkdownTable(&b, drillHeaders(), func(yield func([]string)) {
		for _, r := range rep.Results {
			yield(drillRow(r))
		}
	})
	b.WriteString("\n")
	for _, n := range drillNotes(rep) {
		b.WriteString("- " + n + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
