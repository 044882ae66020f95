package reports_test

import (
	"io"
	"testing"

	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/reports"
	"github.com/ratelab/ratelab/skew"
)

// fixedSkew is a skew report with fixed numbers, as a run would return it:
// the same stream in every row, nothing over-admitted at zero skew or on
// Redis's clock.
func fixedSkew() skew.Report {
	row := func(alg, clock string, skewMs int64, offsets []int64, admitted, over, denied int64, worst string, worstOver, worstDenied int64) skew.Row {
		rule := map[string]string{"sliding-log": "at most 5 in any 2s span", "gcra": "a burst of 5, then 5 per 2s"}[alg]
		return skew.Row{Algorithm: alg, Clock: clock, MaxSkewMillis: skewMs, Decisions: 1184, Admitted: admitted,
			OverAdmitted: over, FalseDenied: denied, OffsetsMillis: offsets, Guarantee: rule,
			WorstClient: worst, WorstClientOverAdmitted: worstOver, WorstClientFalseDenied: worstDenied}
	}
	zero, full := []int64{0, 0, 0, 0}, []int64{0, 50, -200, 1000}
	return skew.Report{
		Command: "skew",
		Redis:   redisrun.Info{Mode: "ephemeral", Version: "7.0.15", Addr: "127.0.0.1:6390"},
		Config: skew.Settings{Algorithms: []string{"sliding-log", "gcra"}, Clocks: []string{"caller", "redis"},
			SkewsMillis: full, Limit: 5, WindowMillis: 2000, Clients: 40, DurationMilli: 10000, Load: 1.2, Seed: 1,
			Connections: 64, TimeoutMillis: 1000},
		RedisClockOffsetMicros: skew.Offset{Lo: -24, Hi: 23},
		SendLagMicros: hdr.Percentiles{P50: 403, P90: 820, P95: 1010, P99: 1380, P999: 4100, Max: 11500,
			Count: 8 * 1184}, // every row's decisions
		Rows: []skew.Row{
			row("sliding-log", "caller", 0, zero, 777, 0, 0, "", 0, 0),
			row("sliding-log", "caller", 1200, full, 729, 65, 184, "client-36", 3, 10),
			row("sliding-log", "redis", 0, zero, 778, 0, 0, "", 0, 0),
			row("sliding-log", "redis", 1200, full, 778, 0, 0, "", 0, 0),
			row("gcra", "caller", 0, zero, 1011, 0, 0, "", 0, 0),
			row("gcra", "caller", 1200, full, 935, 4, 33, "client-29", 2, 3),
			row("gcra", "redis", 0, zero, 1011, 0, 0, "", 0, 0),
			row("gcra", "redis", 1200, full, 1011, 0, 0, "", 0, 0),
		},
		ElapsedMillis: 12210,
	}
}

// TestSkewFixtureAddsUp: the send lag counts every request of the stream.
func TestSkewFixtureAddsUp(t *testing.T) {
	rep := fixedSkew()
	var requests int64
	for _, r := range rep.Rows {
		requests += r.Decisions
	}
	checkPercentiles(t, "send lag", rep.SendLagMicros, requests)
}

func TestSkewGolden(t *testing.T) {
	goldens(t, "skew", func(w io.Writer, f reports.Format) error { return reports.Skew(w, fixedSkew(), f, reports.Options{}) })
}

func TestSkewVerdict(t *testing.T) {
	rep := fixedSkew()
	want := "on the nodes' own clocks 0 and 69 over-admitted at 0 and 1200 ms of skew; " +
		"on Redis's clock nothing was over-admitted, in all 4 rows"
	if got := reports.SkewVerdict(rep); got != want {
		t.Fatalf("verdict:\n got %q\nwant %q", got, want)
	}
	rep.Rows[3].OverAdmitted = 2
	if got, want := reports.SkewVerdict(rep), "on the nodes' own clocks 0 and 69 over-admitted at 0 and 1200 ms of skew; "+
		"on Redis's clock 0 and 2 over-admitted at 0 and 1200 ms of skew"; got != want {
		t.Fatalf("verdict:\n got %q\nwant %q", got, want)
	}
}
