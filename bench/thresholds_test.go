package bench_test

import (
	"strings"
	"testing"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
)

// TestZeroThresholdsPass: every threshold is off at its zero value, so a
// run with errors and 5xx crosses none of them.
func TestZeroThresholdsPass(t *testing.T) {
	r := bench.Result{Requests: 100, Errors: 10, StatusCounts: map[string]int64{"200": 80, "503": 10}}
	if crossed := (bench.Thresholds{}).Crossed(r); len(crossed) != 0 {
		t.Fatalf("the zero Thresholds crossed %v", crossed)
	}
}

// TestMaxErrorRate: a MaxErrorRate set to 0 fails a run with any error or
// 5xx, and passes one without; one set to 0.25 passes a fifth; a set rate
// outside 0 to 1 is refused.
func TestMaxErrorRate(t *testing.T) {
	clean := bench.Result{Requests: 100, StatusCounts: map[string]int64{"200": 90, "429": 10}}
	oneError := bench.Result{Requests: 100, Errors: 1, StatusCounts: map[string]int64{"200": 99}}
	one5xx := bench.Result{Requests: 100, StatusCounts: map[string]int64{"200": 99, "500": 1}}
	fifth := bench.Result{Requests: 100, Errors: 10, StatusCounts: map[string]int64{"200": 80, "503": 10}}
	for _, tc := range []struct {
		name    string
		rate    float64
		r       bench.Result
		crosses bool
	}{
		{"0, clean", 0, clean, false},
		{"0, one error", 0, oneError, true},
		{"0, one 5xx", 0, one5xx, true},
		{"0.25, a fifth", 0.25, fifth, false},
		{"0.1, a fifth", 0.1, fifth, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := bench.Thresholds{MaxErrorRate: new(tc.rate)}
			if err := th.Validate(); err != nil {
				t.Fatal(err)
			}
			crossed := th.Crossed(tc.r)
			if (len(crossed) > 0) != tc.crosses || (tc.crosses && (len(crossed) != 1 || crossed[0].Field != "MaxErrorRate")) {
				t.Fatalf("crossed %v, want crossed %v", crossed, tc.crosses)
			}
		})
	}
	for _, rate := range []float64{-0.1, 1.5} {
		if err := (bench.Thresholds{MaxErrorRate: new(rate)}).Validate(); err == nil {
			t.Errorf("MaxErrorRate %g passed Validate", rate)
		}
	}
}

// TestMaxErrorRateCountsEveryFailure: a 400 or a 401 fails a run as a 503
// does, named by status; 2xx and 429 never do.
func TestMaxErrorRateCountsEveryFailure(t *testing.T) {
	r := bench.Result{Requests: 100, Errors: 2, ErrorKinds: map[string]bench.ErrorKind{"refused": {Count: 2}},
		StatusCounts: map[string]int64{"200": 40, "429": 40, "400": 10, "401": 5, "302": 3}}
	if got := r.Failures(); got != 20 {
		t.Fatalf("%d failures, want 20", got)
	}
	crossed := bench.Thresholds{MaxErrorRate: new(0.1)}.Crossed(r)
	want := "MaxErrorRate: 0.2000 of requests failed, above 0.1 (errors by status: 302 × 3, 400 × 10, 401 × 5; transport errors: refused 2)"
	if len(crossed) != 1 || crossed[0].Error() != want {
		t.Fatalf("crossed %v, want %q", crossed, want)
	}
}

