package reports_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/reports"
)

// inFlightTrial is one trial of 100 goroutines × 4 requests at a limit of
// 5, its faults the default shares of its admissions, and the counters'
// key ending at what those left.
func inFlightTrial(admitted, mostHeld, heldAtEnd, leaked, wrongful int64, faults race.FaultCounts) race.InFlightTrial {
	return race.InFlightTrial{Requests: 400, Admitted: admitted, Denied: 400 - admitted, MostInFlight: mostHeld, MostHeld: mostHeld,
		Over: mostHeld > 5, OverHolders: max(mostHeld-5, 0), HeldAtEnd: heldAtEnd, Leaked: leaked, WrongfulDenials: wrongful,
		Faults: faults, LatencyMicros: race.TrialLatency{P50: 900, P99: 2400, Max: 2600}, ElapsedMicros: 212_000}
}

// inFlightResult sums trials as race.Run does.
func inFlightResult(info race.InFlightResult, trials ...race.InFlightTrial) race.InFlightResult {
	r := info
	r.Limit = 5
	r.TrialResults = trials
	for _, t := range trials {
		r.Trials++
		r.Requests += t.Requests
		r.Admitted += t.Admitted
		r.Denied += t.Denied
		r.MostInFlight = max(r.MostInFlight, t.MostInFlight)
		r.MostHeld = max(r.MostHeld, t.MostHeld)
		if t.Over {
			r.OverTrials++
			r.OverHolders += t.OverHolders
		}
		if t.Leaked > 0 {
			r.Leaked += t.Leaked
			r.LeakedTrials++
		}
		r.HeldAtEnd += t.HeldAtEnd
		r.WrongfulDenials += t.WrongfulDenials
		r.OutlivedLeases += t.OutlivedLeases
		r.Faults.Killed += t.Faults.Killed
		r.Faults.LostReleases += t.Faults.LostReleases
		r.Faults.RetriedReleases += t.Faults.RetriedReleases
	}
	return r
}

// fixedInFlight is a race of the three in-flight limiters with fixed
// numbers that add up as a run's do, the naive one explained.
func fixedInFlight() race.Report {
	naiveExplained := inFlightTrial(20, 10, 5, 5, 3, race.FaultCounts{Killed: 4, LostReleases: 2, RetriedReleases: 1})
	incrSecond := inFlightTrial(12, 5, 3, 0, 0, race.FaultCounts{Killed: 3, LostReleases: 2, RetriedReleases: 2})
	leaseSlow := inFlightTrial(12, 5, 5, 0, 0, race.FaultCounts{Killed: 3, LostReleases: 2, RetriedReleases: 1})
	leaseSlow.MostInFlight, leaseSlow.OutlivedLeases, leaseSlow.LeaseWaitMicros = 6, 1, 436_000
	incrSecond.Leaked = 3
	return race.Report{
		Command: "race",
		Redis:   redisrun.Info{Mode: "ephemeral", Version: "7.0.15", Addr: "127.0.0.1:6390"},
		Config: race.Settings{Limiters: []string{"semaphore-naive", "semaphore-incr", "semaphore-lease"}, Concurrency: 100, Limit: 5,
			Trials: 2, RequestsPerWorker: 4,
			InFlight: &race.InFlightSettings{HoldMillis: 50, LeaseTTLMillis: 500, Faults: race.Faults{Kill: 0.2, LoseRelease: 0.1, RetryRelease: 0.1}}},
		ElapsedMillis: 2140,
		Results:       []race.Result{},
		InFlight: []race.InFlightResult{
			func() race.InFlightResult {
				r := inFlightResult(race.InFlightResult{Limiter: "semaphore-naive", Description: "GET the counter, compare, INCR; DECR at the end",
					ElapsedMillis: 430, LatencyMicros: hdr.Percentiles{P50: 1090, P90: 5100, P95: 6000, P99: 7050, P999: 7750, Max: 7750, Count: 800}},
					inFlightTrial(75, 100, 15, 15, 180, race.FaultCounts{Killed: 15, LostReleases: 8, RetriedReleases: 8}),
					inFlightTrial(71, 100, 15, 15, 176, race.FaultCounts{Killed: 15, LostReleases: 8, RetriedReleases: 8}))
				r.Explain = &race.Explanation{Node: "127.0.0.1:6390", Key: "rl:{race-1a2b3c4d-semaphore-naive-explain}:semaphore-naive",
					InFlightTrial: &naiveExplained, Decisions: 40, Commands: 96, Counts: map[string]int{"GET": 40, "INCR": 20, "DECR": 36},
					SpanMicros: 205_590, Reads: 40, StaleReads: 31, Admitted: 20, OverAdmitted: 1,
					Moments: []race.Moment{{Kind: race.MomentOver, Goroutine: "g1",
						Read:       &race.Step{Event: 1, Micros: 57, Goroutine: "g1", Command: "GET", Value: new(int64)},
						OtherRead:  &race.Step{Event: 0, Micros: 46, Goroutine: "g5", Command: "GET", Value: new(int64)},
						OtherWrite: &race.Step{Event: 2, Micros: 638, Goroutine: "g5", Command: "INCR", Value: ptr(5)},
						Write:      &race.Step{Event: 3, Micros: 652, Goroutine: "g1", Command: "INCR", Value: ptr(6)},
						HeldAtOnce: 6, Allowed: 5, WritesBetween: 5}},
					Events: []race.Event{
						{Index: 0, Micros: 46, Goroutine: "g5", Command: "GET rl:{race-1a2b3c4d-semaphore-naive-explain}:semaphore-naive", Reply: "(nil)", Mark: "stale"},
						{Index: 1, Micros: 57, Goroutine: "g1", Command: "GET rl:{race-1a2b3c4d-semaphore-naive-explain}:semaphore-naive", Reply: "(nil)", Mark: "stale"},
						{Index: 2, Micros: 638, Goroutine: "g5", Command: "INCR rl:{race-1a2b3c4d-semaphore-naive-explain}:semaphore-naive", Reply: "5"},
						{Index: 3, Micros: 652, Goroutine: "g1", Command: "INCR rl:{race-1a2b3c4d-semaphore-naive-explain}:semaphore-naive", Reply: "6", Mark: "over"},
						{Index: 4, Micros: 51_315, Goroutine: "g5", Command: "DECR rl:{race-1a2b3c4d-semaphore-naive-explain}:semaphore-naive", Reply: "5"},
					}}
				return r
			}(),
			inFlightResult(race.InFlightResult{Limiter: "semaphore-incr", Description: "INCR, then compare; DECR on a denial and at the end",
				Atomic: true, ElapsedMillis: 425, LatencyMicros: hdr.Percentiles{P50: 2420, P90: 5300, P95: 6100, P99: 6900, P999: 8020, Max: 8020, Count: 800}},
				inFlightTrial(13, 5, 3, 3, 240, race.FaultCounts{Killed: 3, LostReleases: 2, RetriedReleases: 2}), incrSecond),
			inFlightResult(race.InFlightResult{Limiter: "semaphore-lease", Description: "a sorted set of leases: drop the expired, count, add",
				Atomic: true, Expires: true, ElapsedMillis: 1280, LatencyMicros: hdr.Percentiles{P50: 1940, P90: 6400, P95: 7300, P99: 8540, P999: 8930, Max: 8930, Count: 800}},
				inFlightTrial(12, 5, 5, 0, 0, race.FaultCounts{Killed: 3, LostReleases: 2, RetriedReleases: 1}), leaseSlow),
		},
	}
}

