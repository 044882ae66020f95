package reports_test

import (
	"bytes"
	"io"
	"strings"
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
	rep := compare.Report{
		Command: "compare",
		Redis:   redisrun.Info{Mode: "ephemeral", Version: "7.0.15", Addr: "127.0.0.1:6390"},
		Config: compare.Settings{Algorithms: []string{"fixed-window", "sliding-log", "sliding-counter"},
			Workloads: compare.Workloads(), Limit: 100, WindowMillis: 1000, BurstConcurrency: 200, BurstTrials: 5,
			AccuracyClients: 50, AccuracyWindows: 10, Seed: 1, Connections: 50, Keys: 10000, DurationMillis: 3000, Batch: 1},
		PingOpsPerSec:     f64(50921),
		PingLatencyMicros: lat(957, 1800, 2140, 2600, 4870, 9120, 152_763),
		ElapsedMillis:     29670,
		Results: []compare.Result{
			{Algorithm: "fixed-window", KeysPerClient: 1, RoundTrips: f64(1), RedisCommands: f64(2.3),
				BurstOverAdmitted: i64(0), BurstUnderAdmitted: i64(0), BoundaryMaxInWindow: i64(200), HammerMaxInWindow: i64(200),
				HammerRecoveryMillis: i64(500), FalseAllowRate: f64(0.2771), FalseDenyRate: f64(0), AccuracyDecisions: 50000,
				BytesPerClient: mem(120, 136, 136, 136), OpsPerSec: f64(32275), LatencyMicros: lat(1500, 2880, 3400, 4170, 7300, 12_600, 96_825)},
			{Algorithm: "sliding-log", Exact: true, KeysPerClient: 1, RoundTrips: f64(1), RedisCommands: f64(4),
				BurstOverAdmitted: i64(0), BurstUnderAdmitted: i64(0), BoundaryMaxInWindow: i64(100), HammerMaxInWindow: i64(100),
				HammerRecoveryMillis: i64(100), FalseAllowRate: f64(0), FalseDenyRate: f64(0), AccuracyDecisions: 50000,
				BytesPerClient: mem(408, 3672, 118600, 1291300), OpsPerSec: f64(30286), LatencyMicros: lat(1520, 2790, 3300, 3990, 6900, 11_800, 90_858)},
			{Algorithm: "sliding-counter", KeysPerClient: 2, RoundTrips: f64(1), RedisCommands: f64(4),
				BurstOverAdmitted: i64(0), BurstUnderAdmitted: i64(0), BoundaryMaxInWindow: i64(100), HammerMaxInWindow: i64(149),
				HammerRecoveryMillis: i64(100), FalseAllowRate: f64(0.0939), FalseDenyRate: f64(0.0485), AccuracyDecisions: 50000,
				BytesPerClient: mem(136, 136, 136, 136), OpsPerSec: f64(30687), LatencyMicros: lat(1390, 2700, 3500, 4760, 8100, 14_300, 92_061)},
		},
	}
	for i, line := range rep.Recommendations() {
		rep.Results[i].Recommendation = line // as compare.Run writes them
	}
	return rep
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
		HammerMaxInWindow: i64(5), HammerLockedOut: true}}
	var buf bytes.Buffer
	if err := reports.Compare(&buf, rep, reports.Markdown, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("| never |")) {
		t.Fatalf("a lock-out does not read never:\n%s", buf.Bytes())
	}
}

// recommendation is the line the markdown report writes for algorithm.
func recommendation(t *testing.T, rep compare.Report, algorithm string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := reports.Compare(&buf, rep, reports.Markdown, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "- "+algorithm+": "); ok {
			return rest
		}
	}
	t.Fatalf("no recommendation for %s:\n%s", algorithm, buf.String())
	return ""
}

// praise is what a line may say only of an algorithm that held the limit
// in every workload run.
var praise = []string{"default", "exact", "must hold", "recommended", "best"}

