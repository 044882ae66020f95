package race_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/race"
)

var srv *redisrun.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

func config(t testing.TB, addr string, limiters ...string) race.Config {
	t.Helper()
	return race.Config{
		Redis:             redisOptions(addr),
		Limiters:          limiters,
		Policy:            algorithms.Policy{Limit: 5, Window: 10 * time.Second},
		Concurrency:       100,
		RequestsPerWorker: 1,
		Trials:            20,
		Consumer:          redistest.Prefix(t),
		// A bound, not a measure: a loaded machine under the race detector
		// can take tens of seconds over a trial that takes milliseconds.
		TrialTimeout: 2 * time.Minute,
	}
}

// redisOptions reach addrs with timeouts a loaded machine under the race
// detector does not reach, and no retry: a command resent after a timeout
// may have run already, and would count twice.
func redisOptions(addrs ...string) *redis.UniversalOptions {
	return &redis.UniversalOptions{Addrs: addrs, DialTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, MaxRetries: -1}
}

func byName(rep race.Report) map[string]race.Result {
	m := map[string]race.Result{}
	for _, r := range rep.Results {
		m[r.Limiter] = r
	}
	return m
}

// correct lists the limiters that keep their guarantee.
func correct() []string {
	return append([]string{"multi", "watch", "lua", "lua-count-denied", "multi-limit-sequential", "multi-limit-atomic"}, algorithms.Algorithms()...)
}

// checkTrials asserts what every trial of every limiter must show, whatever
// the scheduling: the bound is the limiter's own and at least the limit,
// Expected is the bound capped by the requests, the counts add up, and a
// limiter that keeps its guarantee was never over it nor under its minimum.
func checkTrials(t *testing.T, rep race.Report) {
	t.Helper()
	limit := rep.Config.Limit
	requests := int64(rep.Config.Concurrency * rep.Config.RequestsPerWorker)
	for _, r := range rep.Results {
		info, _ := algorithms.Lookup(r.Limiter)
		if r.Guarantee != string(info.Guarantee) || r.GuaranteeRule == "" || r.Clock == "" {
			t.Errorf("%s judged by %q (%q) on the %q clock, want its own guarantee %q", r.Limiter, r.Guarantee, r.GuaranteeRule, r.Clock, info.Guarantee)
		}
		var over, under, expected, slowest int64
		leaked := 0
		for i, tr := range r.TrialResults {
			// Every decision began after the release and returned before the trial ended.
			if l := tr.LatencyMicros; l.P50 > l.P99 || l.P99 > l.Max || l.Max <= 0 || l.Max > tr.ElapsedMicros {
				t.Errorf("%s trial %d: latency %+v µs in a trial of %d µs", r.Limiter, i+1, l, tr.ElapsedMicros)
			}
			slowest = max(slowest, tr.LatencyMicros.Max)
			if tr.Bound < limit || tr.Expected != min(requests, tr.Bound) || tr.ClockFromMillis > tr.ClockToMillis {
				t.Errorf("%s trial %d: bound %d, expected %d for %d requests, clock %d..%d",
					r.Limiter, i+1, tr.Bound, tr.Expected, requests, tr.ClockFromMillis, tr.ClockToMillis)
			}
			if want := min(requests-tr.Errors-tr.RetriesExhausted, limit); tr.Minimum != want {
				t.Errorf("%s trial %d: minimum %d, want %d", r.Limiter, i+1, tr.Minimum, want)
			}
			if tr.Admitted > tr.Expected {
				over += tr.Admitted - tr.Expected
				leaked++
			}
			under += max(tr.Minimum-tr.Admitted, 0)
			expected += tr.Expected
		}
		// The histogram's max is the slowest trial's, to its precision.
		if m := r.LatencyMicros.Max; m < slowest || m > slowest+slowest/100+1 {
			t.Errorf("%s: latency max %d µs, the slowest trial's %d µs", r.Limiter, m, slowest)
		}
		if r.OverAdmitted != over || r.UnderAdmitted != under || r.LeakedTrials != leaked || r.ExpectedAdmitted != expected {
			t.Errorf("%s: over %d, under %d, leaked %d, expected %d; the trials add up to %d, %d, %d, %d",
				r.Limiter, r.OverAdmitted, r.UnderAdmitted, r.LeakedTrials, r.ExpectedAdmitted, over, under, leaked, expected)
		}
		if slices.Contains(correct(), r.Limiter) && (r.OverAdmitted != 0 || r.WorstTrialAdmitted > r.WorstTrialExpected) {
			t.Errorf("%s over-admitted %d (worst trial %d where %s allowed %d)",
				r.Limiter, r.OverAdmitted, r.WorstTrialAdmitted, r.GuaranteeRule, r.WorstTrialExpected)
		}
		if slices.Contains(correct(), r.Limiter) && r.Limiter != "multi" && r.UnderAdmitted != 0 {
			t.Errorf("%s under-admitted %d", r.Limiter, r.UnderAdmitted)
		}
	}
}

