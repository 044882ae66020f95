package reports

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"

	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/internal/plural"
)

// DrillInFlight renders an in-flight drill report in the given format.
func DrillInFlight(w io.Writer, rep drill.InFlightReport, f Format, opt Options) error {
	switch f {
	case JSON:
		return writeJSON(w, rep)
	case Markdown:
		var b strings.Builder
		b.WriteString("## ratelab drill in-flight\n\n" + drillInFlightSummary(rep) + "\n\n**" + DrillInFlightVerdict(rep) + "**\n\n")
		writeMarkdownTable(&b, drillInFlightHeaders(), func(yield func([]string)) {
			for _, r := range rep.Results {
				yield(drillInFlightRow(r))
			}
		})
		b.WriteString("\n")
		for _, n := range drillInFlightNotes(rep) {
			b.WriteString("- " + n + "\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	default:
		return drillInFlightTable(w, rep, NewStyles(w, opt))
	}
}

func drillInFlightSummary(rep drill.InFlightReport) string {
	c := rep.Config
	return fmt.Sprintf("%s · %d in flight per consumer, lease %s · %s, each keeping %d requests outstanding · "+
		"upstream hold %s · steady %s, then the gateway killed and restarted, watched %s",
		serverName(rep.RedisVersion), c.InFlight, ms(c.LeaseMillis), plural.Count(c.Consumers, "consumer"), c.InFlight,
		ms(c.HoldMillis), ms(c.SteadyMillis), ms(c.WatchMillis))
}

func drillInFlightHeaders() []string {
	return []string{"engine", "semaphore", "held at kill", "leaked at end", "recover", "admitted after", "refused after"}
}

func drillInFlightRow(r drill.InFlightRow) []string {
	return []string{r.Engine, r.Kind, strconv.FormatInt(r.HeldAtKill, 10), strconv.FormatInt(r.LeakedAtEnd, 10),
		optMillis(r.RecoverMillis), strconv.FormatInt(r.Admitted, 10), strconv.FormatInt(r.Refused, 10)}
}

// DrillInFlightVerdict says in one line which gateways' slots leaked.
func DrillInFlightVerdict(rep drill.InFlightReport) string {
	leaked := rep.Leaked()
	if len(leaked) == 0 {
		return fmt.Sprintf("no slot leaked, in all %s", plural.Count(len(rep.Results), "run"))
	}
	return fmt.Sprintf("%d of %s leaked slots: %s", len(leaked), plural.Count(len(rep.Results), "run"), strings.Join(leaked, "; "))
}

func drillInFlightNotes(rep drill.InFlightReport) []string {
	notes := []string{
		"held at kill: slots Redis counted, over every consumer, once the killed gateway had stopped (its Redis " +
			"connections were cut first, so none of its releases arrived). leaked at end: slots Redis still counted once " +
			"the watch had ended and every request had ended. recover: kill to the first poll (every 50ms) at which Redis " +
			"counted none of the dead gateway's slots (– when it still did at the end). admitted/refused after: the " +
			"restarted gateway's 2xx and 429 answers.",
		"lease: the gateway's in-flight limit, a lease per request that runs out by itself. counter: INCR when a " +
			"request comes, DECR when it ends (semaphore-incr), served by a gateway the drill runs: its dead slots stay " +
			"counted until someone deletes the key.",
		fmt.Sprintf("The drill took %s.", ms(rep.ElapsedMillis)),
	}
	for _, s := range rep.Skipped {
		notes = append(notes, fmt.Sprintf("skipped %s: %s", s.Engine, s.Reason))
	}
	return notes
}

func drillInFlightTable(w io.Writer, rep drill.InFlightReport, s Styles) error {
	rows := make([][]string, len(rep.Results))
	for i, r := range rep.Results {
		rows[i] = drillInFlightRow(r)
	}
	t := table.New().Border(lipgloss.RoundedBorder()).BorderStyle(s.Border).Headers(drillInFlightHeaders()...).Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			if row == table.HeaderRow {
				return s.Header
			}
			if col == 3 && rep.Results[row].LeakedAtEnd > 0 {
				return s.Bad
			}
			return s.Cell
		})
	var b strings.Builder
	b.WriteString(s.Title.Render("ratelab drill in-flight") + "  " + drillInFlightSummary(rep) + "\n\n")
	b.WriteString(DrillInFlightVerdict(rep) + "\n")
	b.WriteString(t.Render() + "\n")
	for _, n := range drillInFlightNotes(rep) {
		b.WriteString(s.Dim.Render(n) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
