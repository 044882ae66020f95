package audit

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// limiterLog is one sliding log of a simulated gateway: admit per window.
type limiterLog struct {
	admit  int
	window time.Duration
}

// decideAll simulates a gateway that decides every request of reqs (sent
// at sent, each decided at decide within its flight, one consumer's or
// all of them on one key) against each log of logs that meets says it
// meets, atomically: admitted when every log met admits, and then counted
// in each.
func decideAll(reqs []Sample, decide []time.Duration, logs []limiterLog, meets func(i, log int) bool) []Sample {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmpDur(decide[a], decide[b]) })
	admitted := make([]map[int32][]time.Duration, len(logs))
	for k := range admitted {
		admitted[k] = map[int32][]time.Duration{}
	}
	out := slices.Clone(reqs)
	for _, i := range order {
		t, c := decide[i], out[i].Consumer
		ok := true
		for k, l := range logs {
			if !meets(i, k) {
				continue
			}
			in := 0
			for _, a := range admitted[k][c] {
				if a > t-l.window {
					in++
				}
			}
			ok = ok && in < l.admit
		}
		out[i].Status = 429
		if ok {
			out[i].Status = 200
			for k := range logs {
				if meets(i, k) {
					admitted[k][c] = append(admitted[k][c], t)
				}
			}
		}
	}
	return out
}

// steady is one consumer's requests every gap for d, each answered in a
// millisecond and decided when sent.
func steady(gap, d time.Duration) ([]Sample, []time.Duration) {
	var ss []Sample
	var decide []time.Duration
	for at := time.Duration(0); at < d; at += gap {
		ss = append(ss, Sample{Sent: at, Done: at + time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1})
		decide = append(decide, at)
	}
	return ss, decide
}

func everyLog(int, int) bool { return true }

// TestHourLimitBesideASecond: a gateway of 5 per second and 100,000 per
// hour per consumer, audited at 25 a second for 5 s: the second's limit is
// held, each of its denials justified by its own full window (never
// unjudged for want of the hour's history, never under-admission); the
// hour's limit, which the run never came near, is not reached, and says
// how far the load got. --fail-on-under passes it.
func TestHourLimitBesideASecond(t *testing.T) {
	perSecond, _ := newExpectation(5, time.Second, "")
	perHour, _ := newExpectation(100000, time.Hour, "")
	perSecond.ID, perHour.ID = "per-second", "per-hour"
	ss, decide := steady(40*time.Millisecond, 5*time.Second)
	ss = decideAll(ss, decide, []limiterLog{{5, time.Second}, {100000, time.Hour}}, everyLog)
	a := auditAll(ss, []Expectation{perSecond, perHour}, 1, whole, consumerName)
	s, h := a.Limits[0], a.Limits[1]
	if s.Verdict != Held || s.Denials == 0 || s.DenialsAttributed != s.Denials || s.DenialsJudged != s.Denials || s.UnderAdmitted != 0 ||
		s.DenialsUnjudged != 0 || s.UnjudgedReason != "" {
		t.Errorf("per-second: %s %q, %d denials, %d its own, %d judged, %d under, %d unjudged (%s)", s.Verdict, s.Reasons, s.Denials,
			s.DenialsAttributed, s.DenialsJudged, s.UnderAdmitted, s.DenialsUnjudged, s.UnjudgedReason)
	}
	if h.Verdict != NotReached || !slices.Equal(h.Reasons, []string{"25 of 100000 in 1h: not tested"}) || h.MostInWindow != 25 ||
		h.DenialsAttributed != 0 || h.DenialsJudged != h.Denials || h.UnderAdmitted != 0 {
		t.Errorf("per-hour: %s %q, most %d, %d of its %d denials its own, %d judged, %d under", h.Verdict, h.Reasons, h.MostInWindow,
			h.DenialsAttributed, h.Denials, h.DenialsJudged, h.UnderAdmitted)
	}
	if a.Verdict != NotReached || !slices.Equal(a.Reasons, []string{"per-hour: 25 of 100000 in 1h: not tested"}) {
		t.Errorf("audit %s %q: an untested limit is never held", a.Verdict, a.Reasons)
	}
	// Nothing for --fail-on-under to fail (bench.Thresholds reads these).
	for _, l := range a.Limits {
		if l.UnderSkipped != "" || l.UnderAdmittedShare != 0 {
			t.Errorf("%s: under-admission skipped (%q) or found (%g)", l.ID, l.UnderSkipped, l.UnderAdmittedShare)
		}
	}
}