// checkInvariants asserts what must hold on any Redis, whatever the
// scheduling, of a run made with race.WithReadBarrier: the atomic limiters
// never over-admit; the naive one admits every request of every trial,
// each goroutine having read the count before any wrote it; the watch one
// has every EXEC of its first attempts but one aborted; the shared member
// leaks; and the counts agree with the keys and the client's own tally.
func checkInvariants(t *testing.T, rep race.Report) {
	t.Helper()
	checkTrials(t, rep)
	res := byName(rep)
	concurrency := int64(rep.Config.Concurrency)
	if r := res["naive"]; r.LeakedTrials != r.Trials {
		t.Errorf("naive leaked in %d of %d trials, want every one", r.LeakedTrials, r.Trials)
	}
	for i, tr := range res["naive"].TrialResults {
		if tr.Admitted != concurrency {
			t.Errorf("naive trial %d admitted %d of %d requests, all read before any wrote", i+1, tr.Admitted, concurrency)
		}
	}
	for i, tr := range res["watch"].TrialResults {
		if tr.AbortedTransactions < concurrency-1 {
			t.Errorf("watch trial %d: %d aborted transactions, want at least %d", i+1, tr.AbortedTransactions, concurrency-1)
		}
	}
	if r := res["lua-shared-member"]; r.LeakedTrials != r.Trials {
		t.Errorf("lua-shared-member over-admitted in %d of %d trials, want every one", r.LeakedTrials, r.Trials)
	}
	for _, r := range rep.Results {
		if r.Errors != 0 || r.RetriesExhausted != 0 {
			t.Errorf("%s: %d errors, %d retries exhausted", r.Limiter, r.Errors, r.RetriesExhausted)
		}
		if int(r.Requests) != 100*r.Trials || int(r.ExpectedAdmitted) < 5*r.Trials {
			t.Errorf("%s: %d requests, %d expected in %d trials", r.Limiter, r.Requests, r.ExpectedAdmitted, r.Trials)
		}
		if r.Histogram.TotalCount() != r.Requests || r.LatencyMicros.Count != r.Requests {
			t.Errorf("%s: %d latencies recorded (%d in latency_us) for %d requests",
				r.Limiter, r.Histogram.TotalCount(), r.LatencyMicros.Count, r.Requests)
		}
		if l := r.LatencyMicros; l.P50 < 1 || l.P50 > l.P99 || l.P99 > l.Max {
			t.Errorf("%s: latency_us %+v: want 1 µs ≤ p50 ≤ p99 ≤ max", r.Limiter, l)
		}
		for i, tr := range r.TrialResults {
			if tr.RoundTrips != tr.ReportedRoundTrips {
				t.Errorf("%s trial %d: hook counted %d round trips, decisions reported %d",
					r.Limiter, i+1, tr.RoundTrips, tr.ReportedRoundTrips)
			}
		}
		// The key's state matches the admissions, except where the limiter is
		// broken, and where the state is not a count.
		info, _ := algorithms.Lookup(r.Limiter)
		var want any = r.Limiter != "lua-shared-member" && r.Limiter != "lua-count-denied"
		switch {
		case r.Limiter == "multi-limit-sequential":
			// Each limit is read back; the first holds the slots of the
			// requests the second denied.
			want = false
		case r.Limiter == "multi-limit-atomic":
		case info.State == algorithms.StateNone:
			want = nil
		}
		if got := ptr(r.StateVerified); got != want {
			t.Errorf("%s: state_verified = %v, want %v", r.Limiter, got, want)
		}
	}
}

