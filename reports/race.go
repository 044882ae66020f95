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
	"github.com/ratelab/ratelab/race"
)

// Race renders a race report in the given format.
func Race(w io.Writer, rep race.Report, f Format, opt Options) error {
	inFlight := len(rep.InFlight) > 0
	switch {
	case f == JSON:
		return writeJSON(w, rep)
	case f == Markdown && inFlight:
		return inFlightMarkdown(w, rep)
	case f == Markdown:
		return raceMarkdown(w, rep)
	case inFlight:
		return inFlightTable(w, rep, NewStyles(w, opt))
	default:
		return raceTable(w, rep, NewStyles(w, opt))
	}
}

// RaceVerdict says in one line which limiters leaked and which held, each
// judged by its own guarantee, and names the rule that was applied.
func RaceVerdict(rep race.Report) string {
	var leaks, errs, rules []string
	held := map[string][]string{} // rule -> the limiters that held it
	for _, r := range rep.Results {
		switch {
		case r.LeakedTrials > 0:
			leaks = append(leaks, fmt.Sprintf("%s leaked in %d of %s: worst trial admitted %d where its guarantee (%s) allowed %d",
				r.Limiter, r.LeakedTrials, plural.Count(r.Trials, "trial"), r.WorstTrialAdmitted, r.GuaranteeRule, r.WorstTrialExpected))
		default:
			name := r.Limiter
			if r.TrialsAboveLimit > 0 {
				name += fmt.Sprintf(" (up to %d in %d of %s)", r.MaxTrialExpected, r.TrialsAboveLimit, plural.Count(r.Trials, "trial"))
			}
			if _, ok := held[r.GuaranteeRule]; !ok {
				rules = append(rules, r.GuaranteeRule)
			}
			held[r.GuaranteeRule] = append(held[r.GuaranteeRule], name)
		}
		if costs := limitCosts(r); len(costs) > 0 {
			errs = append(errs, costs...)
		} else if r.StateMismatches > 0 {
			errs = append(errs, fmt.Sprintf("%s's key disagreed with what it admitted in %d of %s",
				r.Limiter, r.StateMismatches, plural.Count(r.Trials, "trial")))
		}
		if r.Errors > 0 {
			errs = append(errs, fmt.Sprintf("%s had %s", r.Limiter, plural.Count(r.Errors, "failed decision")))
		}
	}
	parts := leaks
	for _, rule := range rules {
		parts = append(parts, list(held[rule])+" held "+rule)
	}
	if len(leaks) == 0 && len(rules) > 0 {
		parts[0] = "no limiter admitted more than its guarantee allowed: " + parts[0]
	}
	parts = append(parts, errs...)
	return strings.Join(parts, "; ")
}

// limitCosts says, for a limiter with several limits, what each limit
// held for requests that were denied: slots that later requests will be
// wrongly denied for.
func limitCosts(r race.Result) []string {
	var costs []string
	for _, l := range r.Limits {
		if l.WronglyConsumed > 0 {
			costs = append(costs, fmt.Sprintf("%s's %s limit held %s for requests it denied (in %d of %s), each one a later request wrongly denied",
				r.Limiter, l.Policy, plural.Count(l.WronglyConsumed, "slot"), l.TrialsWronglyConsumed, plural.Count(r.Trials, "trial")))
		}
	}
	return costs
}

// raceLimits says, for each limiter with several limits, how each limit
// fared by its own guarantee.
func raceLimits(rep race.Report) []string {
	var lines []string
	for _, r := range rep.Results {
		if len(r.Limits) == 0 {
			continue
		}
		parts := make([]string, len(r.Limits))
		for i, l := range r.Limits {
			parts[i] = fmt.Sprintf("%s (%s): over-admitted %d in %d of %s, wrongly consumed %d",
				l.Policy, l.GuaranteeRule, l.OverAdmitted, l.LeakedTrials, plural.Count(r.Trials, "trial"), l.WronglyConsumed)
		}
		lines = append(lines, r.Limiter+", each limit by its own guarantee: "+strings.Join(parts, "; ")+".")
	}
	return lines
}

// raceSummary is the line that says what was measured where.
func raceSummary(rep race.Report) string {
	c := rep.Config
	server := serverName(rep.Redis.Version)
	clock := "caller clock"
	if c.Clock == "redis" {
		clock = "Redis clock (Lua limiters)"
	}
	return fmt.Sprintf("%s (%s, %s) · limit %d per %s · %s × %s · %s · %s",
		server, rep.Redis.Mode, rep.Redis.Addr, c.Limit, time.Duration(c.WindowMillis)*time.Millisecond,
		plural.Count(c.Concurrency, "goroutine"), plural.Count(c.RequestsPerWorker, "request"), plural.Count(c.Trials, "trial"), clock)
}

