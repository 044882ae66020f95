package reports_test

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/reports"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func truth(b bool) *bool { return &b }

// raceTrial is one trial of 100 requests at a limit of 5 in a 10 s window,
// read on the clock from 1,700,000,000,000 ms.
func raceTrial(admitted, bound, trips, aborted, errors, state int64) race.Trial {
	return race.Trial{Admitted: admitted, Expected: min(100, bound), Bound: bound, Minimum: min(100-errors, 5),
		ClockFromMillis: 1_700_000_000_000, ClockToMillis: 1_700_000_000_003, SpanMicros: 2400,
		Errors: errors, RoundTrips: trips, ReportedRoundTrips: trips, AbortedTransactions: aborted,
		ReleaseSpreadMicros: 180, ElapsedMicros: 2500, StateVerified: truth(state == admitted), State: state}
}

// raceResult sums trials into a limiter's result, as race.Run does.
func raceResult(info race.Result, trials ...race.Trial) race.Result {
	r := info
	r.Trials = len(trials)
	r.TrialResults = trials
	r.WorstTrialAdmitted = -1
	verified := true
	for _, t := range trials {
		r.Requests += 100
		r.Admitted += t.Admitted
		r.ExpectedAdmitted += t.Expected
		if t.Admitted > t.Expected {
			r.OverAdmitted += t.Admitted - t.Expected
			r.LeakedTrials++
		}
		r.UnderAdmitted += max(t.Minimum-t.Admitted, 0)
		if t.Admitted > r.WorstTrialAdmitted || (t.Admitted == r.WorstTrialAdmitted && t.Expected < r.WorstTrialExpected) {
			r.WorstTrialAdmitted, r.WorstTrialExpected = t.Admitted, t.Expected
		}
		r.MaxTrialExpected = max(r.MaxTrialExpected, t.Expected)
		if t.Bound > 5 {
			r.TrialsAboveLimit++
		}
		r.Errors += t.Errors
		r.RoundTrips += t.RoundTrips
		r.AbortedTransactions += t.AbortedTransactions
		if !*t.StateVerified {
			verified = false
			r.StateMismatches++
		}
	}
	r.StateVerified = truth(verified)
	// Each trial's latency, the last trial's max the result's.
	n := int64(len(trials))
	for k := range r.TrialResults {
		back := n - 1 - int64(k)
		l := info.LatencyMicros
		tr := &r.TrialResults[k]
		tr.LatencyMicros = race.TrialLatency{P50: l.P50 + 20*int64(k), P99: l.P99 - 30*back, Max: l.Max}
		if back > 0 {
			tr.LatencyMicros.Max = min(l.Max, tr.LatencyMicros.P99+50)
		}
		tr.ElapsedMicros = max(tr.ElapsedMicros, tr.LatencyMicros.Max+60)
		tr.SpanMicros = max(tr.SpanMicros, tr.ElapsedMicros-100)
	}
	return r
}