// TestOwnFullWindowIsNeverUnderAdmission: an honest gateway of a limit on
// a short window beside one on a long window, whatever its latency, never
// has a denial found under-admitted nor left unjudged: each is justified
// by its window, or that window may have made it. One that admits 2 of
// the 10 it claims has its denials left unjudged beside the hour's limit,
// whose history before the run is unknown, saying so; alone, they are
// under-admission.
func TestOwnFullWindowIsNeverUnderAdmission(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	window := 100 * time.Millisecond
	short, _ := newExpectation(10, window, "")
	long, _ := newExpectation(100000, time.Hour, "")
	short.ID, long.ID = "short", "long"
	for trial := range 40 {
		consumers := 1 + trial%3
		reqs := gateway(r, 800, consumers, window, 10, false) // the sends and flights
		decide := make([]time.Duration, len(reqs))
		for i, s := range reqs {
			decide[i] = s.Sent + time.Duration(r.Int64N(int64(s.Done-s.Sent)))
		}
		honest := decideAll(reqs, decide, []limiterLog{{10, window}, {100000, time.Hour}}, everyLog)
		a := auditAll(honest, []Expectation{short, long}, consumers, whole, consumerName)
		for _, l := range a.Limits {
			if l.UnderAdmitted != 0 || l.DenialsUnjudged != 0 || l.DenialsJudged != l.Denials || l.OverAdmitted != 0 || l.SharedLimit {
				t.Fatalf("trial %d, an honest gateway: %s: %s %q, %d of %d denials judged, %d under", trial, l.ID, l.Verdict, l.Reasons,
					l.DenialsJudged, l.Denials, l.UnderAdmitted)
			}
		}
		if s := a.Limits[0]; s.Verdict != Held || s.DenialsAttributed == 0 {
			t.Fatalf("trial %d: short: %s %q, %d its own", trial, s.Verdict, s.Reasons, s.DenialsAttributed)
		}
		stingy := decideAll(reqs, decide, []limiterLog{{2, window}, {100000, time.Hour}}, everyLog)
		s := auditAll(stingy, []Expectation{short, long}, consumers, whole, consumerName).Limits[0]
		want := "they met a limit whose look-back reaches before the run's start, where what it counted is unknown: long (a look-back of 1h; " +
			strconv.FormatInt(s.DenialsUnjudged, 10) + " denials)"
		if s.UnderAdmitted != 0 || s.DenialsUnjudged == 0 || !strings.HasPrefix(s.UnjudgedReason, want) ||
			!strings.HasSuffix(s.UnjudgedReason, "in a run longer than 1h, those sent after the first 1h are judged") {
			t.Fatalf("trial %d, a stingy gateway beside an hour's limit: %d under, %d unjudged (%s)", trial, s.UnderAdmitted,
				s.DenialsUnjudged, s.UnjudgedReason)
		}
		if s.UnderSkipped != "" || s.UnderAdmittedShare != 0 { // what --fail-on-under fails
			t.Fatalf("trial %d: unjudged denials would cross --fail-on-under: %q, %g", trial, s.UnderSkipped, s.UnderAdmittedShare)
		}
		alone := audit1(decideAll(reqs, decide, []limiterLog{{2, window}}, everyLog), short, consumers, whole)
		if alone.UnderAdmitted == 0 {
			t.Fatalf("trial %d, a stingy gateway alone: no under-admission in %d denials judged", trial, alone.DenialsJudged)
		}
	}
}

