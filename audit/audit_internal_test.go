package audit

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// randomSamples makes n responses of one consumer with flights that
// overlap, remaining counts that wander, and some resets.
func randomSamples(r *rand.Rand, n int) []Sample {
	ss := make([]Sample, n)
	var at time.Duration
	for i := range ss {
		at += time.Duration(r.IntN(20)) * time.Millisecond
		flight := time.Duration(r.IntN(30)+1) * time.Millisecond
		status := int16(200)
		if r.IntN(4) == 0 {
			status = 429
		}
		remaining := int64(r.IntN(5)) - 1 // -1: a response that gave none for this limit
		ss[i] = Sample{Sent: at, Done: at + flight, Status: status, remaining: remaining, Reset: time.Duration(r.IntN(3)) * time.Second,
			RetryAfter: -1, limit: -1}
	}
	return ss
}

// slowWorstWindow and slowRemainingChecks are the rules as first written:
// plain, and quadratic.
func slowWorstWindow(ok []Sample, span time.Duration) int64 {
	slices.SortFunc(ok, func(a, b Sample) int { return cmpDur(a.Sent, b.Sent) })
	var worst int64
	for i := range ok {
		var n int64
		end := ok[i].Sent + span
		for j := i; j < len(ok) && ok[j].Sent < end; j++ {
			if ok[j].Done < end {
				n++
			}
		}
		worst = max(worst, n)
	}
	return worst
}

func slowRemainingChecks(ok []Sample, window, horizon time.Duration) int64 {
	var ss []Sample
	for _, s := range ok {
		if s.remaining >= 0 {
			ss = append(ss, s)
		}
	}
	slices.SortFunc(ss, func(a, b Sample) int { return cmpDur(a.Sent, b.Sent) })
	var violations int64
	for i := 0; i+1 < len(ss); i++ {
		x := ss[i]
		j := i + 1
		for j < len(ss) && ss[j].Sent < x.Done {
			j++
		}
		if j == len(ss) {
			continue
		}
		y := ss[j]
		if horizon >= 0 && y.Done >= horizon {
			continue
		}
		between := int64(-2)   // x and y themselves
		for _, s := range ok { // every success consumed, with a remaining or not
			if s.Done > x.Sent && s.Sent < y.Done {
				between++
			}
		}
		if x.remaining-y.remaining > 1+between {
			violations++
		}
		if x.remaining == 0 && x.Reset >= 0 {
			earliest := time.Duration(math.MaxInt64)
			for _, s := range ok {
				if s.Done > x.Sent-window && s.Sent <= x.Done {
					earliest = min(earliest, s.Sent+window-time.Millisecond)
				}
			}
			if y.Done < earliest && y.Done < x.Sent+x.Reset-time.Second {
				violations++
			}
		}
	}
	return violations
}

// TestFastRulesAgree: the O(n log n) admission count and remaining checks
// find exactly what the quadratic ones find, on random consumers.
func TestFastRulesAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		ss := randomSamples(r, 1+r.IntN(200))
		var ok []Sample
		for _, s := range ss {
			if s.OK() {
				ok = append(ok, s)
			}
		}
		window := time.Duration(50+r.IntN(500)) * time.Millisecond
		horizon := time.Duration(-1)
		if trial%3 == 0 {
			horizon = time.Duration(r.IntN(2000)) * time.Millisecond
		}
		if got, want := worstWindow(slices.Clone(ok), window), slowWorstWindow(slices.Clone(ok), window); got != want {
			t.Fatalf("trial %d: worst window %d, want %d", trial, got, want)
		}
		var h HeadersAudit
		remainingChecks(slices.Clone(ok), window, horizon, true, &h, consumerName)
		if want := slowRemainingChecks(slices.Clone(ok), window, horizon); h.Violations != want {
			t.Fatalf("trial %d: %d violations, want %d", trial, h.Violations, want)
		}
	}
}

// TestAuditIsLinear: one consumer at 2,000 responses a second for 60 s
// (120,000 responses) is audited in one pass: the work counted, not timed,
// stays near n log n.
func TestAuditIsLinear(t *testing.T) {
	const n = 120_000
	ss := make([]Sample, n)
	for i := range ss {
		at := time.Duration(i) * 500 * time.Microsecond
		ss[i] = Sample{Sent: at, Done: at + 2*time.Millisecond, Status: 200, remaining: int64(i % 100), Reset: time.Second,
			RetryAfter: -1, limit: -1}
	}
	a := audit1(ss, slidingWindow(2000), 1, whole)
	// 2,000 a second, each flight 2 ms: a window a millisecond short of 1 s
	// whose start is a send holds 1,994 whole flights.
	if a.WorstWindowAdmitted != 1994 || a.Consumers != 1 {
		t.Fatalf("worst window %d of %d consumers", a.WorstWindowAdmitted, a.Consumers)
	}
}

