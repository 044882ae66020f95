package compare_test

import (
	"strings"
	"testing"

	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/internal/hdr"
)

func p64(v int64) *int64    { return &v }
func pf(v float64) *float64 { return &v }

// TestRecommendations: each line is written from its own figures, and
// says nothing of a workload that did not run.
func TestRecommendations(t *testing.T) {
	held := func() compare.Result {
		return compare.Result{Algorithm: "a", KeysPerClient: 1, BurstOverAdmitted: p64(0), BurstUnderAdmitted: p64(0),
			BoundaryMaxInWindow: p64(10), HammerMaxInWindow: p64(10), HammerRecoveryMillis: p64(100),
			FalseAllowRate: pf(0), FalseDenyRate: pf(0), BytesPerClient: map[string]int64{"10": 120, "10000": 136},
			RoundTrips: pf(1), RedisCommands: pf(3), OpsPerSec: pf(1000), LatencyMicros: &hdr.Percentiles{P99: 2500}}
	}
	for _, tc := range []struct {
		name      string
		change    func(*compare.Result)
		want, not []string
	}{
		{"held", func(*compare.Result) {},
			[]string{"a: where the limit must hold: held the limit in every workload run, and exact: no decision wrongly allowed or limited", "1 key a client, 120 B to 136 B",
				"3.0 Redis commands in 1 round trip a decision", "1000 decisions/s, p99 2.5ms"}, []string{"fastest", "limits are low"}},
		{"raced", func(r *compare.Result) { r.BurstOverAdmitted = p64(7) },
			[]string{"a: avoid: requests that race at one key get past it: 7 beyond the limit"}, []string{"must hold", "exact"}},
		{"locked out", func(r *compare.Result) { r.HammerLockedOut, r.HammerRecoveryMillis = true, nil },
			[]string{"a: avoid: it locks out a client that keeps retrying: a client hammered, then retrying, was not let back in within 10 windows"}, []string{"must hold"}},
		{"over at an edge", func(r *compare.Result) { r.BoundaryMaxInWindow = p64(20) },
			[]string{"where up to 2× the limit in one window's span is acceptable: 20 of 10 in one window across a window edge"},
			[]string{"must hold", "exact", "held"}},
		{"an estimate", func(r *compare.Result) { r.FalseAllowRate = pf(0.0001) },
			[]string{"where an estimate of the limit is acceptable: 0.010% of decisions wrongly allowed"}, []string{"must hold", "exact"}},
		{"wrongly limited", func(r *compare.Result) { r.FalseDenyRate = pf(0.02) },
			[]string{"where the limit must hold and some wrongful denials are acceptable: held the limit in every workload run; 2.00% wrongly limited"},
			[]string{"exact"}},
		{"memory grows", func(r *compare.Result) {
			r.BytesPerClient = map[string]int64{"10": 400, "100": 3600, "10000": 1_300_000}
		},
			[]string{"where the limit must hold and limits are low", "its memory grows with the limit: 400 B at limit 10, 1.2 MiB at 10000"}, nil},
		{"throughput alone", func(r *compare.Result) {
			r.BurstOverAdmitted, r.BurstUnderAdmitted, r.BoundaryMaxInWindow, r.HammerMaxInWindow = nil, nil, nil, nil
			r.HammerRecoveryMillis, r.FalseAllowRate, r.FalseDenyRate, r.BytesPerClient = nil, nil, nil, nil
		}, []string{"a: accuracy not measured in this run: 1 key a client; 3.0 Redis commands"}, []string{"held", "must hold", "B "}},
	} {
		r := held()
		tc.change(&r)
		line := compare.Report{Config: compare.Settings{Limit: 10}, Results: []compare.Result{r}}.Recommendations()[0]
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: %q does not say %q", tc.name, line, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(line, n) {
				t.Errorf("%s: %q says %q", tc.name, line, n)
			}
		}
	}
}

// TestRecommendationsAmongOthers: throughput is said beside the fastest of
// the run.
func TestRecommendationsAmongOthers(t *testing.T) {
	rep := compare.Report{Config: compare.Settings{Limit: 10}, Results: []compare.Result{
		{Algorithm: "a", KeysPerClient: 1, OpsPerSec: pf(1000), LatencyMicros: &hdr.Percentiles{P99: 12_591}},
		{Algorithm: "b", KeysPerClient: 2, OpsPerSec: pf(750), LatencyMicros: &hdr.Percentiles{P99: 840}}}}
	lines := rep.Recommendations()
	if !strings.Contains(lines[0], "1000 decisions/s, the fastest here, p99 12.59ms") ||
		!strings.Contains(lines[1], "750 decisions/s, 25% below the fastest, p99 840µs") {
		t.Errorf("lines %q", lines)
	}
}

func TestBytes(t *testing.T) {
	for b, want := range map[int64]string{0: "0 B", 136: "136 B", 1023: "1023 B", 1024: "1 KiB", 3672: "3.6 KiB", 118_600: "116 KiB",
		1_291_300: "1.2 MiB", 136_000_000: "130 MiB", 1_291_300_000_000: "1.2 TiB"} {
		if got := compare.Bytes(b); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", b, got, want)
		}
	}
}
