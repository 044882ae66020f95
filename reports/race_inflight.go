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

// InFlightVerdict says in one line which in-flight limiters held more
// than the limit at once or leaked slots, and which held.
func InFlightVerdict(rep race.Report) string {
	var bad, held, errs []string
	ttl := ""
	if s := rep.Config.InFlight; s != nil {
		ttl = micros(s.LeaseTTLMillis * 1000)
	}
	for _, r := range rep.InFlight {
		trials := plural.Count(r.Trials, "trial")
		var faults []string
		if r.OverTrials > 0 {
			faults = append(faults, fmt.Sprintf("held up to %d at once where the limit is %d (in %d of %s)", r.MostHeld, r.Limit, r.OverTrials, trials))
		}
		if r.Leaked > 0 {
			s := fmt.Sprintf("leaked %s (in %d of %s): its key counted them with nobody holding one", plural.Count(r.Leaked, "slot"), r.LeakedTrials, trials)
			if r.Expires {
				s += ", after every lease's TTL"
			}
			faults = append(faults, s)
		}
		if r.FreedTwice > 0 {
			faults = append(faults, fmt.Sprintf("freed %s twice (in %d of %s): its key counted fewer than were held",
				plural.Count(r.FreedTwice, "slot"), r.FreedTwiceTrials, trials))
		}
		switch {
		case len(faults) > 0:
			bad = append(bad, r.Limiter+" "+strings.Join(faults, " and "))
		case r.Expires:
			held = append(held, fmt.Sprintf("%s held at most %d at once and leaked nothing once its %s lease TTL had passed", r.Limiter, r.Limit, ttl))
		default:
			held = append(held, fmt.Sprintf("%s held at most %d at once and leaked nothing", r.Limiter, r.Limit))
		}
		if r.WrongfulDenials > 0 {
			errs = append(errs, fmt.Sprintf("%s denied %s when fewer than %d could have been held", r.Limiter,
				plural.Count(r.WrongfulDenials, "request"), r.Limit))
		}
		if r.Errors > 0 {
			errs = append(errs, fmt.Sprintf("%s had %s", r.Limiter, plural.Count(r.Errors, "failed call")))
		}
	}
	parts := append(bad, held...)
	if len(bad) == 0 && len(held) > 0 {
		parts[0] = "no limiter held more than its limit at once or leaked a slot: " + parts[0]
	}
	return strings.Join(append(parts, errs...), "; ")
}

// inFlightSummary is the line that says what was measured where.
func inFlightSummary(rep race.Report) string {
	c := rep.Config
	s := fmt.Sprintf("%s (%s, %s) · at most %d in flight · %s × %s · %s",
		serverName(rep.Redis.Version), rep.Redis.Mode, rep.Redis.Addr, c.Limit,
		plural.Count(c.Concurrency, "goroutine"), plural.Count(c.RequestsPerWorker, "request"), plural.Count(c.Trials, "trial"))
	if f := c.InFlight; f != nil {
		s += fmt.Sprintf(" · hold %s · lease TTL %s · faults: %s killed, %s of releases lost, %s sent twice",
			time.Duration(f.HoldMillis)*time.Millisecond, time.Duration(f.LeaseTTLMillis)*time.Millisecond,
			percent(f.Faults.Kill), percent(f.Faults.LoseRelease), percent(f.Faults.RetryRelease))
	}
	return s
}

// percent renders a share as a percentage: 0.2 as 20%.
func percent(share float64) string {
	return strconv.FormatFloat(share*100, 'f', -1, 64) + "%"
}