func ptr(n int64) *int64 { return &n }

func TestInFlightGolden(t *testing.T) {
	goldens(t, "race_inflight", func(w io.Writer, f reports.Format) error {
		return reports.Race(w, fixedInFlight(), f, reports.Options{Color: false})
	})
}

// TestInFlightColor: the in-flight table in colour says what it says
// without, in the colours of testdata/race_inflight.color.golden.
func TestInFlightColor(t *testing.T) {
	colorGolden(t, "race_inflight", fixedInFlight())
}

func TestInFlightVerdict(t *testing.T) {
	rep := fixedInFlight()
	want := "semaphore-naive held up to 100 at once where the limit is 5 (in 2 of 2 trials) and leaked 30 slots (in 2 of 2 trials): " +
		"its key counted them with nobody holding one; " +
		"semaphore-incr leaked 6 slots (in 2 of 2 trials): its key counted them with nobody holding one; " +
		"semaphore-lease held at most 5 at once and leaked nothing once its 500ms lease TTL had passed; " +
		"semaphore-naive denied 356 requests when fewer than 5 could have been held; semaphore-incr denied 240 requests when fewer than 5 could have been held"
	if got := reports.InFlightVerdict(rep); got != want {
		t.Fatalf("verdict:\n got %q\nwant %q", got, want)
	}
	rep.InFlight = rep.InFlight[2:]
	if got, want := reports.InFlightVerdict(rep), "no limiter held more than its limit at once or leaked a slot: "+
		"semaphore-lease held at most 5 at once and leaked nothing once its 500ms lease TTL had passed"; got != want {
		t.Fatalf("verdict:\n got %q\nwant %q", got, want)
	}
	// A key that ended below its holders freed slots twice: a leak too.
	rep = fixedInFlight()
	incr := &rep.InFlight[1]
	incr.Leaked, incr.LeakedTrials, incr.FreedTwice, incr.FreedTwiceTrials = 0, 0, 2, 1
	got := reports.InFlightVerdict(rep)
	if !strings.Contains(got, "semaphore-incr freed 2 slots twice (in 1 of 2 trials)") {
		t.Errorf("verdict %q does not say the slots freed twice", got)
	}
	if leaks := strings.Join(rep.Leaked(), "; "); !strings.Contains(leaks, "semaphore-incr freed 2 slots twice") {
		t.Errorf("Leaked() = %q", leaks)
	}
	var b bytes.Buffer
	if err := reports.Race(&b, rep, reports.Table, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "0 (−2)") || !strings.Contains(b.String(), "the limit rose by as much") {
		t.Errorf("the table does not show the slots freed twice:\n%s", b.String())
	}
}