// TestVerdictThresholds: FailOnLeak passes only an audit that held (or,
// with AllowNoVerdict, or AllowUntested naming the limit, one that was not
// reached or could not judge, but never a shared limit); FailOnUnder
// weighs the share of false denials, and fails when there were denials
// and a reason of the run (UnderSkipped) judged none; denials a lookback
// left unjudged never fail it by themselves.
func TestVerdictThresholds(t *testing.T) {
	audited := func(l audit.LimitAudit) bench.Result {
		return bench.Result{Requests: 10, StatusCounts: map[string]int64{"200": 5, "429": 5},
			Audit: &audit.Audit{Verdict: l.Verdict, Reasons: l.Reasons, Limits: []audit.LimitAudit{l}}}
	}
	held := audit.LimitAudit{Verdict: audit.Held, Denials: 5, DenialsJudged: 4}
	leaked := audit.LimitAudit{Verdict: audit.Leaked, OverAdmitted: 2, WorstConsumer: "consumer-0", Denials: 5, DenialsJudged: 4}
	none := audit.LimitAudit{Verdict: audit.NoVerdict, Reasons: []string{"consumer-0 got no 2xx in its responses"}}
	shared := audit.LimitAudit{Verdict: audit.NoVerdict, Reasons: []string{"the gateway seems to share one limit"}, SharedLimit: true,
		Denials: 5, DenialsJudged: 4, UnderAdmitted: 4, UnderAdmittedShare: 1}
	under := audit.LimitAudit{Verdict: audit.Held, Denials: 5, DenialsJudged: 4, UnderAdmitted: 1, UnderAdmittedShare: 0.25}
	unjudged := audit.LimitAudit{Verdict: audit.Held, Denials: 5, DenialsUnjudged: 5,
		UnjudgedReason: "they met per-hour (a look-back of 1h), whose look-back reaches before the run's start"}
	skipped := audit.LimitAudit{Verdict: audit.Held, Denials: 5, DenialsUnjudged: 5, UnderSkipped: "other load machines send the same consumers"}
	untested := audit.LimitAudit{ID: "per-hour", Verdict: audit.NotReached, Reasons: []string{"39 of 100000 in 1h: not tested"}}
	for _, tc := range []struct {
		name string
		th   bench.Thresholds
		l    audit.LimitAudit
		want []string // the crossed fields' messages contain these, in order
	}{
		{"held", bench.Thresholds{FailOnLeak: true, FailOnUnder: new(0.0)}, held, nil},
		{"leaked", bench.Thresholds{FailOnLeak: true, AllowNoVerdict: true}, leaked, []string{"FailOnLeak: consumer-0 got 0 through"}},
		{"no verdict", bench.Thresholds{FailOnLeak: true}, none,
			[]string{"FailOnLeak: no verdict: consumer-0 got no 2xx in its responses (statuses seen: 200 × 5, 429 × 5)"}},
		{"no verdict allowed", bench.Thresholds{FailOnLeak: true, AllowNoVerdict: true}, none, nil},
		{"shared, allowed or not", bench.Thresholds{FailOnLeak: true, AllowNoVerdict: true}, shared,
			[]string{"FailOnLeak: no verdict: the gateway seems to share one limit"}},
		{"under, above", bench.Thresholds{FailOnUnder: new(0.2)}, under, []string{"FailOnUnder: 1 of the 4 denials judged (25.0%) would have been admitted"}},
		{"under, within", bench.Thresholds{FailOnUnder: new(0.25)}, under, nil},
		{"under, none judged for a lookback", bench.Thresholds{FailOnUnder: new(0.5)}, unjudged, nil},
		{"under, none judged in the run", bench.Thresholds{FailOnUnder: new(0.5)}, skipped,
			[]string{"FailOnUnder: none of the 5 denials could be judged (other load machines send the same consumers)"}},
		{"not reached", bench.Thresholds{FailOnLeak: true}, untested,
			[]string{"FailOnLeak: not reached: 39 of 100000 in 1h: not tested (AllowUntested per-hour lets it go untested)"}},
		{"not reached, allowed by name", bench.Thresholds{FailOnLeak: true, AllowUntested: []string{"per-hour"}}, untested, nil},
		{"not reached, another allowed", bench.Thresholds{FailOnLeak: true, AllowUntested: []string{"per-second"}}, untested,
			[]string{"FailOnLeak: not reached"}},
		{"not reached, every one allowed", bench.Thresholds{FailOnLeak: true, AllowNoVerdict: true}, untested, nil},
		{"no verdict, allowed by name", bench.Thresholds{FailOnLeak: true, AllowUntested: []string{"0 per 0s"}}, none, nil},
		{"shared, allowed by name", bench.Thresholds{FailOnLeak: true, AllowUntested: []string{"0 per 0s"}}, shared,
			[]string{"FailOnLeak: no verdict: the gateway seems to share one limit"}},
		{"under, none denied", bench.Thresholds{FailOnUnder: new(0.0)}, none, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.th.Validate(); err != nil {
				t.Fatal(err)
			}
			crossed := tc.th.Crossed(audited(tc.l))
			if len(crossed) != len(tc.want) {
				t.Fatalf("crossed %v, want %q", crossed, tc.want)
			}
			for i, w := range tc.want {
				if got := crossed[i].Error(); !strings.Contains(got, w) {
					t.Errorf("crossed %q, want %q", got, w)
				}
			}
		})
	}
	for _, th := range []bench.Thresholds{{AllowNoVerdict: true}, {FailOnUnder: new(1.5)}, {FailOnUnder: new(-0.1)},
		{AllowUntested: []string{"per-hour"}}} {
		if err := th.Validate(); err == nil {
			t.Errorf("%+v passed Validate", th)
		}
	}
	th := bench.Thresholds{FailOnLeak: true, AllowUntested: []string{"per-hour", "per-day"}}
	if err := th.ValidateNames([]string{"per-second", "per-hour"}); err == nil ||
		err.Error() != `AllowUntested "per-day" is not a limit the audit judges (its limits: per-second, per-hour)` {
		t.Errorf("ValidateNames: %v", err)
	}
	if err := th.ValidateNames([]string{"per-day", "per-hour"}); err != nil {
		t.Errorf("ValidateNames: %v", err)
	}
}

