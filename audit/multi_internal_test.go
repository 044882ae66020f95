package audit

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// Every policy of a response is read and held to the limit it names: by
// name, or by quota and window; a response whose policies are none of its
// limits' holds its first to the tightest (the lowest rate); legacy
// fields go to the limit their quota is, else the tightest.
func TestProject(t *testing.T) {
	exps := []Expectation{
		{policy: policyOf(5, time.Second), quota: 5, cost: 1, names: []string{"per-second"}},
		{policy: policyOf(12, 10*time.Second), quota: 12, cost: 1, names: []string{"per-10s"}},
	}
	names := map[string]int16{"per-second": 0, "per-10s": 1}
	for _, tc := range []struct {
		name  string
		f     Fields
		names map[string]int16
		want  [2][2]int64 // per limit: limit, remaining
	}{
		{"by name", Fields{policy: `"per-second";q=5;w=1, "per-10s";q=12;w=10`, rateLimit: `"per-10s";r=7;t=4, "per-second";r=2;t=1`},
			names, [2][2]int64{{5, 2}, {12, 7}}},
		{"by quota and window", Fields{policy: `"a";q=12;w=10, "b";q=5;w=1`, rateLimit: `"b";r=1;t=1, "a";r=3;t=9`},
			nil, [2][2]int64{{5, 1}, {12, 3}}},
		{"one of them", Fields{policy: `"b";q=5;w=1`, rateLimit: `"b";r=1;t=1`}, nil, [2][2]int64{{5, 1}, {-1, -1}}},
		{"none of them", Fields{policy: `"x";q=7;w=1`, rateLimit: `"x";r=6;t=1`}, nil, [2][2]int64{{-1, -1}, {7, 6}}}, // 12 per 10 s is the lower rate
		{"legacy", Fields{limit: "12", remaining: "4"}, nil, [2][2]int64{{-1, -1}, {12, 4}}},
		{"legacy of no limit", Fields{xLimit: "100", xRemaining: "99"}, nil, [2][2]int64{{-1, -1}, {100, 99}}},
		{"the tightest alone", Fields{policy: `"per-second";q=5;w=1, "per-10s";q=12;w=10`, rateLimit: `"per-10s";r=0;t=7`, limit: "12", remaining: "0"},
			names, [2][2]int64{{5, -1}, {12, 0}}},
	} {
		advs := parseAdverts(nil, &tc.f, tc.names)
		if tc.name == "legacy" {
			// Two limits of one quota: the legacy fields could be either's.
			same := []Expectation{exps[1], exps[1]}
			same[0].policy.Window = 60 * time.Second
			s := Sample{Status: 200, advN: uint8(len(advs)), limit: -1, remaining: -1, Reset: -1}
			project(&s, advs, 0, 3, 3, same)
			if s.limit != -1 || s.remaining != -1 {
				t.Errorf("legacy fields of two limits of one quota held to the first: %d, %d", s.limit, s.remaining)
			}
		}
		if tc.name == "by quota and window" {
			// Held to 12 per 10 s alone, the response's other policy is
			// one the audit was not told of: not a wrong one.
			s := Sample{Status: 200, advN: uint8(len(advs)), limit: -1, remaining: -1, Reset: -1}
			project(&s, advs, 0, 1, 1, exps[1:])
			if s.limit != 12 || s.remaining != 3 {
				t.Errorf("12/10s alone: read as %d, %d", s.limit, s.remaining)
			}
		}
		for k := range exps {
			s := Sample{Status: 200, advN: uint8(len(advs)), limit: -1, remaining: -1, Reset: -1}
			project(&s, advs, k, 3, 3, exps)
			if got := [2]int64{s.limit, s.remaining}; got != tc.want[k] {
				t.Errorf("%s: limit %d read as %v, want %v (adverts %+v)", tc.name, k, got, tc.want[k], advs)
			}
		}
	}
}

func policyOf(limit int64, window time.Duration) algorithms.Policy {
	return algorithms.Policy{Limit: limit, Window: window}
}

// A denial is the limit's own when its window alone was full; it is
// under-admission only when every limit its request met would surely have
// admitted it; shadow limits are reported and never judged, and never
// make the run's verdict.
func TestDenialsAttributedConservatively(t *testing.T) {
	search := Expectation{policy: policyOf(2, time.Second), guarantee: algorithms.SlidingWindow, quota: 2, cost: 1, ID: "search"}
	all := Expectation{policy: policyOf(5, time.Second), guarantee: algorithms.SlidingWindow, quota: 5, cost: 1, ID: "all"}
	shadow := Expectation{policy: policyOf(1, time.Second), guarantee: algorithms.SlidingWindow, quota: 1, cost: 1, ID: "trial", shadow: true}
	at := func(ms int, status int16) Sample {
		d := time.Duration(ms) * time.Millisecond
		return Sample{Status: status, Sent: d, Done: d + time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1}
	}
	// To /search: two admitted, then a denial (search was full; all was
	// not). To /items: a denial when nothing had been admitted for a
	// second (neither was full: all denied it wrongly).
	samples := []Sample{at(1500, 200), at(1600, 200), at(1700, 429), at(3500, 429)}
	onSearch := limitCounters{idx: []int32{0, 1, 2}, counter: []int32{0, 0, 0}, names: []string{"consumer-0"}}
	every := limitCounters{idx: []int32{0, 1, 2, 3}, counter: []int32{0, 0, 0, 0}, names: []string{"consumer-0"}}
	m := Meeting{met: []uint64{0b111, 0b111, 0b111, 0b110}, of: []limitCounters{onSearch, every, every}}
	a := auditLimits(samples, nil, []Expectation{search, all, shadow}, m, Coverage{horizon: -1})
	s, e, sh := a.Limits[0], a.Limits[1], a.Limits[2]
	if s.DenialsJudged != 1 || s.UnderAdmitted != 0 || s.DenialsAttributed != 1 {
		t.Errorf("search: %d judged, %d under, %d its own: want 1, 0 and 1", s.DenialsJudged, s.UnderAdmitted, s.DenialsAttributed)
	}
	if e.DenialsJudged != 2 || e.UnderAdmitted != 1 || e.DenialsElsewhere != 1 || e.DenialsAttributed != 0 {
		t.Errorf("all: %d judged, %d under, %d elsewhere, %d its own: want 2, 1, 1 and 0", e.DenialsJudged, e.UnderAdmitted,
			e.DenialsElsewhere, e.DenialsAttributed)
	}
	// all never denied a request of its own: it was never tested.
	if sh.Verdict != NotJudged || sh.Admitted != 2 || sh.Requests != 4 || s.Verdict != Held || e.Verdict != NotReached ||
		a.Verdict != NotReached || !slices.Equal(a.Reasons, []string{"all: 2 of 5 in 1s: not tested"}) {
		t.Errorf("verdicts %s, %s, %s (shadow: %d of %d admitted), run %s %q", s.Verdict, e.Verdict, sh.Verdict, sh.Admitted, sh.Requests,
			a.Verdict, a.Reasons)
	}
}