// searchRun is one consumer's requests every 40 ms for 3 s, to /search
// each fourth from the first (route 1) and /items (route 0) otherwise, the
// first limit (per-second, 5 a second) on every request and the second
// (search, 2 a second) on /search, decided by a gateway that enforces
// per-second and, with search, search too. It returns the samples and the
// meeting of them and the limits.
func searchRun(search bool) ([]Sample, Meeting) {
	ss, decide := steady(40*time.Millisecond, 3*time.Second)
	for i := range ss {
		if i%4 == 0 {
			ss[i].Route = 1
		}
	}
	logs := []limiterLog{{5, time.Second}}
	if search {
		logs = append(logs, limiterLog{2, time.Second})
	}
	ss = decideAll(ss, decide, logs, func(i, k int) bool { return k == 0 || ss[i].Route == 1 })
	m := Meeting{met: make([]uint64, len(ss)), of: make([]limitCounters, 2)}
	for k := range m.of {
		m.of[k].names = []string{"consumer-0"}
	}
	for i, s := range ss {
		for k := range 2 {
			if k == 0 || s.Route == 1 {
				m.met[i] |= 1 << k
				m.of[k].idx = append(m.of[k].idx, int32(i))
				m.of[k].counter = append(m.of[k].counter, 0)
			}
		}
	}
	return ss, m
}

// TestLimitDeniedOnlyWithAnotherIsNotReached: a limit on /search that the
// gateway leaves out, whose window fills only when the consumer's limit
// does, is not reached: every request denied while it was full met the
// consumer's limit, full too. Enforced, and filled while the consumer's
// limit had room, it is held.
func TestLimitDeniedOnlyWithAnotherIsNotReached(t *testing.T) {
	perSecond := Expectation{policy: policyOf(5, time.Second), guarantee: algorithms.SlidingWindow, quota: 5, cost: 1, ID: "per-second"}
	search := Expectation{policy: policyOf(2, time.Second), guarantee: algorithms.SlidingWindow, quota: 2, cost: 1, ID: "search"}
	ss, m := searchRun(false)
	a := auditLimits(ss, nil, []Expectation{perSecond, search}, m, whole)
	p, s := a.Limits[0], a.Limits[1]
	if p.Verdict != Held || p.DenialsAttributed == 0 {
		t.Errorf("per-second: %s %q, %d its own", p.Verdict, p.Reasons, p.DenialsAttributed)
	}
	if s.Verdict != NotReached || s.DenialsAttributed != 0 || s.MostInWindow != 2 || len(s.Reasons) != 1 ||
		!strings.HasPrefix(s.Reasons[0], "2 of 2 in 1s, but each of the ") ||
		!strings.HasSuffix(s.Reasons[0], " requests denied while its window was full met per-second too, which may have denied it: not tested") {
		t.Errorf("search, left out: %s %q, %d its own, most %d", s.Verdict, s.Reasons, s.DenialsAttributed, s.MostInWindow)
	}
	// Enforced, with /search sent first each second: the third /search of
	// the first second is search's own denial (the consumer's limit had
	// room for it).
	ss, decide := steady(40*time.Millisecond, 3*time.Second)
	for i := range ss {
		if i%25 < 3 {
			ss[i].Route = 1
		}
	}
	ss = decideAll(ss, decide, []limiterLog{{5, time.Second}, {2, time.Second}}, func(i, k int) bool { return k == 0 || ss[i].Route == 1 })
	for k := range m.of {
		m.of[k].idx, m.of[k].counter = nil, nil
	}
	m.met = make([]uint64, len(ss))
	for i, s := range ss {
		for k := range 2 {
			if k == 0 || s.Route == 1 {
				m.met[i] |= 1 << k
				m.of[k].idx = append(m.of[k].idx, int32(i))
				m.of[k].counter = append(m.of[k].counter, 0)
			}
		}
	}
	a = auditLimits(ss, nil, []Expectation{perSecond, search}, m, whole)
	if s := a.Limits[1]; s.Verdict != Held || s.DenialsAttributed == 0 || s.UnderAdmitted != 0 {
		t.Errorf("search, enforced: %s %q, %d its own, %d under", s.Verdict, s.Reasons, s.DenialsAttributed, s.UnderAdmitted)
	}
	if a.Verdict != Held {
		t.Errorf("audit %s %q", a.Verdict, a.Reasons)
	}
}