// fixedRace is a race report with fixed numbers, as a run would return it.
// They add up as a run's would: a watch attempt is three round trips and each
// aborted one is retried, so a trial of 100 requests with 485 aborts takes
// 3 × 585; naive takes 2 round trips for an admission, 1 for a denial and 1
// for the expiry; the log that counts denials holds every request.
func fixedRace() race.Report {
	return race.Report{
		Command: "race",
		Redis:   redisrun.Info{Mode: "ephemeral", Version: "7.0.15", Addr: "127.0.0.1:6390"},
		Config: race.Settings{Limiters: []string{"naive", "watch", "lua", "fixed-window", "lua-count-denied"}, Concurrency: 100, Limit: 5,
			WindowMillis: 10000, Trials: 2, RequestsPerWorker: 1, Clock: "caller", WatchRetries: 100},
		ElapsedMillis: 1312,
		Results: []race.Result{
			raceResult(race.Result{Limiter: "naive", Description: "GET the counter, compare, INCR: racy by design",
				Guarantee: "expiry-windows", GuaranteeRule: "at most 5 per 10s key lifetime", Clock: "redis",
				ReleaseSpreadMicros: race.Spread{P50: 180, Max: 240}, ElapsedMillis: 6,
				LatencyMicros: hdr.Percentiles{P50: 1510, P90: 2200, P95: 2480, P99: 2700, P999: 2950, Max: 2950, Count: 200}},
				raceTrial(90, 5, 191, 0, 0, 90), raceTrial(100, 5, 201, 0, 0, 100)),
			raceResult(race.Result{Limiter: "watch", Atomic: true,
				Guarantee: "expiry-windows", GuaranteeRule: "at most 5 per 10s key lifetime", Clock: "redis",
				ReleaseSpreadMicros: race.Spread{P50: 190, Max: 200}, ElapsedMillis: 40,
				LatencyMicros: hdr.Percentiles{P50: 9870, P90: 15400, P95: 17020, P99: 18110, P999: 18500, Max: 18500, Count: 200}},
				raceTrial(5, 5, 3*585, 485, 0, 5), raceTrial(5, 5, 3*580, 480, 0, 5)),
			raceResult(race.Result{Limiter: "lua", Atomic: true,
				Guarantee: "sliding-window", GuaranteeRule: "at most 5 in any 10s span", Clock: "caller",
				ReleaseSpreadMicros: race.Spread{P50: 170, Max: 210}, ElapsedMillis: 5,
				LatencyMicros: hdr.Percentiles{P50: 990, P90: 1610, P95: 1800, P99: 1950, P999: 2010, Max: 2010, Count: 200}},
				raceTrial(5, 5, 100, 0, 0, 5), raceTrial(5, 5, 100, 0, 0, 5)),
			raceResult(race.Result{Limiter: "fixed-window", Atomic: true,
				Guarantee: "aligned-windows", GuaranteeRule: "at most 5 per aligned 10s window", Clock: "caller",
				ReleaseSpreadMicros: race.Spread{P50: 175, Max: 190}, ElapsedMillis: 5,
				LatencyMicros: hdr.Percentiles{P50: 960, P90: 1560, P95: 1750, P99: 1900, P999: 1980, Max: 1980, Count: 200}},
				raceTrial(5, 5, 100, 0, 0, 5), raceTrial(8, 10, 100, 0, 0, 8)),
			raceResult(race.Result{Limiter: "lua-count-denied", Atomic: true,
				Guarantee: "sliding-window", GuaranteeRule: "at most 5 in any 10s span", Clock: "caller",
				ReleaseSpreadMicros: race.Spread{P50: 175, Max: 220}, ElapsedMillis: 1255,
				LatencyMicros: hdr.Percentiles{P50: 1000, P90: 1630, P95: 1820, P99: 1990, P999: 1_250_000, Max: 1_250_000, Count: 200}},
				raceTrial(5, 5, 100, 0, 2, 98), raceTrial(5, 5, 100, 0, 1, 99)),
		},
	}
}

// TestRaceFixtureAddsUp: the fixture keeps the invariants the race's own
// tests hold, so the goldens never show numbers a run cannot produce.
func TestRaceFixtureAddsUp(t *testing.T) {
	for _, r := range fixedRace().Results {
		var trips, aborted int64
		for _, tr := range r.TrialResults {
			trips += tr.RoundTrips
			aborted += tr.AbortedTransactions
			if tr.RoundTrips != tr.ReportedRoundTrips {
				t.Errorf("%s: %d round trips counted, %d reported", r.Limiter, tr.RoundTrips, tr.ReportedRoundTrips)
			}
			if r.Limiter == "watch" && tr.RoundTrips != 3*(100+tr.AbortedTransactions) {
				t.Errorf("watch: %d round trips for 100 requests and %d aborts, want %d", tr.RoundTrips, tr.AbortedTransactions, 3*(100+tr.AbortedTransactions))
			}
			if r.Limiter == "naive" && tr.RoundTrips != 2*tr.Admitted+(100-tr.Admitted)+1 {
				t.Errorf("naive: %d round trips for %d admitted of 100", tr.RoundTrips, tr.Admitted)
			}
		}
		if trips != r.RoundTrips || aborted != r.AbortedTransactions {
			t.Errorf("%s: %d round trips and %d aborts, its trials add up to %d and %d", r.Limiter, r.RoundTrips, r.AbortedTransactions, trips, aborted)
		}
		// Every decision is timed, failed ones too.
		checkPercentiles(t, r.Limiter+" latency", r.LatencyMicros, r.Requests)
		var slowest, elapsed int64
		for _, tr := range r.TrialResults {
			if l := tr.LatencyMicros; l.P50 > l.P99 || l.P99 > l.Max || l.Max > tr.ElapsedMicros {
				t.Errorf("%s: trial latency %+v µs in a trial of %d µs", r.Limiter, l, tr.ElapsedMicros)
			}
			slowest, elapsed = max(slowest, tr.LatencyMicros.Max), elapsed+tr.ElapsedMicros
		}
		if slowest != r.LatencyMicros.Max || elapsed > r.ElapsedMillis*1000 {
			t.Errorf("%s: slowest trial %d µs, result max %d µs; trials took %d µs of the limiter's %d ms", r.Limiter, slowest, r.LatencyMicros.Max, elapsed, r.ElapsedMillis)
		}
	}
}