// TestSamplesRoundTrip: what a run's JSON keeps for the audit reads back
// as it was, with flights rounded outwards to whole µs.
func TestSamplesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var ss []Sample
	for c := range 5 {
		for _, s := range randomSamples(r, 50) {
			s.Consumer = int32(c)
			s.Sent += time.Duration(r.IntN(1000)) // sub-µs parts
			s.Done += time.Duration(r.IntN(1000))
			if r.IntN(2) == 0 {
				s.RetryAfter, s.limit = time.Duration(r.IntN(5000))*time.Millisecond, 10
			}
			ss = append(ss, s)
		}
	}
	enc := encodeSamples(ss)
	got, err := enc.decode(time.Second, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ss) {
		t.Fatalf("%d samples back of %d", len(got), len(ss))
	}
	want := slices.Clone(ss)
	slices.SortFunc(want, func(a, b Sample) int {
		if a.Consumer != b.Consumer {
			return int(a.Consumer - b.Consumer)
		}
		return cmpDur(a.Sent, b.Sent)
	})
	for i, w := range want {
		g := got[i]
		sent := w.Sent.Truncate(time.Microsecond) + time.Second
		if w.RetryAfter > 0 {
			w.RetryAfter = w.RetryAfter.Truncate(time.Millisecond)
		}
		if g.Consumer != w.Consumer || g.Sent != sent || g.Done < w.Done+time.Second || g.Done >= w.Done+time.Second+time.Microsecond ||
			g.Status != w.Status || g.RetryAfter != w.RetryAfter || g.limit != w.limit ||
			g.remaining != w.remaining || g.Reset != w.Reset {
			t.Fatalf("sample %d: got %+v, want %+v (shifted by 1 s)", i, g, w)
		}
	}
}

// TestCappedAuditIsSound: when samples stop at a horizon, the checks that
// need every response judge only what ended before it, so the missing
// responses cannot frame an honest limiter.
func TestCappedAuditIsSound(t *testing.T) {
	// An honest consumer: limit 10 per second, 10 successes at the start
	// of every second, each saying how many remain.
	var ss []Sample
	for sec := range 3 {
		for k := range 10 {
			at := time.Duration(sec)*time.Second + time.Duration(k)*time.Millisecond
			ss = append(ss, Sample{Sent: at, Done: at + time.Millisecond/2, Status: 200, remaining: int64(9 - k),
				Reset: time.Second, RetryAfter: -1, limit: 10})
		}
	}
	full := audit1(ss, slidingWindow(10), 1, whole)
	if full.Headers.Violations != 0 || full.OverAdmitted != 0 {
		t.Fatalf("all samples: %+v", full)
	}
	// Drop every other response of the second second, as a connection
	// that hit its cap would: judged up to that cap, nothing is wrong.
	var capped []Sample
	for i, s := range ss {
		if s.Sent < time.Second || i%2 == 0 {
			capped = append(capped, s)
		}
	}
	a := auditAll(capped, []Expectation{slidingWindow(10)}, 1, Coverage{horizon: time.Second}, consumerName)
	if l := a.Limits[0]; l.Headers.Violations != 0 || l.OverAdmitted != 0 || a.CappedFromMillis == nil || *a.CappedFromMillis != 1000 {
		t.Fatalf("capped at 1 s: %+v", a)
	}
	// Without the horizon the gaps look like remaining falling by two.
	if b := audit1(capped, slidingWindow(10), 1, whole); b.Headers.Violations == 0 {
		t.Fatal("the gaps went unseen without a horizon: the test proves nothing")
	}
}

// whole is the coverage of a run whose samples hold every request.
var whole = Coverage{horizon: -1}

// TestWorstSpanOfLongFlights: on a loaded machine every flight is long, and
// the short gap between one success's send and an earlier one's reply holds
// no success; the worst span reported is still one of admissions, under
// each guarantee whose bound grows with the span (a sliding counter's
// audit once reported "admitted 0 in 50 ms where 5 were allowed").
func TestWorstSpanOfLongFlights(t *testing.T) {
	var ss []Sample
	for i := range 6 {
		at := time.Duration(i) * 450 * time.Millisecond
		ss = append(ss, Sample{Sent: at, Done: at + 500*time.Millisecond, Status: 200, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1})
	}
	for _, alg := range []string{"sliding-counter", "token-bucket", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			exp, err := newExpectation(5, time.Second, alg)
			if err != nil {
				t.Fatal(err)
			}
			l := audit1(slices.Clone(ss), exp, 1, whole)
			// No denial: no verdict, whose reason names the worst span too.
			if l.Verdict == Leaked || l.WorstWindowAdmitted == 0 || l.WorstSpanMillis < 500 {
				t.Fatalf("%s %q: admitted %d in %d ms where %d were allowed", l.Verdict, l.Reasons, l.WorstWindowAdmitted, l.WorstSpanMillis, l.WorstSpanAllowed)
			}
		})
	}
}