// TestNeverAdvertised: a limit that no response's RateLimit-Policy names,
// by name or by quota and window, while they name others, is reported so;
// one named by some response, or by its quota and window, is not.
func TestNeverAdvertised(t *testing.T) {
	perSecond := Expectation{policy: policyOf(5, time.Second), guarantee: algorithms.SlidingWindow, quota: 5, cost: 1, ID: "per-second"}
	search := Expectation{policy: policyOf(2, time.Second), guarantee: algorithms.SlidingWindow, quota: 2, cost: 1, ID: "search"}
	exps := []Expectation{perSecond, search}
	for _, tc := range []struct {
		name   string
		advert func(i int, s Sample) []advert // the policies of sample i's response
		never  bool
	}{
		{"only the other", func(int, Sample) []advert {
			return []advert{{name: 0, named: true, q: givenAs(5), w: givenAs(1)}}
		}, true},
		{"named once", func(i int, s Sample) []advert {
			ads := []advert{{name: 0, named: true, q: givenAs(5), w: givenAs(1)}}
			if i == 8 {
				ads = append(ads, advert{name: 1, named: true, q: givenAs(2), w: givenAs(1)})
			}
			return ads
		}, false},
		{"by its quota and window", func(_ int, s Sample) []advert {
			ads := []advert{{q: givenAs(5), w: givenAs(1)}}
			if s.Route == 1 {
				ads = append(ads, advert{q: givenAs(2), w: givenAs(1)})
			}
			return ads
		}, false},
		{"legacy fields alone", func(int, Sample) []advert { return []advert{{legacy: true, q: givenAs(5), r: givenAs(1)}} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss, m := searchRun(false)
			var advs []advert
			for i := range ss {
				ads := tc.advert(i, ss[i])
				ss[i].advAt, ss[i].advN = uint32(len(advs)), uint8(len(ads))
				advs = append(advs, ads...)
			}
			s := auditLimits(ss, advs, exps, m, whole).Limits[1]
			got := s.Headers.NeverAdvertised
			if tc.never != (got != "") {
				t.Fatalf("never advertised %q, want it %v", got, tc.never)
			}
			if !tc.never {
				return
			}
			want := "never advertised it: " + strconv.Itoa(len(m.of[1].idx)) + " responses to its requests named per-second in RateLimit-Policy"
			if !strings.HasPrefix(got, want) || s.Verdict != NotReached || !slices.Contains(s.Reasons, "the gateway "+got) {
				t.Fatalf("%s %q, never advertised %q; want %q in the reasons", s.Verdict, s.Reasons, got, want)
			}
		})
	}
	// A rate limit service's statuses name descriptors, not policies.
	ss, m := searchRun(false)
	var advs []advert
	for i := range ss {
		ss[i].advAt, ss[i].advN = uint32(len(advs)), 1
		advs = append(advs, advert{name: 0, named: true, q: givenAs(5), w: givenAs(1)})
	}
	rls := slices.Clone(exps)
	for k := range rls {
		rls[k].noPolicies = true
	}
	if got := auditLimits(ss, advs, rls, m, whole).Limits[1].Headers.NeverAdvertised; got != "" {
		t.Fatalf("bench rls: never advertised %q", got)
	}
}

