package reports_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/reports"
)

func i64(v int64) *int64     { return &v }
func f64(v float64) *float64 { return &v }

// lat is a latency summary of count values.
func lat(p50, p90, p95, p99, p999, max, count int64) *hdr.Percentiles {
	return &hdr.Percentiles{P50: p50, P90: p90, P95: p95, P99: p99, P999: p999, Max: max, Count: count}
}

// fixedCompare is a comparison with fixed numbers, as a run would return it:
// they keep what compare's own tests hold of every run (no algorithm locked
// out by the hammer, the fixed window over its limit across an edge, the
// sliding log exact and growing with the limit, the counter's memory flat).
func fixedCompare() compare.Report {
	mem := func(a, b, c, d int64) map[string]int64 {
		return map[string]int64{"10": a, "100": b, "1000": c, "10000": d}
	}
	return compare.Report{
		Command: "compare",
		Redis:   redisrun.Info{Mode: "ephemeral", Version: "7.0.15", Addr: "127.0.0.1:6390"},
		Config: compare.Settings{Algorithms: []string{"fixed-window", "sliding-log", "sliding-counter"},
			Workloads: compare.Workloads(), Limit: 100, WindowMillis: 1000, BurstConcurrency: 200, BurstTrials: 5,
			AccuracyClients: 50, AccuracyWindows: 10, Seed: 1, Connections: 50, Keys: 10000, DurationMillis: 3000},
		PingOpsPerSec:     f64(50921),
		PingLatencyMicros: lat(957, 1800, 2140, 2600, 4870, 9120, 152_763),
		ElapsedMillis:     29670,
		Results: []compare.Result{
			{Algorithm: "fixed-window", KeysPerClient: 1, RoundTrips: f64(1), RedisCommands: f64(2.3),
				BurstOverAdmitted: i64(0), BurstUnderAdmitted: i64(0), BoundaryMaxInWindow: i64(200), HammerMaxInWindow: i64(200),
				HammerRecoveryMillis: i64(500), FalseAllowRate: f64(0.2771), FalseDenyRate: f64(0), AccuracyDecisions: 50000,
				BytesPerClient: mem(120, 136, 136, 136), OpsPerSec: f64(32275), LatencyMicros: lat(1500, 2880, 3400, 4170, 7300, 12_600, 96_825),
				Recommendation: "fixed-window: cheapest, but bursts at window edges"},
			{Algorithm: "sliding-log", Exact: true, KeysPerClient: 1, RoundTrips: f64(1), RedisCommands: f64(4),
				BurstOverAdmitted: i64(0), BurstUnderAdmitted: i64(0), BoundaryMaxInWindow: i64(100), HammerMaxInWindow: i64(100),
				HammerRecoveryMillis: i64(100), FalseAllowRate: f64(0), FalseDenyRate: f64(0), AccuracyDecisions: 50000,
				BytesPerClient: mem(408, 3672, 118600, 1291300), OpsPerSec: f64(30286), LatencyMicros: lat(1520, 2790, 3300, 3990, 6900, 11_800, 90_858),
				Recommendation: "sliding-log: for low limits: memory grows with the limit; exact"},
			{Algorithm: "sliding-counter", KeysPerClient: 2, RoundTrips: f64(1), RedisCommands: f64(4),
				BurstOverAdmitted: i64(0), BurstUnderAdmitted: i64(0), BoundaryMaxInWindow: i64(100), HammerMaxInWindow: i64(149),
				HammerRecoveryMillis: i64(100), FalseAllowRate: f64(0.0939), FalseDenyRate: f64(0.0485), AccuracyDecisions: 50000,
				BytesPerClient: mem(136, 136, 136, 136), OpsPerSec: f64(30687), LatencyMicros: lat(1390, 2700, 3500, 4760, 8100, 14_300, 92_061),
				Recommendation: "sliding-counter: the right default"},
		},
	}
}

func TestCompareGolden(t *testing.T) {
	goldens(t, "compare", func(w io.Writer, f reports.Format) error {
		return reports.Compare(w, fixedCompare(), f, reports.Options{})
	})
}

// TestCompareFixtureHoldsTheInvariants checks the fixture against what
// TestCompare asserts of every real run.
func TestCompareFixtureHoldsTheInvariants(t *testing.T) {
	rep := fixedCompare()
	limit := rep.Config.Limit
	for _, r := range rep.Results {
		if r.HammerLockedOut || r.HammerRecoveryMillis == nil || r.HammerMaxInWindow == nil {
			t.Errorf("%s: locked out %v, recovery %v: no algorithm is locked out by the hammer", r.Algorithm, r.HammerLockedOut, r.HammerRecoveryMillis)
		}
		if r.BytesPerClient == nil {
			t.Errorf("%s: no memory measured on a redis-server", r.Algorithm)
		}
		bound := *r.BoundaryMaxInWindow
		if (r.Algorithm == "fixed-window") != (bound > limit) {
			t.Errorf("%s: %d in one window across the edge", r.Algorithm, bound)
		}
		if r.Exact && (*r.FalseAllowRate != 0 || *r.FalseDenyRate != 0 || *r.HammerMaxInWindow > limit) {
			t.Errorf("%s is exact, yet false allow %v, deny %v, hammer %d", r.Algorithm, *r.FalseAllowRate, *r.FalseDenyRate, *r.HammerMaxInWindow)
		}
		// Decisions per second over the run's duration are the decisions timed.
		checkPercentiles(t, r.Algorithm+" latency", *r.LatencyMicros, int64(*r.OpsPerSec)*rep.Config.DurationMillis/1000)
	}
	checkPercentiles(t, "ping latency", *rep.PingLatencyMicros, int64(*rep.PingOpsPerSec)*rep.Config.DurationMillis/1000)
}

// TestCompareLockOut: a limiter the hammer locks out reads "never".
func TestCompareLockOut(t *testing.T) {
	rep := fixedCompare()
	rep.Config.Limit = 5
	rep.Config.Algorithms = []string{"lua-count-denied"}
	rep.Results = []compare.Result{{Algorithm: "lua-count-denied", KeysPerClient: 1, BurstOverAdmitted: i64(0),
		HammerMaxInWindow: i64(5), HammerLockedOut: true, Recommendation: "lua-count-denied: locks out a client that retries"}}
	var buf bytes.Buffer
	if err := reports.Compare(&buf, rep, reports.Markdown, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("| never |")) {
		t.Fatalf("a lock-out does not read never:\n%s", buf.Bytes())
	}
}
