package audit

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// gateway simulates a sliding-log limiter seen from outside: requests of
// some consumers sent at random, each decided at a random instant of its
// flight, admitted when fewer than admit of its key's admissions were
// decided in the window before. With shared, every consumer has one key.
func gateway(r *rand.Rand, n, consumers int, window time.Duration, admit int, shared bool) []Sample {
	type req struct {
		s      Sample
		decide time.Duration
	}
	reqs := make([]req, n)
	var at time.Duration
	for i := range reqs {
		at += time.Duration(r.IntN(int(window/20) + 1))
		flight := time.Duration(r.IntN(int(window/5)) + 1)
		s := Sample{Consumer: int32(r.IntN(consumers)), Sent: at, Done: at + flight, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1}
		reqs[i] = req{s: s, decide: at + time.Duration(r.Int64N(int64(flight)))}
	}
	slices.SortFunc(reqs, func(a, b req) int { return cmpDur(a.decide, b.decide) })
	admitted := map[int32][]time.Duration{}
	out := make([]Sample, n)
	for i, q := range reqs {
		key := q.s.Consumer
		if shared {
			key = 0
		}
		in := 0
		for _, t := range admitted[key] {
			if t > q.decide-window {
				in++
			}
		}
		q.s.Status = 429
		if in < admit {
			q.s.Status = 200
			admitted[key] = append(admitted[key], q.decide)
		}
		out[i] = q.s
	}
	return out
}

// TestUnderAdmissionIsSound: an honest limiter, whatever its latency, is
// never found to under-admit, nor to share its limit; one that admits a
// fifth of its claim is found to, and so is one that keys every consumer
// alike. Consumers given one limit by a stingy limiter are not taken for a
// shared limit: their admissions together stay far below one consumer's.
func TestUnderAdmissionIsSound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	window := 100 * time.Millisecond
	exp, err := newExpectation(10, window, "")
	if err != nil {
		t.Fatal(err)
	}
	for trial := range 60 {
		consumers := 1 + trial%4
		honest := audit1(gateway(r, 600, consumers, window, 10, false), exp, consumers, whole)
		if honest.UnderAdmitted != 0 || honest.SharedLimit || honest.OverAdmitted != 0 || honest.DenialsJudged == 0 {
			t.Fatalf("trial %d, an honest limiter: %+v", trial, honest)
		}
		stingy := audit1(gateway(r, 600, consumers, window, 2, false), exp, consumers, whole)
		if stingy.UnderAdmitted == 0 || stingy.SharedLimit || stingy.WorstUnderAdmitted == 0 {
			t.Fatalf("trial %d, a limiter that admits 2 of 10: %+v", trial, stingy)
		}
		if stingy.UnderAdmittedShare <= 0 || stingy.UnderAdmittedShare > 1 {
			t.Fatalf("trial %d: share %g", trial, stingy.UnderAdmittedShare)
		}
		if consumers < 2 {
			continue
		}
		shared := audit1(gateway(r, 600, consumers, window, 10, true), exp, consumers, whole)
		if !shared.SharedLimit || shared.Verdict != NoVerdict || !strings.Contains(strings.Join(shared.Reasons, "; "), "share one limit") {
			t.Fatalf("trial %d, %d consumers with one key: %+v", trial, consumers, shared)
		}
	}
}

// TestUnderAdmissionJudgesOnlyWhatTheSamplesHold: denials whose lookback
// reaches before the samples are complete (the run's start, or the
// warm-up's last response), or past where they stop, are not judged: what
// was admitted there is unknown.
func TestUnderAdmissionJudgesOnlyWhatTheSamplesHold(t *testing.T) {
	window := time.Second
	exp, _ := newExpectation(5, window, "")
	// Denied every 100 ms for 3 s, never admitted: a limiter exhausted
	// before the run, or one that admits nothing.
	var ss []Sample
	for i := range 30 {
		at := time.Duration(i) * 100 * time.Millisecond
		ss = append(ss, Sample{Status: 429, Sent: at, Done: at + 5*time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1})
	}
	for _, tc := range []struct {
		cov    Coverage
		judged int64
	}{
		{whole, 19}, // sent from 1.01 s (a window and its margin) on
		{Coverage{from: time.Second, horizon: -1}, 9},     // from 2.01 s
		{Coverage{horizon: 2 * time.Second}, 9},           // answered before 2 s
		{Coverage{horizon: -1, skipUnder: "no"}, 0},       // not judged at all
		{Coverage{from: 3 * time.Second, horizon: -1}, 0}, // after the last
	} {
		l := audit1(slices.Clone(ss), exp, 1, tc.cov)
		if l.DenialsJudged != tc.judged || l.UnderAdmitted != tc.judged || l.Denials != 30 {
			t.Errorf("%+v: %d of %d denials judged, %d under-admitted; want %d judged, all under", tc.cov, l.DenialsJudged, l.Denials, l.UnderAdmitted, tc.judged)
		}
	}
	// A transport error may have been admitted: with five in the window
	// before, a denial is no longer surely false.
	var failed []Sample
	for i := range 5 {
		at := 1500*time.Millisecond + time.Duration(i)*time.Millisecond
		failed = append(failed, Sample{Sent: at, Done: at + time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1})
	}
	l := audit1(append(slices.Clone(ss), failed...), exp, 1, whole)
	if l.UnderAdmitted >= l.DenialsJudged || l.UnderAdmitted == 0 {
		t.Errorf("%d of %d denials under-admitted with five failed requests that may count", l.UnderAdmitted, l.DenialsJudged)
	}
}

