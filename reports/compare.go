package reports

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"

	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/internal/hdr"
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

// compareColumn is a column of the main table: its header, the workload
// that measures it (none for what the registry says), its cell and whether
// the cell breaks the limit.
type compareColumn struct {
	header, workload string
	cell             func(compare.Result) string
	bad              func(compare.Result) bool
}

// compareColumns are the columns of the workloads that ran.
func compareColumns(rep compare.Report) []compareColumn {
	limit := rep.Config.Limit
	over := func(v *int64) bool { return v != nil && *v > limit }
	never := func(compare.Result) bool { return false }
	all := []compareColumn{
		{"algorithm", "", func(r compare.Result) string { return r.Algorithm }, never},
		{"exact", "", func(r compare.Result) string { return yesNo(r.Exact) }, never},
		{"keys", "", func(r compare.Result) string { return strconv.Itoa(r.KeysPerClient) }, never},
		{"trips", compare.Throughput, func(r compare.Result) string { return optFloat(r.RoundTrips, 2) }, never},
		{"cmds", compare.Throughput, func(r compare.Result) string { return optFloat(r.RedisCommands, 1) }, never},
		{"burst over", compare.Burst, func(r compare.Result) string { return optInt(r.BurstOverAdmitted) },
			func(r compare.Result) bool { return r.BurstOverAdmitted != nil && *r.BurstOverAdmitted > 0 }},
		{"edge max", compare.Boundary, func(r compare.Result) string { return optInt(r.BoundaryMaxInWindow) },
			func(r compare.Result) bool { return over(r.BoundaryMaxInWindow) }},
		{"hammer max", compare.Hammer, func(r compare.Result) string { return optInt(r.HammerMaxInWindow) },
			func(r compare.Result) bool { return over(r.HammerMaxInWindow) }},
		{"recovery", compare.Hammer, recoveryText, func(r compare.Result) bool { return r.HammerLockedOut }},
		{"false allow", compare.Accuracy, func(r compare.Result) string { return optRate(r.FalseAllowRate) }, never},
		{"false deny", compare.Accuracy, func(r compare.Result) string { return optRate(r.FalseDenyRate) }, never},
		{"bytes @" + memoryLimit(rep), compare.Memory, func(r compare.Result) string {
			if b, ok := r.BytesPerClient[memoryLimit(rep)]; ok {
				return bytesText(b)
			}
			return "–"
		}, never},
		{"ops/s", compare.Throughput, func(r compare.Result) string { return optFloat(r.OpsPerSec, 0) }, never},
		{"p50", compare.Throughput, func(r compare.Result) string { return optLatency(r, func(p hdr.Percentiles) int64 { return p.P50 }) }, never},
		{"p99", compare.Throughput, func(r compare.Result) string { return optLatency(r, func(p hdr.Percentiles) int64 { return p.P99 }) }, never},
	}
	if rep.Config.Batch > 1 { // the throughput workload also ran batched
		all = append(all,
			compareColumn{"batched ops/s", compare.Throughput, func(r compare.Result) string { return optFloat(r.BatchedOpsPerSec, 0) }, never},
			compareColumn{"batched trips", compare.Throughput, func(r compare.Result) string { return optFloat(r.BatchedRoundTrips, 2) }, never})
	}
	var cols []compareColumn
	for _, c := range all {
		if c.workload == "" || slices.Contains(rep.Config.Workloads, c.workload) {
			cols = append(cols, c)
		}
	}
	return cols
}

func compareHeaders(rep compare.Report) []string {
	var h []string
	for _, c := range compareColumns(rep) {
		h = append(h, c.header)
	}
	return h
}

func compareRow(rep compare.Report, r compare.Result) []string {
	var row []string
	for _, c := range compareColumns(rep) {
		row = append(row, c.cell(r))
	}
	return row
}

func recoveryText(r compare.Result) string {
	switch {
	case r.HammerLockedOut:
		return "never"
	case r.HammerRecoveryMillis != nil:
		return micros(*r.HammerRecoveryMillis * 1000)
	}
	return "–"
}

func optLatency(r compare.Result, at func(hdr.Percentiles) int64) string {
	if r.LatencyMicros == nil {
		return "–"
	}
	return micros(at(*r.LatencyMicros))
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

// bytesText renders a byte count in B, KiB, MiB…, as every report does.
func bytesText(b int64) string { return compare.Bytes(b) }

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
	ran := func(w string) bool { return slices.Contains(c.Workloads, w) }
	var notes []string
	if ran(compare.Throughput) {
		notes = append(notes, "trips: Redis round trips per decision, counted on the client. cmds: commands Redis ran per decision "+
			"(INFO commandstats, the EVALSHA itself not counted; other clients of the server add to it).")
	}
	if ran(compare.Burst) {
		notes = append(notes, fmt.Sprintf("burst over: admitted beyond the limit when %s hit one key at once, over %s.",
			plural.Count(c.BurstConcurrency, "goroutine"), plural.Count(c.BurstTrials, "trial")))
	}
	if ran(compare.Boundary) {
		notes = append(notes, "edge max: most admitted in one window's span when a full limit arrives 1 ms before a window boundary and another at it.")
	}
	if ran(compare.Hammer) {
		notes = append(notes, "hammer max: most admitted in one window's span while one client sends 3× the limit for 3 windows; recovery: "+
			"from when it stops until a retry every 100 ms (a tenth of the window, if shorter) is admitted (never: not within 10 windows).")
	}
	if ran(compare.Accuracy) {
		notes = append(notes, fmt.Sprintf("false allow/deny: share of the decisions of %s (0.8–1.2× the limit, %s, seed %d) "+
			"that an exact sliding window over what the algorithm admitted would have denied/allowed; "+
			"the simulated caller clock makes these figures repeatable.", plural.Count(clients, "Poisson client"),
			plural.Count(c.AccuracyWindows, "window"), c.Seed))
	}
	if ran(compare.Memory) {
		notes = append(notes, fmt.Sprintf("bytes @%s: MEMORY USAGE of one client's keys after it filled a limit of %s (KiB and MiB are 1024 and 1024² bytes).",
			memoryLimit(rep), memoryLimit(rep)))
	}
	if ran(compare.Throughput) {
		notes = append(notes, fmt.Sprintf("ops/s, p50, p99: decisions over %s on %s for %s, on the real clock.",
			plural.Count(c.Keys, "client"), plural.Count(c.Connections, "connection"), time.Duration(c.DurationMillis)*time.Millisecond))
	}
	if ran(compare.Throughput) && c.Batch > 1 {
		notes = append(notes, fmt.Sprintf("batched ops/s, trips: the same throughput with the decisions waiting at one moment sent as one "+
			"pipeline of at most %d EVALSHAs, up to %d pipelines at once, each on its own connection; trips: pipelines per decision.",
			c.Batch, compare.Pipelines(c.Connections, c.Batch)))
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
	cols := compareColumns(rep)
	t := table.New().Border(lipgloss.RoundedBorder()).BorderStyle(s.Border).
		Headers(compareHeaders(rep)...).Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			switch {
			case row == table.HeaderRow:
				return s.Header
			case cols[col].bad(rep.Results[row]):
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
	for _, line := range rep.Recommendations() {
		b.WriteString("• " + line + "\n")
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
	for _, line := range rep.Recommendations() {
		b.WriteString("- " + line + "\n")
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
