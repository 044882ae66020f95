package reports_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/reports"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func truth(b bool) *bool { return &b }

// fixedRace is a race report with fixed numbers, as a run would return it.
func fixedRace() race.Report {
	trial := func(admitted int64) race.Trial {
		return race.Trial{Admitted: admitted, Expected: 5, RoundTrips: 200, ReportedRoundTrips: 200,
			ReleaseSpreadMicros: 180, ElapsedMicros: 2500, StateVerified: truth(true), State: admitted}
	}
	return race.Report{
		Command: "race",
		Redis:   race.Server{Mode: "ephemeral", Version: "7.0.15", Addr: "127.0.0.1:6390"},
		Config: race.Settings{Limiters: []string{"naive", "watch", "lua", "lua-count-denied"}, Concurrency: 100, Limit: 5,
			WindowMillis: 10000, Trials: 2, RequestsPerWorker: 1, Clock: "caller", WatchRetries: 100},
		ElapsedMillis: 912,
		Results: []race.Result{
			{Limiter: "naive", Description: "GET the counter, compare, INCR: racy by design", Trials: 2, Requests: 200,
				Admitted: 190, ExpectedAdmitted: 10, OverAdmitted: 180, LeakedTrials: 2, WorstTrialAdmitted: 100,
				RoundTrips: 400, StateVerified: truth(true), ReleaseSpreadMicros: race.Spread{P50: 180, Max: 240},
				LatencyMicros: race.Latency{P50: 1510, P95: 2480, P99: 2700, Max: 2950},
				TrialResults:  []race.Trial{trial(90), trial(100)}, ElapsedMillis: 6},
			{Limiter: "watch", Atomic: true, Trials: 2, Requests: 200, Admitted: 10, ExpectedAdmitted: 10,
				WorstTrialAdmitted: 5, RoundTrips: 3520, AbortedTransactions: 970, StateVerified: truth(true),
				ReleaseSpreadMicros: race.Spread{P50: 190, Max: 200},
				LatencyMicros:       race.Latency{P50: 9870, P95: 17020, P99: 18110, Max: 18500},
				TrialResults:        []race.Trial{trial(5), trial(5)}, ElapsedMillis: 40},
			{Limiter: "lua", Atomic: true, Trials: 2, Requests: 200, Admitted: 10, ExpectedAdmitted: 10,
				WorstTrialAdmitted: 5, RoundTrips: 200, StateVerified: truth(true),
				ReleaseSpreadMicros: race.Spread{P50: 170, Max: 210},
				LatencyMicros:       race.Latency{P50: 990, P95: 1800, P99: 1950, Max: 2010},
				TrialResults:        []race.Trial{trial(5), trial(5)}, ElapsedMillis: 5},
			{Limiter: "lua-count-denied", Atomic: true, Trials: 2, Requests: 200, Admitted: 10, ExpectedAdmitted: 10,
				WorstTrialAdmitted: 5, RoundTrips: 200, StateVerified: truth(false), StateMismatches: 2,
				ReleaseSpreadMicros: race.Spread{P50: 175, Max: 220}, Errors: 3,
				LatencyMicros: race.Latency{P50: 1000, P95: 1820, P99: 1990, Max: 1_250_000},
				TrialResults:  []race.Trial{trial(5), trial(5)}, ElapsedMillis: 5},
		},
	}
}

func TestRaceGolden(t *testing.T) {
	for _, tc := range []struct {
		format reports.Format
		file   string
	}{
		{reports.Table, "race.table.golden"},
		{reports.Markdown, "race.md.golden"},
		{reports.JSON, "race.json.golden"},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			var buf bytes.Buffer
			if err := reports.Race(&buf, fixedRace(), tc.format, reports.Options{Color: false}); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, buf.Bytes())
		})
	}
}

// TestRaceColor: colour is only there when asked for, and the text is the same.
func TestRaceColor(t *testing.T) {
	var plain, color bytes.Buffer
	if err := reports.Race(&plain, fixedRace(), reports.Table, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(plain.Bytes(), []byte("\x1b[")) {
		t.Fatal("plain table has escape sequences")
	}
	if err := reports.Race(&color, fixedRace(), reports.Table, reports.Options{Color: true}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(color.Bytes(), []byte("\x1b[")) {
		t.Skip("the renderer found no colour support here")
	}
}

func TestRaceVerdict(t *testing.T) {
	rep := fixedRace()
	want := "naive leaked in 2 of 2 trials: worst trial admitted 100 of a limit of 5; " +
		"watch, lua and lua-count-denied never admitted more than 5; " +
		"lua-count-denied's key disagreed with what it admitted in 2 of 2 trials; lua-count-denied had 3 failed decisions"
	if got := reports.RaceVerdict(rep); got != want {
		t.Fatalf("verdict:\n got %q\nwant %q", got, want)
	}
	rep.Results = rep.Results[1:]
	if got, want := reports.RaceVerdict(rep), "no limiter admitted more than 5 in any trial; "+
		"lua-count-denied's key disagreed with what it admitted in 2 of 2 trials; lua-count-denied had 3 failed decisions"; got != want {
		t.Fatalf("verdict:\n got %q\nwant %q", got, want)
	}
}

func TestParseFormat(t *testing.T) {
	if _, err := reports.ParseFormat("yaml"); err == nil || err.Error() != `unknown output "yaml" (want table, markdown or json)` {
		t.Fatalf("ParseFormat(yaml) = %v", err)
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