// TestVerdicts: what the audit says when it cannot judge, and that an
// over-admission beats every other reason.
func TestVerdicts(t *testing.T) {
	exp, _ := newExpectation(5, time.Second, "")
	reply := func(c int32, status int16, ms int) Sample {
		at := time.Duration(ms) * time.Millisecond
		return Sample{Consumer: c, Status: status, Sent: at, Done: at + time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1}
	}
	many := func(c int32, status int16, n, every int) []Sample {
		var ss []Sample
		for i := range n {
			ss = append(ss, reply(c, status, i*every))
		}
		return ss
	}
	for _, tc := range []struct {
		name      string
		samples   []Sample
		consumers int
		verdict   Verdict
		want      []string // in the reasons
	}{
		{"nothing sent", nil, 1, NoVerdict, []string{"no request was sent"}},
		{"no response", []Sample{reply(0, 0, 1), reply(0, 0, 2)}, 1, NoVerdict, []string{"no request got a response (2 transport errors)"}},
		{"400 to everything", append(many(0, 400, 240, 10), many(1, 400, 5, 10)...), 2, NoVerdict,
			[]string{"most responses, 245 of 245, were neither 2xx nor 429 (400 × 245)", "2 of the 2 consumers got no 2xx, such as consumer-0 (400 × 240)"}},
		{"one consumer denied throughout", append(many(0, 200, 4, 300), many(1, 429, 20, 100)...), 2, NoVerdict,
			[]string{"consumer-1 got no 2xx in its responses (429 × 20)"}},
		{"under the limit", many(0, 200, 20, 300), 1, NotReached, []string{"4 of 5 in 1s: not tested"}},
		{"at the limit, never beyond", many(0, 200, 5, 100), 1, NotReached,
			[]string{"5 of 5 in 1s, but none of its requests was denied while its window was seen full: not tested"}},
		// Denied before the fifth admission came back: the window was not
		// known full.
		{"denied with room", append(many(0, 200, 5, 100), many(0, 429, 5, 100)[1:]...), 1, NotReached,
			[]string{"5 of 5 in 1s, but none of its requests was denied while its window was seen full: not tested"}},
		{"at the limit, then denied", append(many(0, 200, 5, 100), reply(0, 429, 450), reply(0, 429, 900)), 1, Held, nil},
		{"a leak beats the rest", append(many(0, 200, 8, 10), many(1, 400, 40, 10)...), 2, Leaked,
			[]string{"consumer-0 got 8 through in 999ms where 5 were allowed (at most 5 in any 1s span)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := auditAll(tc.samples, []Expectation{exp}, tc.consumers, whole, consumerName)
			got := strings.Join(a.Reasons, "; ")
			if a.Verdict != tc.verdict || (tc.want == nil) != (len(a.Reasons) == 0) {
				t.Fatalf("%s %q, want %s", a.Verdict, a.Reasons, tc.verdict)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("reasons %q lack %q", got, w)
				}
			}
		})
	}
}

// TestWorstConsumersAreBounded: the per-consumer summaries keep the ten
// worst, the most over-admitted first.
func TestWorstConsumersAreBounded(t *testing.T) {
	exp, _ := newExpectation(2, time.Second, "")
	var ss []Sample
	for c := range 50 {
		for i := range c%7 + 1 { // consumer c is admitted c%7+1 times at once
			ss = append(ss, Sample{Consumer: int32(c), Status: 200, Sent: time.Duration(i), Done: time.Duration(i) + time.Millisecond,
				RetryAfter: -1, limit: -1, remaining: -1, Reset: -1})
		}
	}
	l := audit1(ss, exp, 50, whole)
	if len(l.WorstConsumers) != maxWorstConsumers || l.Consumers != 50 {
		t.Fatalf("%d worst of %d consumers", len(l.WorstConsumers), l.Consumers)
	}
	if w := l.WorstConsumers[0]; w.Consumer != "consumer-6" || w.OverAdmitted != 5 || w.Admitted != 7 || l.WorstConsumer != "consumer-6" {
		t.Fatalf("worst %+v, audit's %s", w, l.WorstConsumer)
	}
	for i := 1; i < len(l.WorstConsumers); i++ {
		if l.WorstConsumers[i].OverAdmitted > l.WorstConsumers[i-1].OverAdmitted {
			t.Fatalf("out of order: %+v", l.WorstConsumers)
		}
	}
}