// checkPercentiles fails the test unless p could be read from a histogram
// of count values: in order, and counting them all.
func checkPercentiles(t *testing.T, what string, p hdr.Percentiles, count int64) {
	t.Helper()
	ordered := []int64{p.P50, p.P90, p.P95, p.P99, p.P999, p.Max}
	for i := 1; i < len(ordered); i++ {
		if ordered[i] < ordered[i-1] {
			t.Errorf("%s: percentiles out of order: %+v", what, p)
			break
		}
	}
	if p.Count != count {
		t.Errorf("%s: count %d, want %d", what, p.Count, count)
	}
}

func TestRaceGolden(t *testing.T) {
	goldens(t, "race", func(w io.Writer, f reports.Format) error {
		return reports.Race(w, fixedRace(), f, reports.Options{Color: false})
	})
}

// TestRaceColor: colour is only there when asked for, it is the colour of
// testdata/race.color.golden, and the text is the same.
func TestRaceColor(t *testing.T) {
	colorGolden(t, "race", fixedRace())
}

// colorful is a renderer with a fixed colour profile (24-bit), whatever the
// terminal or the environment (CI, NO_COLOR) says.
func colorful() *lipgloss.Renderer {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.TrueColor)
	r.SetHasDarkBackground(true)
	return r
}

// sgr matches a terminal's colour and style sequences.
var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// colorGolden renders rep as a table without colour, which has no escape
// sequences, and with colour on a fixed profile, which must be
// testdata/PREFIX.color.golden and, without its escape sequences, the
// same text.
func colorGolden(t *testing.T, prefix string, rep race.Report) {
	t.Helper()
	var plain, color bytes.Buffer
	if err := reports.Race(&plain, rep, reports.Table, reports.Options{Renderer: colorful()}); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(plain.Bytes(), []byte("\x1b[")) {
		t.Fatal("the table without colour has escape sequences")
	}
	if err := reports.Race(&color, rep, reports.Table, reports.Options{Color: true, Renderer: colorful()}); err != nil {
		t.Fatal(err)
	}
	golden(t, prefix+".color.golden", color.Bytes())
	if !bytes.Contains(color.Bytes(), []byte("\x1b[")) {
		t.Error("the table in colour has no escape sequence")
	}
	if text := sgr.ReplaceAll(color.Bytes(), nil); !bytes.Equal(text, plain.Bytes()) {
		t.Errorf("the table in colour says something else than without:\n%s\n---\n%s", text, plain.Bytes())
	}
}

func TestRaceVerdict(t *testing.T) {
	rep := fixedRace()
	want := "naive leaked in 2 of 2 trials: worst trial admitted 100 where its guarantee (at most 5 per 10s key lifetime) allowed 5; " +
		"watch held at most 5 per 10s key lifetime; " +
		"lua and lua-count-denied held at most 5 in any 10s span; " +
		"fixed-window (up to 10 in 1 of 2 trials) held at most 5 per aligned 10s window; " +
		"lua-count-denied's key disagreed with what it admitted in 2 of 2 trials; lua-count-denied had 3 failed decisions"
	if got := reports.RaceVerdict(rep); got != want {
		t.Fatalf("verdict:\n got %q\nwant %q", got, want)
	}
	rep.Results = rep.Results[2:]
	if got, want := reports.RaceVerdict(rep), "no limiter admitted more than its guarantee allowed: "+
		"lua and lua-count-denied held at most 5 in any 10s span; fixed-window (up to 10 in 1 of 2 trials) held at most 5 per aligned 10s window; "+
		"lua-count-denied's key disagreed with what it admitted in 2 of 2 trials; lua-count-denied had 3 failed decisions"; got != want {
		t.Fatalf("verdict:\n got %q\nwant %q", got, want)
	}
}

func TestParseFormat(t *testing.T) {
	if _, err := reports.ParseFormat("yaml"); err == nil || err.Error() != `unknown output "yaml" (want table, markdown or json)` {
		t.Fatalf("ParseFormat(yaml) = %v", err)
	}
}

// goldens renders in each format and compares with testdata/PREFIX.table.golden,
// .md.golden and .json.golden.
func goldens(t *testing.T, prefix string, render func(io.Writer, reports.Format) error) {
	t.Helper()
	for format, ext := range map[reports.Format]string{reports.Table: "table", reports.Markdown: "md", reports.JSON: "json"} {
		t.Run(string(format), func(t *testing.T) {
			var buf bytes.Buffer
			if err := render(&buf, format); err != nil {
				t.Fatal(err)
			}
			golden(t, prefix+"."+ext+".golden", buf.Bytes())
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./reports -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the rendering:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