// audit1 audits ss against one limit, and returns what it found of it.
func audit1(ss []Sample, exp Expectation, consumers int, cov Coverage) LimitAudit {
	return auditAll(ss, []Expectation{exp}, consumers, cov, consumerName).Limits[0]
}

func slidingWindow(limit int64) Expectation {
	e, err := newExpectation(limit, time.Second, "")
	if err != nil {
		panic(err)
	}
	return e
}

// TestRampFindsTheWorstSpan: for the guarantees whose bound grows with the
// span, the sweep's span counts exactly the flights inside it and goes as
// far over the bound as the worst of every span from a send to a reply,
// less the one admission the bound's rounding may hide; it always holds a
// success.
func TestRampFindsTheWorstSpan(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 200 {
		var ok []Sample
		for _, s := range randomSamples(r, 1+r.IntN(60)) {
			if s.OK() {
				ok = append(ok, s)
			}
		}
		if len(ok) == 0 {
			continue
		}
		p := algorithms.Policy{Limit: int64(1 + r.IntN(6)), Window: time.Duration(20+r.IntN(300)) * time.Millisecond}
		for _, g := range []algorithms.Guarantee{algorithms.BurstRefill, algorithms.WeightedWindows} {
			got := worstRamp(ok, p, g, 1)
			matched := false
			best := int64(math.MinInt64)
			for _, s := range ok {
				for _, e := range ok {
					if s.Sent > e.Done {
						continue
					}
					var n int64
					for _, f := range ok {
						if f.Sent >= s.Sent && f.Done <= e.Done {
							n++
						}
					}
					d := e.Done - s.Sent
					if d == got.span && n == got.admitted {
						matched = true
					}
					best = max(best, n-g.MaxIn(p, d))
				}
			}
			if !matched || got.admitted == 0 || got.allowed != g.MaxIn(p, got.span) {
				t.Fatalf("trial %d %s: span %v holds %d, allowed %d: no span from a send to a reply matches", trial, g, got.span, got.admitted, got.allowed)
			}
			if got.admitted-got.allowed < best-1 {
				t.Fatalf("trial %d %s: the sweep found %d over, a span holds %d over", trial, g, got.admitted-got.allowed, best)
			}
		}
	}
}

// TestRemainingCountsSuccessesWithoutOne: a success whose response gave no
// remaining for the limit (it named only another policy, the one closest
// to exhaustion) still consumed a slot: the remaining of the next success
// that gives one may have fallen by it, and that is no violation.
func TestRemainingCountsSuccessesWithoutOne(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name       string
		between    int64 // the remaining of the success in between; -1 for none
		violations int64
	}{
		{"without a remaining", -1, 0},
		{"with one", 47, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := []Sample{
				{Sent: ms(0), Done: ms(2), Status: 200, remaining: 48, Reset: time.Second, RetryAfter: -1, limit: -1},
				{Sent: ms(10), Done: ms(12), Status: 200, remaining: tc.between, Reset: time.Second, RetryAfter: -1, limit: -1},
				{Sent: ms(20), Done: ms(22), Status: 200, remaining: 46, Reset: time.Second, RetryAfter: -1, limit: -1},
			}
			var h HeadersAudit
			remainingChecks(ok, time.Second, -1, true, &h, consumerName)
			if h.Violations != tc.violations {
				t.Fatalf("%d violations (%s), want %d", h.Violations, h.Example, tc.violations)
			}
		})
	}
	// Two admissions fewer with none in between is still caught.
	ok := []Sample{
		{Sent: ms(0), Done: ms(2), Status: 200, remaining: 48, Reset: time.Second, RetryAfter: -1, limit: -1},
		{Sent: ms(20), Done: ms(22), Status: 200, remaining: 46, Reset: time.Second, RetryAfter: -1, limit: -1},
	}
	var h HeadersAudit
	remainingChecks(ok, time.Second, -1, true, &h, consumerName)
	if h.Violations != 1 {
		t.Fatalf("%d violations, want 1", h.Violations)
	}
}