// TestCompareRecommendationsFollowTheNumbers: each recommendation is
// written from its row: an algorithm the row shows over the limit is
// never praised, and the line changes when the numbers do.
func TestCompareRecommendationsFollowTheNumbers(t *testing.T) {
	rep := fixedCompare()
	counter := recommendation(t, rep, "sliding-counter")
	for _, want := range []string{"149 of 100", "9.39%"} {
		if !strings.Contains(counter, want) {
			t.Errorf("sliding-counter, hammered to 149 of 100: %q does not say %q", counter, want)
		}
	}
	for _, r := range rep.Results {
		over := *r.BoundaryMaxInWindow > rep.Config.Limit || *r.HammerMaxInWindow > rep.Config.Limit || *r.FalseAllowRate > 0
		line := recommendation(t, rep, r.Algorithm)
		for _, p := range praise {
			if over && strings.Contains(line, p) {
				t.Errorf("%s over-admits in its row, yet its line says %q: %s", r.Algorithm, p, line)
			}
		}
	}

	held := fixedCompare()
	c := &held.Results[2]
	c.HammerMaxInWindow, c.FalseAllowRate, c.FalseDenyRate = i64(100), f64(0), f64(0)
	if line := recommendation(t, held, "sliding-counter"); line == counter || !strings.Contains(line, "held the limit") {
		t.Errorf("sliding-counter holding the limit everywhere reads %q (was %q)", line, counter)
	}

	faster := fixedCompare()
	faster.Results[2].OpsPerSec = f64(40000)
	if line := recommendation(t, faster, "sliding-counter"); line == counter || !strings.Contains(line, "the fastest") {
		t.Errorf("sliding-counter, the fastest here, reads %q (was %q)", line, counter)
	}

	grows := fixedCompare()
	grows.Results[2].BytesPerClient = map[string]int64{"10": 200, "100": 2000, "1000": 20000, "10000": 200000}
	if line := recommendation(t, grows, "sliding-counter"); line == counter || !strings.Contains(line, "grows with the limit") {
		t.Errorf("sliding-counter, its memory growing, reads %q (was %q)", line, counter)
	}
}

// TestCompareDropsWorkloadsNotRun: a comparison of some workloads shows
// their columns and notes alone, with no column of dashes.
func TestCompareDropsWorkloadsNotRun(t *testing.T) {
	rep := fixedCompare()
	rep.Config.Workloads = []string{compare.Hammer, compare.Throughput}
	for i := range rep.Results {
		r := &rep.Results[i]
		r.BurstOverAdmitted, r.BurstUnderAdmitted, r.BoundaryMaxInWindow = nil, nil, nil
		r.FalseAllowRate, r.FalseDenyRate, r.AccuracyDecisions, r.BytesPerClient = nil, nil, 0, nil
	}
	var buf bytes.Buffer
	if err := reports.Compare(&buf, rep, reports.Markdown, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	header := "| algorithm | exact | keys | trips | cmds | hammer max | recovery | ops/s | p50 | p99 |"
	if !strings.Contains(out, header+"\n") {
		t.Errorf("the table's header is not %s:\n%s", header, out)
	}
	for _, gone := range []string{"–", "burst over:", "false allow/deny:", "Memory per client", "bytes"} {
		if strings.Contains(out, gone) {
			t.Errorf("the report of hammer and throughput says %q:\n%s", gone, out)
		}
	}
	buf.Reset()
	if err := reports.Compare(&buf, rep, reports.Table, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		if w := len([]rune(line)); strings.HasPrefix(line, "│") && w > 100 {
			t.Errorf("a table row %d columns wide: %s", w, line)
		}
	}
}

// TestCompareBatchedBeside: a throughput workload also run batched shows
// batched ops/s and trips beside the unbatched ones, in the table, the
// markdown and the JSON, and a note says what they are; unbatched, neither
// column is there.
func TestCompareBatchedBeside(t *testing.T) {
	rep := fixedCompare()
	rep.Config.Workloads, rep.Config.Batch = []string{compare.Throughput}, 16
	for i := range rep.Results {
		r := &rep.Results[i]
		r.BurstOverAdmitted, r.BurstUnderAdmitted, r.BoundaryMaxInWindow, r.HammerMaxInWindow, r.HammerRecoveryMillis = nil, nil, nil, nil, nil
		r.FalseAllowRate, r.FalseDenyRate, r.AccuracyDecisions, r.BytesPerClient = nil, nil, 0, nil
		r.BatchedOpsPerSec, r.BatchedRoundTrips = f64(float64(61000+i)), f64(0.07)
		r.BatchedLatencyMicros = lat(700, 1100, 1300, 1800, 3000, 5000, 183_000)
	}
	render := func(f reports.Format) string {
		t.Helper()
		var buf bytes.Buffer
		if err := reports.Compare(&buf, rep, f, reports.Options{}); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	md := render(reports.Markdown)
	header := "| algorithm | exact | keys | trips | cmds | ops/s | p50 | p99 | batched ops/s | batched trips |"
	if !strings.Contains(md, header+"\n") || !strings.Contains(md, "| 30286 | ") || !strings.Contains(md, "| 61001 | 0.07 |") ||
		!strings.Contains(md, "at most 16 EVALSHAs") {
		t.Errorf("the markdown does not show batched beside unbatched (header %s):\n%s", header, md)
	}
	if table := render(reports.Table); !strings.Contains(table, "batched ops/s") || !strings.Contains(table, "61001") {
		t.Errorf("the table does not show the batched throughput:\n%s", table)
	}
	if js := render(reports.JSON); !strings.Contains(js, `"batched_ops_per_sec": 61001`) || !strings.Contains(js, `"redis_batch": 16`) {
		t.Errorf("the JSON does not hold the batched throughput:\n%s", js)
	}
	rep.Config.Batch = 1
	if md := render(reports.Markdown); strings.Contains(md, "batched") {
		t.Errorf("unbatched, the markdown speaks of batches:\n%s", md)
	}
}