// TestHistoryBeforeTheRunShows: a gateway that leaves /search's limit out,
// audited while an earlier run's requests still count against the
// consumer's limit, denies a /search request when /search's window is
// full, for the consumer's limit: the run shows that by the requests it
// denied that nothing in it explains, and the denial is not /search's
// own. Audited fresh, the same gateway lets a third /search through.
func TestHistoryBeforeTheRunShows(t *testing.T) {
	perSecond := Expectation{policy: policyOf(5, time.Second), guarantee: algorithms.SlidingWindow, quota: 5, cost: 1, ID: "per-second"}
	search := Expectation{policy: policyOf(2, time.Second), guarantee: algorithms.SlidingWindow, quota: 2, cost: 1, ID: "search"}
	run := func(history int) LimitAudit {
		var ss []Sample
		var decide []time.Duration
		for i := range history { // an earlier run's, to /items
			at := time.Duration(i-history) * 100 * time.Millisecond
			ss = append(ss, Sample{Sent: at, Done: at + time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1})
			decide = append(decide, at)
		}
		for i := range 15 { // three to /search, then /items: 600 ms
			at := time.Duration(i) * 40 * time.Millisecond
			s := Sample{Sent: at, Done: at + time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1}
			if i < 3 {
				s.Route = 1
			}
			ss, decide = append(ss, s), append(decide, at)
		}
		ss = decideAll(ss, decide, []limiterLog{{5, time.Second}}, func(int, int) bool { return true })
		ss = ss[history:] // what the run saw
		m := Meeting{met: make([]uint64, len(ss)), of: []limitCounters{{names: []string{"consumer-0"}}, {names: []string{"consumer-0"}}}}
		for i, s := range ss {
			for k := range 2 {
				if k == 0 || s.Route == 1 {
					m.met[i] |= 1 << k
					m.of[k].idx = append(m.of[k].idx, int32(i))
					m.of[k].counter = append(m.of[k].counter, 0)
				}
			}
		}
		return auditLimits(ss, nil, []Expectation{perSecond, search}, m, whole).Limits[1]
	}
	if s := run(3); s.Verdict != NotReached || s.DenialsAttributed != 0 || len(s.Reasons) != 1 ||
		!strings.Contains(s.Reasons[0], "met per-second too, which may have denied it (what per-second counted before the run began is unknown") {
		t.Errorf("after an earlier run: %s %q, %d its own", s.Verdict, s.Reasons, s.DenialsAttributed)
	}
	if s := run(0); s.Verdict != Leaked {
		t.Errorf("fresh: %s %q", s.Verdict, s.Reasons)
	}
}

// TestBurstNotReached: a bucket's window is full at its burst, over the
// time the burst takes to refill: 3 a minute with a burst of 8, of which
// the load got 4 through, is not reached, 4 of 8 in 2m40s (never "4 of 3
// in 1m", which would read as a leak); at 8, its denials are its own.
func TestBurstNotReached(t *testing.T) {
	exp, err := ExpectationOf(algorithms.Policy{Limit: 3, Window: time.Minute, Burst: 8}, "token-bucket")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		admitted int
		verdict  Verdict
		reasons  []string
	}{
		{4, NotReached, []string{"4 of 8 in 2m40s: not tested"}},
		{8, Held, []string{}},
	} {
		var ss []Sample
		for i := range 20 { // back to back, the first admitted
			at := time.Duration(i) * 10 * time.Millisecond
			s := Sample{Status: 429, Sent: at, Done: at + time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1}
			if i < tc.admitted {
				s.Status = 200
			}
			ss = append(ss, s)
		}
		l := audit1(ss, exp, 1, whole)
		if l.Verdict != tc.verdict || !slices.Equal(l.Reasons, tc.reasons) || l.FullAt != 8 || l.FullSpanMillis != 160_000 {
			t.Errorf("%d admitted: %s %q, %d of %d in %d ms", tc.admitted, l.Verdict, l.Reasons, l.MostInWindow, l.FullAt, l.FullSpanMillis)
		}
	}
}