// TestFailOnLeakWords: --fail-on-leak speaks of a false Retry-After and
// wrong rate-limit headers in bench http's words, and of a false
// duration_until_reset and wrong current_limit or limit_remaining in a
// rate limit service's (bench rls), never of HTTP's.
func TestFailOnLeakWords(t *testing.T) {
	honest := false
	l := audit.LimitAudit{ID: "user={consumer}", Verdict: audit.Held, RetryAfter: audit.RetryAfterAudit{Probes: 3, Early: 3, Honest: &honest},
		Headers: audit.HeadersAudit{Checked: 60, Violations: 60, Example: "consumer-0 advertised a limit of 12 (expected limit 6)"}}
	for command, want := range map[string][]string{
		"bench_http": {"Retry-After was false: 3 of 3 probes", "60 responses with wrong rate-limit headers (consumer-0 advertised"},
		"bench_rls":  {"duration_until_reset was false: 3 of 3 probes", "60 answers with wrong current_limit or limit_remaining (consumer-0 advertised"},
	} {
		r := bench.Result{Command: command, Requests: 60, Audit: &audit.Audit{Verdict: audit.Held, Limits: []audit.LimitAudit{l}}}
		var msgs []string
		for _, e := range (bench.Thresholds{FailOnLeak: true}).Crossed(r) {
			msgs = append(msgs, e.Error())
		}
		got := strings.Join(msgs, "; ")
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q, want %q", command, got, w)
			}
		}
		if command == "bench_rls" && (strings.Contains(got, "Retry-After") || strings.Contains(got, "header")) {
			t.Errorf("%s: %q speaks of HTTP", command, got)
		}
	}
}

// TestInFlightThresholds: FailOnLeak fails an in-flight audit that is not
// held (but for AllowNoVerdict's untested ones), FailOnUnder a share of
// wrongful denials above it, and an in-flight audit alone is an audit:
// no "there is no audit".
func TestInFlightThresholds(t *testing.T) {
	under := 0.05
	run := func(v audit.Verdict, share float64) bench.Result {
		return bench.Result{Requests: 100, InFlightAudit: &audit.InFlightAudit{Verdict: v, Reasons: []string{"why"}, Limit: 5,
			Denied: 40, DenialsJudged: 40, UnderAdmitted: int64(share * 40), UnderAdmittedShare: share}}
	}
	for _, tc := range []struct {
		name string
		th   bench.Thresholds
		r    bench.Result
		want []string
	}{
		{"held", bench.Thresholds{FailOnLeak: true, FailOnUnder: &under}, run(audit.Held, 0.025), nil},
		{"leaked", bench.Thresholds{FailOnLeak: true}, run(audit.Leaked, 0), []string{"FailOnLeak"}},
		{"not reached", bench.Thresholds{FailOnLeak: true}, run(audit.NotReached, 0), []string{"FailOnLeak"}},
		{"not reached allowed", bench.Thresholds{FailOnLeak: true, AllowNoVerdict: true}, run(audit.NotReached, 0), nil},
		{"under", bench.Thresholds{FailOnUnder: &under}, run(audit.Held, 0.1), []string{"FailOnUnder"}},
		{"leaked unchecked", bench.Thresholds{}, run(audit.Leaked, 0.5), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range tc.th.Crossed(tc.r) {
				got = append(got, e.Field)
				if !strings.Contains(e.Reason, "in flight") {
					t.Errorf("%s%s: does not say it is the in-flight audit", e.Field, e.Reason)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("crossed %v, want %v", got, tc.want)
			}
		})
	}
}
