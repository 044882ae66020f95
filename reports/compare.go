package reports

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"

	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/internal/plural"
)

// Compare renders a comparison in the given format.
func Compare(w io.Writer, rep compare.Report, f Format, opt Options) error {
	switch f {
	case JSON:
		return writeJSON(w, rep)
	case Markdown:
		return compareMarkdown(w, rep)
	default:
		return compareTable(w, rep, NewStyles(w, opt))
	}
}

func compareSummary(rep compare.Report) string {
	c := rep.Config
	server := serverName(rep.Redis.Version)
	mode := rep.Redis.Mode
	if rep.Redis.Cluster {
		mode += " cluster"
	}
	return fmt.Sprintf("%s (%s, %s) · limit %d per %s · workloads: %s",
		server, mode, rep.Redis.Addr, c.Limit, time.Duration(c.WindowMillis)*time.Millisecond, strings.Join(c.Workloads, ", "))
}

// memoryLimit is the measured limit the main table shows memory at.
func memoryLimit(rep compare.Report) string {
	best := "100"
	var bestDist int64 = -1
	for _, l := range compare.MemoryLimits() {
		d := l - rep.Config.Limit
		if d < 0 {
			d = -d
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = strconv.FormatInt(l, 10), d
		}
	}
	return best
}

func compareHeaders(rep compare.Report) []string {
	return []string{"algorithm", "exact", "keys", "trips", "cmds", "burst over", "edge max", "hammer max",
		"recovery", "false allow", "false deny", "bytes @" + memoryLimit(rep), "ops/s", "p50", "p99"}
}

func compareRow(rep compare.Report, r compare.Result) []string {
	recovery := "–"
	switch {
	case r.HammerLockedOut:
		recovery = "never"
	case r.HammerRecoveryMillis != nil:
		recovery = micros(*r.HammerRecoveryMillis * 1000)
	}
	mem := "–"
	if b, ok := r.BytesPerClient[memoryLimit(rep)]; ok {
		mem = bytesText(b)
	}
	p50, p99 := "–", "–"
	if r.LatencyMicros != nil {
		p50, p99 = micros(r.LatencyMicros.P50), micros(r.LatencyMicros.P99)
	}
	return []string{
		r.Algorithm, yesNo(r.Exact), strconv.Itoa(r.KeysPerClient),
		optFloat(r.RoundTrips, 2), optFloat(r.RedisCommands, 1),
		optInt(r.BurstOverAdmitted), optInt(r.BoundaryMaxInWindow), optInt(r.HammerMaxInWindow), recovery,
		optRate(r.FalseAllowRate), optRate(r.FalseDenyRate), mem, optFloat(r.OpsPerSec, 0), p50, p99,
	}
}

func optInt(v *int64) string {
	if v == nil {
		return "–"
	}
	return strconv.FormatInt(*v, 10)
}

func optFloat(v *float64, digits int) string {
	if v == nil {
		return "–"
	}
	return strconv.FormatFloat(*v, 'f', digits, 64)
}

func optRate(v *float64) string {
	if v == nil {
		return "–"
	}
	return compare.Percent(*v)
}

// bytesText renders a byte count with its unit.
func bytesText(b int64) string {
	switch {
	case b < 1000:
		return strconv.FormatInt(b, 10) + " B"
	case b < 1_000_000:
		return trimZeros(fmt.Sprintf("%.1f", float64(b)/1e3)) + " kB"
	case b < 1_000_000_000:
		return trimZeros(fmt.Sprintf("%.1f", float64(b)/1e6)) + " MB"
	case b < 1_000_000_000_000:
		return trimZeros(fmt.Sprintf("%.1f", float64(b)/1e9)) + " GB"
	}
	return trimZeros(fmt.Sprintf("%.1f", float64(b)/1e12)) + " TB"
}

func memoryHeaders() []string {
	h := []string{"algorithm"}
	for _, l := range compare.MemoryLimits() {
		h = append(h, "limit "+strconv.FormatInt(l, 10))
	}
	return append(h, "1M clients at limit 10000")
}

func memoryRows(rep compare.Report) [][]string {
	var rows [][]string
	for _, r := range rep.Results {
		if r.BytesPerClient == nil {
			continue
		}
		row := []string{r.Algorithm}
		for _, l := range compare.MemoryLimits() {
			row = append(row, bytesText(r.BytesPerClient[strconv.FormatInt(l, 10)]))
		}
		row = append(row, bytesText(r.BytesPerClient["10000"]*1_000_000))
		rows = append(rows, row)
	}
	return rows
}