func ptr(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

func TestRaceOnRedisServer(t *testing.T) {
	c := redistest.Client(t, srv)
	cfg := race.WithReadBarrier(config(t, srv.Addr, algorithms.Names()...))
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, rep)
	// Every trial's key was deleted after it was checked.
	if keys := c.Keys(context.Background(), "rl:{"+cfg.Consumer+"*").Val(); len(keys) != 0 {
		t.Errorf("left keys behind: %v", keys)
	}
}

func TestRaceOnEmbeddedRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	emb, err := redisrun.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Stop()
	cfg := config(t, emb.Addr, "naive", "multi", "watch", "lua", "lua-shared-member", "lua-count-denied")
	cfg.Trials = 10
	cfg = race.WithReadBarrier(cfg)
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, rep)
}

// TestRedisClock: the Lua limiter holds with the time read inside Redis.
func TestRedisClock(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	cfg := config(t, srv.Addr, "lua")
	cfg.Clock = algorithms.ClockRedis
	cfg.Trials = 3
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Results[0]; r.Admitted != 15 || r.StateVerified == nil || !*r.StateVerified {
		t.Fatalf("lua with the Redis clock admitted %d of 15 (state verified %v)", r.Admitted, ptr(r.StateVerified))
	}
}

// TestManyRequestsPerWorker: with several decisions per goroutine, both
// log limiters admit exactly the limit of a fresh window.
func TestManyRequestsPerWorker(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	cfg := config(t, srv.Addr, "lua", "multi")
	cfg.Policy = algorithms.Policy{Limit: 50, Window: 10 * time.Second}
	cfg.Concurrency = 50
	cfg.RequestsPerWorker = 4
	cfg.Trials = 10
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkTrials(t, rep)
	res := byName(rep)
	if r := res["lua"]; r.UnderAdmitted != 0 || r.OverAdmitted != 0 {
		t.Errorf("lua: %d under, %d over; want exact", r.UnderAdmitted, r.OverAdmitted)
	}
	if r := res["multi"]; r.UnderAdmitted != 0 || r.OverAdmitted != 0 {
		t.Errorf("multi: %d under, %d over; want exact", r.UnderAdmitted, r.OverAdmitted)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := race.Config{Limiters: []string{"lua"}, Policy: algorithms.Policy{Limit: 5, Window: time.Second},
		Concurrency: 10, RequestsPerWorker: 1, Trials: 1}
	for _, tc := range []struct {
		name string
		edit func(*race.Config)
		want string
	}{
		{"ok", func(*race.Config) {}, ""},
		{"concurrency", func(c *race.Config) { c.Concurrency = 0 }, "Concurrency must be between 1 and 10000 (got 0)"},
		{"limit", func(c *race.Config) { c.Policy.Limit = 0 }, "Limit must be at least 1 (got 0)"},
		{"window", func(c *race.Config) { c.Policy.Window = -time.Second }, "Window must be positive (got -1s)"},
		{"trials", func(c *race.Config) { c.Trials = 0 }, "Trials must be between 1 and 100000 (got 0)"},
		{"requests", func(c *race.Config) { c.RequestsPerWorker = 0 }, "RequestsPerWorker must be between 1 and 100000 (got 0)"},
		{"limiter", func(c *race.Config) { c.Limiters = []string{"nope"} }, `Limiters: unknown limiter "nope"`},
		{"explain", func(c *race.Config) { c.Explain = []string{"lua"} }, ""},
		{"explain not raced", func(c *race.Config) { c.Explain = []string{"naive"} }, "Explain names naive, which is not raced (raced: lua)"},
		{"explain concurrency", func(c *race.Config) { c.Explain, c.Concurrency = []string{"lua"}, 1001 },
			"Explain gives each goroutine a connection of its own: Concurrency must be at most 1000 (got 1001)"},
		{"explain lines", func(c *race.Config) { c.ExplainLines = -1 }, "ExplainLines must be between 1 and 10000, or 0 for the default of 40 (got -1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			err := cfg.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
				t.Fatalf("Validate() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestUnreachableRedis: a closed port fails fast with the address in the error.
func TestUnreachableRedis(t *testing.T) {
	t.Parallel()
	cfg := config(t, "127.0.0.1:1", "lua")
	cfg.Redis.DialTimeout = time.Second
	start := time.Now()
	_, err := race.Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("err = %v, want one naming 127.0.0.1:1", err)
	}
	t.Logf("failed after %s: %v", time.Since(start), err)
}

// TestTrialsOutlastingTheWindow: when a trial spans many windows, the atomic
// limiters may admit a limit in each, and that is not reported as a leak.
// Every command waits a window before it is sent, so that each trial spans
// 25 windows or more however fast the machine, and every decision on the
// caller's clock brings a time a window stale; the Lua log takes it as the
// newest logged time, so it cannot count against a window already pruned.
func TestTrialsOutlastingTheWindow(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	cfg := config(t, srv.Addr, "lua", "watch")
	cfg.Policy = algorithms.Policy{Limit: 5, Window: 5 * time.Millisecond}
	cfg.Concurrency = 4
	cfg.RequestsPerWorker = 25
	cfg.Trials = 3
	cfg = race.WithDelay(cfg, cfg.Policy.Window)
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkTrials(t, rep)
	for _, r := range rep.Results {
		if r.TrialsOutlastingWindow != r.Trials {
			t.Fatalf("%s: %d of %d trials outlasted a 5ms window", r.Limiter, r.TrialsOutlastingWindow, r.Trials)
		}
		if r.OverAdmitted != 0 || r.LeakedTrials != 0 || r.UnderAdmitted != 0 {
			t.Errorf("%s: over %d, leaked %d, under %d; want none counted", r.Limiter, r.OverAdmitted, r.LeakedTrials, r.UnderAdmitted)
		}
		if r.Admitted <= 5*int64(r.Trials) {
			t.Errorf("%s admitted %d in %d trials of many windows; want more than one limit per trial", r.Limiter, r.Admitted, r.Trials)
		}
	}
}

// TestRaceOnCluster: every limiter keeps its invariants on a three-master
// Redis Cluster, with no CROSSSLOT error (errors would fail the run).
func TestRaceOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	cl := redistest.Cluster(t, srv)
	cfg := config(t, cl.Addrs()[0], algorithms.Names()...)
	cfg.Redis = redisOptions(cl.Addrs()...)
	cfg.Redis.IsClusterMode = true
	cfg.Trials = 6
	cfg = race.WithReadBarrier(cfg)
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, rep)
}

// stepClock is a caller clock that moves one millisecond every time it is
// read, from start, and starts again after period reads: a trial of
// period − 2 decisions (the race reads it once before and once after) spans
// as many milliseconds as it makes decisions from the same start, whatever
// the scheduling. Each trial has a fresh key, so the jump back is harmless.
type stepClock struct {
	start  time.Time
	period int64
	reads  atomic.Int64
}

func (c *stepClock) Now() time.Time {
	return c.start.Add(time.Duration((c.reads.Add(1)-1)%c.period) * time.Millisecond)
}

// TestFrozenCallerClock: with every decision at one instant of the caller's
// clock, each algorithm's guarantee allows exactly the limit, and each
// admits exactly that in every trial.
func TestFrozenCallerClock(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	frozen := time.UnixMilli(1_700_000_003_000) // 3 s into an aligned 10 s window
	cfg := config(t, srv.Addr, append([]string{"lua", "multi"}, algorithms.Algorithms()...)...)
	cfg.Now = func() time.Time { return frozen }
	cfg.Trials = 8
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkTrials(t, rep)
	for _, r := range rep.Results {
		for i, tr := range r.TrialResults {
			if tr.OutlastedWindow {
				continue // expiry may have wiped the key: a limit more is allowed
			}
			if tr.Bound != 5 || tr.Admitted != 5 || tr.ClockFromMillis != frozen.UnixMilli() || tr.ClockToMillis != frozen.UnixMilli() {
				t.Errorf("%s trial %d: admitted %d, bound %d, clock %d..%d; want 5, 5 at one instant",
					r.Limiter, i+1, tr.Admitted, tr.Bound, tr.ClockFromMillis, tr.ClockToMillis)
			}
		}
	}
}

// TestTrialStraddlesAnEdge: on a caller clock that starts 50 ms before an
// aligned window edge and moves a millisecond per decision, every trial
// straddles the edge. No algorithm is accused: the fixed window may admit
// a limit on each side, the bucket and GCRA their refill, the counter its
// estimate; and the fixed window does admit more than the limit.
func TestTrialStraddlesAnEdge(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	edge := time.UnixMilli(1_700_000_000_000) // a multiple of 1 s
	for _, name := range append([]string{"lua", "multi"}, algorithms.Algorithms()...) {
		t.Run(name, func(t *testing.T) {
			clock := &stepClock{start: edge.Add(-50 * time.Millisecond), period: 102}
			cfg := config(t, srv.Addr, name)
			cfg.Policy = algorithms.Policy{Limit: 20, Window: time.Second}
			cfg.Now = clock.Now
			cfg.Trials = 5
			rep, err := race.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkTrials(t, rep)
			r := rep.Results[0]
			aboveLimit := 0
			for i, tr := range r.TrialResults {
				if from, to := tr.ClockFromMillis-edge.UnixMilli(), tr.ClockToMillis-edge.UnixMilli(); from != -50 || to != 51 {
					t.Fatalf("trial %d read the clock from %d to %d ms around the edge, want -50 to 51", i+1, from, to)
				}
				if name == "fixed-window" && tr.Bound != 40 && !tr.OutlastedWindow {
					t.Errorf("trial %d across the edge: fixed-window's bound %d, want 40", i+1, tr.Bound)
				}
				if tr.Admitted > 20 {
					aboveLimit++
				}
			}
			if name == "fixed-window" && aboveLimit == 0 {
				t.Errorf("fixed-window never admitted more than its limit across an edge (%d trials)", r.Trials)
			}
			t.Logf("%s: admitted %d of at most %d over %d trials (%s)", name, r.Admitted, r.ExpectedAdmitted, r.Trials, r.GuaranteeRule)
		})
	}
}

// TestNoCorrectLimiterAccused: 200 goroutines at a limit of 100 per second
// on the real clock, as the report that accused GCRA of leaking ran it:
// no limiter that keeps its guarantee is reported as leaking, in any trial.
func TestNoCorrectLimiterAccused(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	cfg := config(t, srv.Addr, append([]string{"lua", "multi", "watch"}, algorithms.Algorithms()...)...)
	cfg.Policy = algorithms.Policy{Limit: 100, Window: time.Second}
	cfg.Concurrency = 200
	cfg.Trials = 8
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkTrials(t, rep)
	for _, r := range rep.Results {
		t.Logf("%-16s admitted %5d of at most %5d, leaked %d of %d, worst %d where %d allowed, exhausted %d",
			r.Limiter, r.Admitted, r.ExpectedAdmitted, r.LeakedTrials, r.Trials, r.WorstTrialAdmitted, r.WorstTrialExpected, r.RetriesExhausted)
		if r.LeakedTrials != 0 {
			t.Errorf("%s reported as leaking in %d trials", r.Limiter, r.LeakedTrials)
		}
	}
}

// TestExhaustedRetriesAreNotUnderAdmission: a watch limiter allowed one
// attempt, whose goroutines all WATCH and read before any EXEC, has every
// request of a burst but one give up; those were never decided by the
// policy, so they count as exhausted retries, and the trial is not short
// of its minimum.
func TestExhaustedRetriesAreNotUnderAdmission(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	cfg := config(t, srv.Addr, "watch")
	cfg.WatchRetries = 1
	cfg.Trials = 5
	rep, err := race.Run(context.Background(), race.WithReadBarrier(cfg))
	if err != nil {
		t.Fatal(err)
	}
	checkTrials(t, rep)
	r := rep.Results[0]
	if r.UnderAdmitted != 0 || r.OverAdmitted != 0 {
		t.Fatalf("watch with one attempt: %d under, %d over; want neither", r.UnderAdmitted, r.OverAdmitted)
	}
	for i, tr := range r.TrialResults {
		if tr.RetriesExhausted != 99 || tr.Admitted != 1 || tr.Minimum != 1 {
			t.Errorf("trial %d: %d exhausted, %d admitted, minimum %d; want 99, 1 and 1", i+1, tr.RetriesExhausted, tr.Admitted, tr.Minimum)
		}
	}
}
