package reports_test

import (
	"io"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/reports"
)

// multiLimitTrial is a trial of the multi-limit pair at limit 5 per 10s
// (and 10 per 1m40s, checked first by the sequential one): 5 admitted,
// and held what the 10/1m40s limit's log held after it; round trips, one
// per request and one more per request the first limit admitted when
// sequential.
func multiLimitTrial(held, trips int64) race.Trial {
	t := raceTrial(5, 5, trips, 0, 0, held)
	t.Limits = []race.LimitTrial{
		{Policy: "10/1m40s", Bound: 10, StateChecked: true, Held: held, WronglyConsumed: held - 5},
		{Policy: "5/10s", Bound: 5, StateChecked: true, Held: 5},
	}
	return t
}

// multiLimitResult sums trials of the pair, their limits too, as race.Run does.
func multiLimitResult(info race.Result, trials ...race.Trial) race.Result {
	r := raceResult(info, trials...)
	r.GuaranteeRule = "at most 10 in any 1m40s span and at most 5 in any 10s span"
	r.Limits = []race.LimitResult{
		{Policy: "10/1m40s", GuaranteeRule: "at most 10 in any 1m40s span"},
		{Policy: "5/10s", GuaranteeRule: "at most 5 in any 10s span"},
	}
	for _, t := range trials {
		for i, l := range t.Limits {
			r.Limits[i].WronglyConsumed += l.WronglyConsumed
			if l.WronglyConsumed > 0 {
				r.Limits[i].TrialsWronglyConsumed++
			}
		}
	}
	return r
}

// fixedMultiLimitRace is the race of the multi-limit pair with fixed numbers.
func fixedMultiLimitRace() race.Report {
	return race.Report{
		Command: "race",
		Redis:   redisrun.Info{Mode: "ephemeral", Version: "7.0.15", Addr: "127.0.0.1:6390"},
		Config: race.Settings{Limiters: []string{"multi-limit-sequential", "multi-limit-atomic"}, Concurrency: 100, Limit: 5,
			WindowMillis: 10000, Trials: 2, RequestsPerWorker: 1, Clock: "caller", WatchRetries: 100},
		ElapsedMillis: 212,
		Results: []race.Result{
			multiLimitResult(race.Result{Limiter: "multi-limit-sequential", Guarantee: "sliding-window", Clock: "caller",
				ReleaseSpreadMicros: race.Spread{P50: 2490, Max: 2600}, ElapsedMillis: 30,
				LatencyMicros: hdr.Percentiles{P50: 6080, P90: 8100, P95: 8540, P99: 10730, P999: 10730, Max: 10730, Count: 200}},
				multiLimitTrial(10, 110), multiLimitTrial(10, 110)),
			multiLimitResult(race.Result{Limiter: "multi-limit-atomic", Atomic: true, Guarantee: "sliding-window", Clock: "caller",
				ReleaseSpreadMicros: race.Spread{P50: 4450, Max: 4700}, ElapsedMillis: 40,
				LatencyMicros: hdr.Percentiles{P50: 11470, P90: 13500, P95: 13900, P99: 14860, P999: 15210, Max: 15210, Count: 200}},
				multiLimitTrial(5, 100), multiLimitTrial(5, 100)),
		},
	}
}

// TestRaceMultiLimitGolden: the pair's report shows each limit judged by its
// own guarantee, and says what the sequential one's first limit held for
// requests it denied.
func TestRaceMultiLimitGolden(t *testing.T) {
	goldens(t, "race_multilimit", func(w io.Writer, f reports.Format) error {
		return reports.Race(w, fixedMultiLimitRace(), f, reports.Options{Color: false})
	})
	verdict := reports.RaceVerdict(fixedMultiLimitRace())
	for _, want := range []string{
		"multi-limit-sequential and multi-limit-atomic held at most 10 in any 1m40s span and at most 5 in any 10s span",
		"multi-limit-sequential's 10/1m40s limit held 10 slots for requests it denied (in 2 of 2 trials)",
	} {
		if !strings.Contains(verdict, want) {
			t.Errorf("verdict %q does not say %q", verdict, want)
		}
	}
	if strings.Contains(verdict, "multi-limit-atomic's") {
		t.Errorf("verdict %q blames the atomic pair", verdict)
	}
}
