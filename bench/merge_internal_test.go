package bench

import (
	"encoding/json"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// A result file may say what no run measures: such a run is refused with
// an error naming it, never merged into negative counts, a panic or an
// allocation without bound.
func TestMergeRefusesWhatNoRunMeasures(t *testing.T) {
	base := asShard(fuzzRun(1767225600000, 200, 429, 200), 1, 2)
	for _, tc := range []struct {
		mutate func(*Result)
		want   string
	}{
		{func(r *Result) { r.Bytes = -1 }, "a count below zero"},
		{func(r *Result) { r.StatusCounts["200"] = -5 }, "a count below zero"},
		{func(r *Result) { r.Timeline.Intervals[0].Status["2xx"] = -7 }, "a count below zero"},
		{func(r *Result) { r.Config.Consumers = 1 << 50 }, "consumers"},
		{func(r *Result) { r.StartedUnixMillis = math.MaxInt64 }, "merge runs of one test"},
		{func(r *Result) { r.StartedUnixMillis += 25 * 3_600_000 }, "merge runs of one test"},
		{func(r *Result) { r.Audit.Limits[0].Limit, r.Audit.Limits[0].WindowMillis = 0, 0 }, "not a limit a run can expect"},
		{func(r *Result) { r.InFlightAudit = &audit.InFlightAudit{Verdict: audit.Held, Limit: 5} }, "report merge does not merge it"},
	} {
		var r Result
		if err := json.Unmarshal(base, &r); err != nil {
			t.Fatal(err)
		}
		var first Result
		_ = json.Unmarshal(base, &first)
		first.Config.Shard = 0
		tc.mutate(&r)
		if _, err := Merge([]Result{first, r}, 5*time.Millisecond); err == nil || !strings.Contains(err.Error(), "run 2: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("merged with %v: want run 2 and %q", err, tc.want)
		}
	}
}

// Runs that began hours apart (within the day a merge allows) are not drawn
// as one timeline of idle intervals between them: each interval costs a
// histogram (26 KB), and a timeline of 7,200 would cost 190 MB.
func TestMergeFarApartRunsLeaveTheTimelineOut(t *testing.T) {
	var a, b Result
	_ = json.Unmarshal(asShard(fuzzRun(1767225600000, 200, 429), 0, 2), &a)
	_ = json.Unmarshal(asShard(fuzzRun(1767225600000+2*3_600_000, 200, 200), 1, 2), &b)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m, err := Merge([]Result{a, b}, 5*time.Millisecond)
	runtime.ReadMemStats(&after)
	if err != nil || m.Requests != 4 || len(m.Timeline.Intervals) != 0 {
		t.Fatalf("merged %d requests, %d intervals, %v: want 4 and no timeline", m.Requests, len(m.Timeline.Intervals), err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("allocated %d MB", grew>>20)
	}
}