func compareNotes(rep compare.Report) []string {
	c := rep.Config
	clients := c.AccuracyClients
	for _, r := range rep.Results {
		if r.AccuracyClients > 0 {
			clients = r.AccuracyClients // fewer, for high limits
		}
	}
	notes := []string{
		"trips: Redis round trips per decision, counted on the client. cmds: commands Redis ran per decision (INFO commandstats, the EVALSHA itself not counted; other clients of the server add to it).",
		fmt.Sprintf("burst over: admitted beyond the limit when %s hit one key at once, over %s. "+
			"edge max: most admitted in one window's span when a full limit arrives 1 ms before a window boundary and another at it.",
			plural.Count(c.BurstConcurrency, "goroutine"), plural.Count(c.BurstTrials, "trial")),
		"hammer max: most admitted in one window's span while one client sends 3× the limit for 3 windows; recovery: " +
			"from when it stops until a retry every 100 ms (a tenth of the window, if shorter) is admitted (never: not within 10 windows).",
		fmt.Sprintf("false allow/deny: share of the decisions of %s (0.8–1.2× the limit, %s, seed %d) "+
			"that an exact sliding window over what the algorithm admitted would have denied/allowed; "+
			"the simulated caller clock makes these figures repeatable.", plural.Count(clients, "Poisson client"),
			plural.Count(c.AccuracyWindows, "window"), c.Seed),
		fmt.Sprintf("ops/s, p50, p99: decisions over %s on %s for %s, on the real clock.",
			plural.Count(c.Keys, "client"), plural.Count(c.Connections, "connection"), time.Duration(c.DurationMillis)*time.Millisecond),
	}
	if rep.PingOpsPerSec != nil {
		notes = append(notes, fmt.Sprintf("The server's own ceiling on those connections: %.0f PINGs/s (p50 %s, p99 %s).",
			*rep.PingOpsPerSec, micros(rep.PingLatencyMicros.P50), micros(rep.PingLatencyMicros.P99)))
	}
	if rep.Redis.Mode == "embedded" {
		notes = append(notes, "These results come from an embedded in-process Redis (miniredis), not a redis-server: "+
			"it has no MEMORY USAGE, and its latencies are not Redis's.")
	}
	notes = append(notes, fmt.Sprintf("Run took %s.", micros(rep.ElapsedMillis*1000)))
	return notes
}

func compareTable(w io.Writer, rep compare.Report, s Styles) error {
	rows := make([][]string, len(rep.Results))
	for i, r := range rep.Results {
		rows[i] = compareRow(rep, r)
	}
	limit := rep.Config.Limit
	t := table.New().Border(lipgloss.RoundedBorder()).BorderStyle(s.Border).
		Headers(compareHeaders(rep)...).Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			if row == table.HeaderRow {
				return s.Header
			}
			r := rep.Results[row]
			switch {
			case col == 5 && r.BurstOverAdmitted != nil && *r.BurstOverAdmitted > 0,
				col == 6 && r.BoundaryMaxInWindow != nil && *r.BoundaryMaxInWindow > limit,
				col == 7 && r.HammerMaxInWindow != nil && *r.HammerMaxInWindow > limit,
				col == 8 && r.HammerLockedOut:
				return s.Bad
			case col == 0:
				return s.Good
			}
			return s.Cell
		})
	var b strings.Builder
	b.WriteString(s.Title.Render("ratelab compare") + "  " + compareSummary(rep) + "\n\n")
	b.WriteString(t.Render() + "\n")
	if mrows := memoryRows(rep); len(mrows) > 0 {
		b.WriteString("\nMemory per client after filling its limit (MEMORY USAGE of its keys):\n")
		mt := table.New().Border(lipgloss.RoundedBorder()).BorderStyle(s.Border).Headers(memoryHeaders()...).Rows(mrows...).
			StyleFunc(func(row, _ int) lipgloss.Style {
				if row == table.HeaderRow {
					return s.Header
				}
				return s.Cell
			})
		b.WriteString(mt.Render() + "\n")
	}
	b.WriteString("\n")
	for _, r := range rep.Results {
		b.WriteString("• " + r.Recommendation + "\n")
	}
	b.WriteString("\n")
	for _, n := range compareNotes(rep) {
		b.WriteString(s.Dim.Render(n) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func compareMarkdown(w io.Writer, rep compare.Report) error {
	var b strings.Builder
	b.WriteString("## ratelab compare\n\n" + compareSummary(rep) + "\n\n")
	writeMarkdownTable(&b, compareHeaders(rep), func(yield func([]string)) {
		for _, r := range rep.Results {
			yield(compareRow(rep, r))
		}
	})
	if mrows := memoryRows(rep); len(mrows) > 0 {
		b.WriteString("\nMemory per client after filling its limit (MEMORY USAGE of its keys):\n\n")
		writeMarkdownTable(&b, memoryHeaders(), func(yield func([]string)) {
			for _, r := range mrows {
				yield(r)
			}
		})
	}
	b.WriteString("\n")
	for _, r := range rep.Results {
		b.WriteString("- " + r.Recommendation + "\n")
	}
	b.WriteString("\n")
	for _, n := range compareNotes(rep) {
		b.WriteString("> " + n + "\n>\n")
	}
	_, err := io.WriteString(w, strings.TrimSuffix(b.String(), ">\n"))
	return err
}

// writeMarkdownTable writes a header row, the separator and the rows.
func writeMarkdownTable(b *strings.Builder, headers []string, rows func(func([]string))) {
	b.WriteString("| " + strings.Join(headers, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(headers)) + "\n")
	rows(func(cells []string) {
		for i := range cells {
			cells[i] = escapeMarkdown(cells[i])
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	})
}