// raceNotes explains the columns and flags anything that qualifies the numbers.
func raceNotes(rep race.Report) []string {
	notes := []string{
		fmt.Sprintf("admitted: admitted/expected, summed over the trials; expected is the most each limiter's own guarantee allowed "+
			"over the trial's span on the clock that decides (read before the release and after the last reply), at most the requests. "+
			"leaked: trials that admitted more than that. under: shortfall below the limit (or the decisions made, when fewer; "+
			"failed decisions and exhausted retries are not counted). worst: most admitted in one trial. Run took %s.",
			micros(rep.ElapsedMillis*1000)),
		"aborted: WATCH transactions Redis aborted because the key changed, each one a retry. state: each trial's key read back " +
			"(✓ holds exactly what was admitted, ✗ does not, – not checked).",
		"latency: one decision, including retries, all trials. spread: last goroutine's first send minus the first's, p50 over trials.",
	}
	if rep.Redis.Mode == "embedded" {
		notes = append(notes, "These results come from an embedded in-process Redis (miniredis), not a redis-server: "+
			"it serialises commands as Redis does, but its latencies are not Redis's.")
	}
	var expiry []string
	for _, r := range rep.Results {
		if r.Clock == "redis" && rep.Config.Clock != "redis" {
			expiry = append(expiry, r.Limiter)
		}
	}
	if len(expiry) > 0 {
		verb := "keeps its window"
		if len(expiry) > 1 {
			verb = "keep their windows"
		}
		notes = append(notes, fmt.Sprintf("%s %s in the key's expiry, on Redis's clock, whatever the clock of the others.", list(expiry), verb))
	}
	for _, r := range rep.Results {
		if r.RetriesExhausted > 0 {
			notes = append(notes, fmt.Sprintf("%s denied %s after exhausting its retries (contention, not the limit).",
				r.Limiter, plural.Count(r.RetriesExhausted, "request")))
		}
		if r.TrialsOutlastingWindow > 0 {
			notes = append(notes, fmt.Sprintf("%s: %s a window or more of real time; Redis may expire a key "+
				"after a window without writes, so their expected count allows one more limit per window they lasted.",
				r.Limiter, plural.Count(r.TrialsOutlastingWindow, "trial")+" lasted"))
		}
	}
	return notes
}

func raceHeaders() []string {
	return []string{"limiter", "atomic", "admitted", "over", "under", "leaked",
		"worst", "aborted", "state", "p50", "p95", "p99", "max", "spread"}
}

func raceRow(r race.Result) []string {
	return []string{
		r.Limiter,
		yesNo(r.Atomic),
		fmt.Sprintf("%d/%d", r.Admitted, r.ExpectedAdmitted),
		strconv.FormatInt(r.OverAdmitted, 10),
		strconv.FormatInt(r.UnderAdmitted, 10),
		fmt.Sprintf("%d/%d", r.LeakedTrials, r.Trials),
		strconv.FormatInt(r.WorstTrialAdmitted, 10),
		strconv.FormatInt(r.AbortedTransactions, 10),
		stateMark(r.StateVerified),
		micros(r.LatencyMicros.P50),
		micros(r.LatencyMicros.P95),
		micros(r.LatencyMicros.P99),
		micros(r.LatencyMicros.Max),
		micros(r.ReleaseSpreadMicros.P50),
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func stateMark(v *bool) string {
	switch {
	case v == nil:
		return "–"
	case *v:
		return "✓"
	}
	return "✗"
}

func raceTable(w io.Writer, rep race.Report, s Styles) error {
	rows := make([][]string, len(rep.Results))
	for i, r := range rep.Results {
		rows[i] = raceRow(r)
	}
	t := table.New().
		Border(lipgloss.RoundedBorder()).
		BorderStyle(s.Border).
		Headers(raceHeaders()...).
		Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			if row == table.HeaderRow {
				return s.Header
			}
			r := rep.Results[row]
			switch {
			case col == 3 && r.OverAdmitted > 0, col == 5 && r.LeakedTrials > 0, col == 0 && r.LeakedTrials > 0:
				return s.Bad
			case col == 8 && r.StateVerified != nil && !*r.StateVerified:
				return s.Bad
			case col == 0:
				return s.Good
			case col == 4 && r.UnderAdmitted > 0, col == 7 && r.AbortedTransactions > 0:
				return s.Warn
			}
			return s.Cell
		})
	var b strings.Builder
	b.WriteString(s.Title.Render("ratelab race") + "  " + raceSummary(rep) + "\n\n")
	b.WriteString(RaceVerdict(rep) + "\n")
	b.WriteString(t.Render() + "\n")
	for _, l := range raceLimits(rep) {
		b.WriteString(l + "\n")
	}
	for _, n := range raceNotes(rep) {
		b.WriteString(s.Dim.Render(n) + "\n")
	}
	for _, r := range rep.Results {
		if r.Explain != nil {
			explainText(&b, rep, r.Limiter, *r.Explain, s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func raceMarkdown(w io.Writer, rep race.Report) error {
	var b strings.Builder
	b.WriteString("## ratelab race\n\n")
	b.WriteString(raceSummary(rep) + "\n\n")
	b.WriteString("**" + RaceVerdict(rep) + "**\n\n")
	writeMarkdownTable(&b, raceHeaders(), func(yield func([]string)) {
		for _, r := range rep.Results {
			yield(raceRow(r))
		}
	})
	b.WriteString("\n")
	for _, l := range raceLimits(rep) {
		b.WriteString(l + "\n\n")
	}
	for _, n := range raceNotes(rep) {
		b.WriteString("- " + n + "\n")
	}
	for _, r := range rep.Results {
		if r.Explain != nil {
			explainMarkdown(&b, rep, r.Limiter, *r.Explain)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