// inFlightNotes explains the columns and flags anything that qualifies the numbers.
func inFlightNotes(rep race.Report) []string {
	notes := []string{
		fmt.Sprintf("admitted: acquires admitted/made, over the trials. at once: the most requests held at once in any trial "+
			"(from each holder's acquire reply to its release, kill or lost release) against the limit. over: trials that held "+
			"more than the limit at once. at end: slots the key still counted when every holder was gone, summed over the trials; "+
			"leaked: those it still counted when nobody held one, for a lease once every lease's TTL had passed. Run took %s.",
			micros(rep.ElapsedMillis*1000)),
		"wrongful: denials made when fewer than the limit could have been held: a slot leaked by a holder that died or lost its " +
			"release (a lease's counts as held until its TTL), or another request's passing INCR. faults: killed/lost/sent twice, " +
			"dealt in the order of the admissions. latency: one acquire, all trials.",
	}
	if rep.Redis.Mode == "embedded" {
		notes = append(notes, "These results come from an embedded in-process Redis (miniredis), not a redis-server: "+
			"it serialises commands as Redis does, but its latencies are not Redis's.")
	}
	for _, r := range rep.InFlight {
		if r.OutlivedLeases > 0 {
			notes = append(notes, fmt.Sprintf("%s: the hold of %s outlasted the lease TTL, and the lease freed the slot while it was "+
				"held: up to %d in flight at once; over counts only the holders within their lease.",
				r.Limiter, plural.Count(r.OutlivedLeases, "holder"), r.MostInFlight))
		}
		if r.FreedTwice > 0 {
			notes = append(notes, fmt.Sprintf("%s: a release sent twice freed a slot nobody held, so its key ended below the holders "+
				"by %d in all: the limit rose by as much.", r.Limiter, r.FreedTwice))
		}
	}
	return notes
}

func inFlightHeaders() []string {
	return []string{"limiter", "atomic", "admitted", "at once", "over", "at end", "leaked", "wrongful", "faults", "p50", "p99", "max"}
}

func inFlightRow(r race.InFlightResult) []string {
	return []string{
		r.Limiter,
		yesNo(r.Atomic),
		fmt.Sprintf("%d/%d", r.Admitted, r.Requests),
		fmt.Sprintf("%d/%d", r.MostInFlight, r.Limit),
		fmt.Sprintf("%d/%d", r.OverTrials, r.Trials),
		strconv.FormatInt(r.HeldAtEnd, 10),
		leakedCell(r),
		strconv.FormatInt(r.WrongfulDenials, 10),
		fmt.Sprintf("%d/%d/%d", r.Faults.Killed, r.Faults.LostReleases, r.Faults.RetriedReleases),
		micros(r.LatencyMicros.P50),
		micros(r.LatencyMicros.P99),
		micros(r.LatencyMicros.Max),
	}
}

// leakedCell is the slots leaked, and those freed twice after a minus.
func leakedCell(r race.InFlightResult) string {
	s := strconv.FormatInt(r.Leaked, 10)
	if r.FreedTwice > 0 {
		s += fmt.Sprintf(" (−%d)", r.FreedTwice)
	}
	return s
}

func inFlightTable(w io.Writer, rep race.Report, s Styles) error {
	rows := make([][]string, len(rep.InFlight))
	for i, r := range rep.InFlight {
		rows[i] = inFlightRow(r)
	}
	t := table.New().
		Border(lipgloss.RoundedBorder()).
		BorderStyle(s.Border).
		Headers(inFlightHeaders()...).
		Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			if row == table.HeaderRow {
				return s.Header
			}
			r := rep.InFlight[row]
			bad := r.OverTrials > 0 || r.Leaked > 0 || r.FreedTwice > 0
			switch {
			case col == 0 && bad, col == 3 && r.MostInFlight > r.Limit, col == 4 && r.OverTrials > 0,
				col == 6 && (r.Leaked > 0 || r.FreedTwice > 0):
				return s.Bad
			case col == 0:
				return s.Good
			case col == 5 && r.HeldAtEnd > 0, col == 7 && r.WrongfulDenials > 0:
				return s.Warn
			}
			return s.Cell
		})
	var b strings.Builder
	b.WriteString(s.Title.Render("ratelab race") + "  " + inFlightSummary(rep) + "\n\n")
	b.WriteString(InFlightVerdict(rep) + "\n")
	b.WriteString(t.Render() + "\n")
	for _, n := range inFlightNotes(rep) {
		b.WriteString(s.Dim.Render(n) + "\n")
	}
	for _, r := range rep.InFlight {
		if r.Explain != nil {
			explainText(&b, rep, r.Limiter, *r.Explain, s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func inFlightMarkdown(w io.Writer, rep race.Report) error {
	var b strings.Builder
	b.WriteString("## ratelab race\n\n")
	b.WriteString(inFlightSummary(rep) + "\n\n")
	b.WriteString("**" + InFlightVerdict(rep) + "**\n\n")
	writeMarkdownTable(&b, inFlightHeaders(), func(yield func([]string)) {
		for _, r := range rep.InFlight {
			yield(inFlightRow(r))
		}
	})
	b.WriteString("\n")
	for _, n := range inFlightNotes(rep) {
		b.WriteString("- " + n + "\n")
	}
	for _, r := range rep.InFlight {
		if r.Explain != nil {
			explainMarkdown(&b, rep, r.Limiter, *r.Explain)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// inFlightExplainSummary says what the trace of an in-flight limiter's
// trial shows, in numbers.
func inFlightExplainSummary(ex race.Explanation, limit int64) string {
	parts := []string{fmt.Sprintf("%s, %s in %s", plural.Count(ex.Decisions, "acquire"), plural.Count(ex.Commands, "command"), micros(ex.SpanMicros))}
	if ex.Reads > 0 {
		parts = append(parts, fmt.Sprintf("%d of %s stale (the goroutine wrote after another one had)", ex.StaleReads, plural.Count(ex.Reads, "read")))
	}
	t := ex.InFlightTrial
	if ex.OverAdmitted > 0 {
		parts = append(parts, fmt.Sprintf("%d of %s made with more than %d held at once", ex.OverAdmitted, plural.Count(ex.Admitted, "admission"), limit))
	} else {
		parts = append(parts, fmt.Sprintf("%s, none with more than the limit held at once", plural.Count(ex.Admitted, "admission")))
	}
	if t != nil {
		s := fmt.Sprintf("the trial held at most %d at once; its key counted %d as every holder was gone, and %d once nobody held one",
			t.MostHeld, t.HeldAtEnd, t.Leaked)
		if t.LeaseWaitMicros > 0 {
			s += fmt.Sprintf(" (%s later, the leases waited out)", micros(t.LeaseWaitMicros))
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

// inFlightSection is a race of in-flight limiters in the HTML report.
func inFlightSection(b *strings.Builder, i int, r Named[race.Report]) {
	rep := r.Result
	heading(b, 2, "race: "+r.Name)
	note(b, inFlightSummary(rep))
	note(b, InFlightVerdict(rep))
	htmlTable(b, inFlightHeaders(), func(yield func([]string)) {
		for _, res := range rep.InFlight {
			yield(inFlightRow(res))
		}
	})
	for _, n := range inFlightNotes(rep) {
		note(b, n)
	}
	atOnce := chart{id: fmt.Sprintf("race-at-once-%d", i), title: "Most held at once per trial",
		xLabel: "trial", yLabel: "requests held at once", limits: []limitLine{{y: float64(rep.Config.Limit), label: "limit"}}}
	leaked := chart{id: fmt.Sprintf("race-leaked-%d", i), title: "Slots leaked per trial",
		xLabel: "trial", yLabel: "slots counted with nobody holding one"}
	lat := chart{id: fmt.Sprintf("race-latency-%d", i), title: "Acquire latency by percentile", xLabel: "percentile",
		yLabel: "latency (ms)", xLog: true, xTicks: spectrumTicks()}
	for _, res := range rep.InFlight {
		var most, leaks []point
		for t, tr := range res.TrialResults {
			most = append(most, point{x: float64(t + 1), y: float64(tr.MostInFlight), bad: tr.Over})
			leaks = append(leaks, point{x: float64(t + 1), y: float64(tr.Leaked), bad: tr.Leaked != 0})
		}
		atOnce.series = append(atOnce.series, series{name: res.Limiter, points: most})
		leaked.series = append(leaked.series, series{name: res.Limiter, points: leaks})
		lat.series = append(lat.series, series{name: res.Limiter, points: spectrumPoints(res.LatencyMicros)})
	}
	b.WriteString(atOnce.svg())
	note(b, "A red outline marks a trial that held more than the limit at once.")
	b.WriteString(leaked.svg())
	b.WriteString(lat.svg())
	for j, res := range rep.InFlight {
		ex := res.Explain
		switch {
		case ex == nil:
		case ex.Skipped != "":
			note(b, res.Limiter+", explained: no trace: "+ex.Skipped)
		case len(ex.Lanes) > 0:
			title := fmt.Sprintf("%s, explained: %s of %s as Redis executed them", res.Limiter, plural.Count(ex.Commands, "command"),
				plural.Count(len(ex.Lanes), "goroutine"))
			b.WriteString(swimlanes(fmt.Sprintf("race-lanes-%d-%d", i, j), title, ex))
			note(b, "One more trial, with MONITOR on (its latency is not comparable): "+inFlightExplainSummary(*ex, rep.Config.Limit))
		}
	}
}
