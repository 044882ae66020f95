package reports_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/reports"
)

// fixedBench is an audited bench http run of 100 requests to two
// consumers, as a run could make it: latencies of the responses apart
// from the time the failed connections took to fail.
func fixedBench(status map[string]int64, errors int64, a *audit.Audit) bench.Result {
	var responses int64
	for _, n := range status {
		responses += n
	}
	r := bench.Result{Command: "bench_http", Target: "http://127.0.0.1:8080/",
		Config: bench.Settings{Model: "open", Method: "GET", RatePerSec: 40, Connections: 10, DurationMillis: 2500,
			Consumers: 2, ConsumerHeader: "X-Consumer-Id", Threads: 2, TimeoutMillis: 10000, Shards: 1},
		StartedUnixMillis: 1796243459001, Requests: responses + errors, DurationSeconds: 2.5, ThroughputRPS: float64(responses+errors) / 2.5,
		StatusCounts: status, Errors: errors, ErrorKinds: map[string]bench.ErrorKind{}, Bytes: 4200,
		LatencyMicros: hdr.Percentiles{P50: 910, P90: 1400, P95: 1650, P99: 3100, P999: 3100, Max: 3100, Count: responses},
		SendLagMicros: hdr.Percentiles{P50: 40, P90: 90, P95: 120, P99: 700, P999: 700, Max: 700, Count: responses + errors},
		Timeline:      bench.Timeline{IntervalMillis: 1000, Intervals: []bench.Interval{}}, Histograms: map[string]string{}, Audit: a}
	for code, n := range status {
		p := hdr.Percentiles{P50: 900, P90: 1400, P95: 1600, P99: 3100, P999: 3100, Max: 3100, Count: n}
		switch code[0] {
		case '2':
			r.Latency2xxMicros = p
		case '4':
			if code == "429" {
				r.Latency429Micros = p
				continue
			}
			r.LatencyOtherMicros = p
		default:
			r.LatencyOtherMicros = p
		}
	}
	if errors > 0 {
		r.ErrorKinds["timeout"] = bench.ErrorKind{Count: errors, First: "read tcp 127.0.0.1:50312->127.0.0.1:8080: i/o timeout"}
		r.LatencyErrorMicros = hdr.Percentiles{P50: 10001000, P90: 10003000, P95: 10003000, P99: 10003000, P999: 10003000, Max: 10003000, Count: errors}
	}
	return r
}

// limit is the audit of 5 per second under the sliding-window rule with
// its figures for a run of two consumers.
func limit(v audit.Verdict, reasons ...string) audit.LimitAudit {
	honest := true
	return audit.LimitAudit{Limit: 5, WindowMillis: 1000, Rule: "at most 5 in any 1s span", Verdict: v, Reasons: append([]string{}, reasons...),
		Consumers: 2, WorstConsumer: "consumer-0", WorstWindowAdmitted: 5, WorstSpanMillis: 999, WorstSpanAllowed: 5, MostInWindow: 5, FullAt: 5, FullSpanMillis: 1000,
		Denials: 66, DenialsAttributed: 38, DenialsJudged: 40, DenialsUnjudged: 26,
		UnjudgedReason: "they met a limit whose look-back reaches before the run's start, where what it counted is unknown: " +
			"5/1s (a look-back of 1s; 26 denials); in a run longer than 1s, those sent after the first 1s are judged",
		WorstConsumers: []audit.ConsumerAudit{
			{Consumer: "consumer-0", Admitted: 15, Denied: 33, Failed: 2},
			{Consumer: "consumer-1", Admitted: 15, Denied: 33, Failed: 2},
		},
		RetryAfter: audit.RetryAfterAudit{Probes: 2, Honest: &honest}, Headers: audit.HeadersAudit{Checked: 96}}
}

func TestBenchGolden(t *testing.T) {
	under := limit(audit.Held)
	under.UnderAdmitted, under.UnderAdmittedShare, under.WorstUnderConsumer, under.WorstUnderAdmitted = 12, 0.3, "consumer-1", 7
	under.WorstConsumers[0].UnderAdmitted, under.WorstConsumers[1].UnderAdmitted = 5, 7
	under.WorstConsumers[0], under.WorstConsumers[1] = under.WorstConsumers[1], under.WorstConsumers[0]
	leak := limit(audit.Leaked, "consumer-1 got 9 through in 999ms where 5 were allowed (at most 5 in any 1s span)")
	leak.WorstConsumer, leak.WorstWindowAdmitted, leak.OverAdmitted = "consumer-1", 9, 4
	leak.WorstConsumers[1].OverAdmitted, leak.WorstConsumers[1].Admitted = 4, 19
	leak.WorstConsumers[0], leak.WorstConsumers[1] = leak.WorstConsumers[1], leak.WorstConsumers[0]
	refused := []string{"most responses, 100 of 100, were neither 2xx nor 429 (400 × 100): the gateway turned the requests away for something other than its limit",
		"2 of the 2 consumers got no 2xx, such as consumer-0 (400 × 50): nothing shows what their limit admits"}
	none := limit(audit.NoVerdict, refused...)
	none.WorstWindowAdmitted, none.MostInWindow, none.Denials, none.DenialsAttributed, none.DenialsJudged = 0, 0, 0, 0, 0
	none.DenialsUnjudged, none.UnjudgedReason = 0, ""
	none.WorstConsumers = []audit.ConsumerAudit{{Consumer: "consumer-0", Failed: 50}, {Consumer: "consumer-1", Failed: 50}}
	none.RetryAfter = audit.RetryAfterAudit{Skipped: "no consumer was denied with a Retry-After, in the run or when asked again after it"}
	none.Headers = audit.HeadersAudit{}
	audited := func(v audit.Verdict, reasons []string, l audit.LimitAudit) *audit.Audit {
		return &audit.Audit{Verdict: v, Reasons: append([]string{}, reasons...), Samples: 100, Limits: []audit.LimitAudit{l}}
	}
	for _, tc := range []struct {
		name string
		r    bench.Result
	}{
		{"bench_held", fixedBench(map[string]int64{"200": 30, "429": 66, "503": 2}, 2, audited(audit.Held, nil, under))},
		{"bench_leaked", fixedBench(map[string]int64{"200": 34, "429": 62, "503": 2}, 2, audited(audit.Leaked, leak.Reasons, leak))},
		{"bench_no_verdict", fixedBench(map[string]int64{"400": 100}, 0, audited(audit.NoVerdict, refused, none))},
		{"bench_not_reached", fixedBench(map[string]int64{"200": 98}, 2, audited(audit.NotReached, []string{"4 of 5 in 1s: not tested"}, notReached()))},
		{"bench_rules", fixedBench(map[string]int64{"200": 30, "429": 66, "503": 2}, 2, rulesAudit())},
		{"bench_rls", fixedRLS(audited(audit.Held, nil, under))},
		{"bench_in_flight_leaked", inFlightBench(nil, leakedInFlight())},
		{"bench_in_flight_and_limit", inFlightBench(audited(audit.Held, nil, under), heldInFlight())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			goldens(t, tc.name, func(w io.Writer, f reports.Format) error {
				return reports.BenchHTTP(w, tc.r, f, reports.Options{Color: false})
			})
		})
	}
}

// fixedRLS is an audited bench rls run of the calls fixedBench makes:
// OK counted as 2xx, OVER_LIMIT as 429, one descriptor per consumer.
func fixedRLS(a *audit.Audit) bench.Result {
	r := fixedBench(map[string]int64{"200": 30, "429": 66}, 0, a)
	r.Command, r.Target = "bench_rls", "127.0.0.1:8081"
	r.Config.Method, r.Config.ConsumerHeader = "ShouldRateLimit", ""
	r.Config.Domain, r.Config.Descriptors = "edge", []string{"user={consumer}"}
	r.Config.IdentityIn = []string{"descriptor user={consumer}"}
	a.Limits[0].ID, a.Limits[0].Descriptor = "user={consumer}", "user={consumer}"
	return r
}

// notReached is the audit of a limit the load never pushed to its cap.
func notReached() audit.LimitAudit {
	l := limit(audit.NotReached, "4 of 5 in 1s: not tested")
	l.WorstWindowAdmitted, l.MostInWindow, l.Denials, l.DenialsAttributed, l.DenialsJudged, l.DenialsUnjudged, l.UnjudgedReason = 4, 4, 0, 0, 0, 0, ""
	l.WorstConsumers = []audit.ConsumerAudit{{Consumer: "consumer-0", Admitted: 49}, {Consumer: "consumer-1", Admitted: 49}}
	l.RetryAfter = audit.RetryAfterAudit{Skipped: "no consumer was denied with a Retry-After, in the run or when asked again after it"}
	return l
}

// rulesAudit is an audit by a rules file: a limit per consumer that held,
// a stricter one on /search that leaked, one per hour that the load never
// reached and the gateway never advertised, and a shadow limit not judged.
func rulesAudit() *audit.Audit {
	perSecond := limit(audit.Held)
	perSecond.ID, perSecond.Descriptor, perSecond.Requests, perSecond.Admitted = "per-second", "header:X-Consumer-Id", 98, 30
	perSecond.DenialsJudged, perSecond.DenialsElsewhere, perSecond.DenialsAttributed, perSecond.DenialsUnjudged = 60, 22, 38, 6
	perSecond.UnjudgedReason = "they met a limit whose look-back reaches before the run's start, where what it counted is unknown: " +
		"per-hour (a look-back of 1h; 6 denials); in a run longer than 1h, those sent after the first 1h are judged"
	never := "never advertised it: 96 responses to its requests named per-second and search in RateLimit-Policy, and never it " +
		"(by name, or by quota and window): a strong sign that the gateway leaves it out"
	perHour := limit(audit.NotReached, "30 of 100000 in 1h: not tested", "the gateway "+never)
	perHour.ID, perHour.Descriptor, perHour.Requests, perHour.Admitted, perHour.Limit, perHour.WindowMillis = "per-hour", "header:X-Consumer-Id", 98, 30, 100000, 3600000
	perHour.Rule, perHour.MostInWindow, perHour.WorstWindowAdmitted, perHour.WorstSpanMillis, perHour.WorstSpanAllowed =
		"at most 100000 in any 1h0m0s span", 30, 30, 3599999, 100000
	perHour.FullAt, perHour.FullSpanMillis = 100000, 3600000
	perHour.DenialsAttributed, perHour.DenialsJudged, perHour.DenialsElsewhere, perHour.DenialsUnjudged, perHour.UnjudgedReason = 0, 66, 66, 0, ""
	perHour.Headers = audit.HeadersAudit{NeverAdvertised: never}
	search := limit(audit.Leaked, "consumer-1 got 4 through in 999ms where 2 were allowed (at most 2 in any 1s span)")
	search.ID, search.Descriptor, search.Requests, search.Admitted = "search", "header:X-Consumer-Id > path=/search", 49, 16
	search.Limit, search.Rule, search.WorstConsumer, search.WorstWindowAdmitted, search.WorstSpanAllowed, search.OverAdmitted =
		2, "at most 2 in any 1s span", "consumer-1", 4, 2, 2
	trial := audit.LimitAudit{ID: "trial", Descriptor: "header:X-Plan=trial", Shadow: true, Requests: 49, Admitted: 15, Limit: 1,
		WindowMillis: 1000, Rule: "at most 1 in any 1s span", Verdict: audit.NotJudged,
		Reasons:        []string{"shadow: counted by the gateway and never enforced, so never judged as a leak of it"},
		WorstConsumers: []audit.ConsumerAudit{}}
	search.DenialsAttributed, search.DenialsJudged, search.DenialsUnjudged, search.UnjudgedReason, search.MostInWindow = 4, 40, 0, "", 4
	search.FullAt = 2
	search.Headers.Violations, search.Headers.Example = 2, "consumer-1 advertised 3 remaining (expected limit 2)"
	return &audit.Audit{Verdict: audit.Leaked, Reasons: []string{"search: " + search.Reasons[0]}, Samples: 98,
		Limits: []audit.LimitAudit{perSecond, search, perHour, trial}}
}

// TestAuditHeadline: the headline of an audit of several limits says the
// verdict they share, or counts them; never held when one went untested.
func TestAuditHeadline(t *testing.T) {
	of := func(vs ...audit.Verdict) string {
		a := &audit.Audit{Verdict: audit.Held}
		for _, v := range vs {
			a.Limits = append(a.Limits, audit.LimitAudit{ID: "x", Verdict: v, Limit: 5, WindowMillis: 1000})
			if v == audit.NotReached {
				a.Verdict = v
			}
		}
		var b strings.Builder
		if err := reports.BenchHTTP(&b, fixedBench(map[string]int64{"200": 5}, 0, a), reports.Markdown, reports.Options{}); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(line, "- Audit of ") {
				return line
			}
		}
		return ""
	}
	for _, tc := range []struct {
		verdicts []audit.Verdict
		want     string
	}{
		{[]audit.Verdict{audit.Held, audit.Held, audit.Held}, "- Audit of 3 limits: HELD."},
		{[]audit.Verdict{audit.Held, audit.Held, audit.Held, audit.NotReached}, "- Audit of 4 limits: 3 held, 1 not reached."},
		{[]audit.Verdict{audit.Held, audit.NotJudged}, "- Audit of 2 limits: 1 held, 1 not judged."},
		{[]audit.Verdict{audit.NotReached, audit.NotReached}, "- Audit of 2 limits: NOT REACHED."},
	} {
		if got := of(tc.verdicts...); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.verdicts, got, tc.want)
		}
	}
}

// TestBenchProgressWords: the live line speaks of 429 and Retry-After for
// bench http, of OVER_LIMIT and duration_until_reset for bench rls.
func TestBenchProgressWords(t *testing.T) {
	run := bench.Progress{Phase: "run", Elapsed: 3 * time.Second, Done: 300, RatePerSec: 100, P99Micros: 1500, LimitedShare: 0.25}
	probes := bench.Progress{Phase: "probes", ProbesLeft: 4 * time.Second}
	for _, tc := range []struct {
		w          bench.Words
		run, probe string
	}{
		{bench.HTTPWords(), "3s  done 300  100/s  p99 1.5ms  429 25.0%", "probing Retry-After: 4s left, --no-probes skips this"},
		{bench.RLSWords(), "3s  done 300  100/s  p99 1.5ms  OVER_LIMIT 25.0%", "probing duration_until_reset: 4s left, --no-probes skips this"},
	} {
		if got := reports.BenchProgress(run, tc.w); got != tc.run {
			t.Errorf("run: %q, want %q", got, tc.run)
		}
		if got := reports.BenchProgress(probes, tc.w); got != tc.probe {
			t.Errorf("probes: %q, want %q", got, tc.probe)
		}
	}
}

// TestBenchAuditHints: the audit's hints follow its notes, one line each,
// in the terminal and in markdown.
func TestBenchAuditHints(t *testing.T) {
	r := fixedBench(map[string]int64{"200": 30, "429": 66}, 0, &audit.Audit{Verdict: audit.Held, Samples: 96, Limits: []audit.LimitAudit{limit(audit.Held)}})
	hint := "every request sent query parameter key as abc, so the 2 consumers met by-key on one counter; the identities went in header " +
		"X-Consumer-Id (--consumer-header): put {consumer} in the URL: http://127.0.0.1:8080/?key={consumer}"
	r.AuditHints = []string{hint}
	for _, f := range []reports.Format{reports.Table, reports.Markdown} {
		var b strings.Builder
		if err := reports.BenchHTTP(&b, r, f, reports.Options{}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "Hint: "+hint+".\n") || strings.Index(b.String(), "Hint:") < strings.Index(b.String(), "Headers:") {
			t.Errorf("%s: no hint after the audit's notes:\n%s", f, b.String())
		}
	}
}

// inFlightBench is a bench http run with an in-flight audit, and a, the
// audit of its rate limits (nil: none).
func inFlightBench(a *audit.Audit, f audit.InFlightAudit) bench.Result {
	r := fixedBench(map[string]int64{"200": 30, "429": 66}, 0, a)
	r.InFlightAudit = &f
	return r
}

// heldInFlight is an in-flight audit of 5 at once that held, with a
// denial or two at the edge of the under-admission judged.
func heldInFlight() audit.InFlightAudit {
	return audit.InFlightAudit{Verdict: audit.Held, Reasons: []string{}, Limit: 5, HoldMillis: 200, Requests: 96, Admitted: 30, Denied: 66,
		Consumers: 2, MostSurelyHeld: 5, WorstConsumer: "consumer-0",
		Example: []audit.Flight{{SentMicros: 100, DoneMicros: 207_300}, {SentMicros: 40_300, DoneMicros: 242_100},
			{SentMicros: 80_800, DoneMicros: 282_400}, {SentMicros: 120_900, DoneMicros: 322_400}, {SentMicros: 160_100, DoneMicros: 361_900}},
		DenialsJudged: 66}
}

// leakedInFlight is an in-flight audit of 4 at once that caught six held
// at once, and denials made with slots free.
func leakedInFlight() audit.InFlightAudit {
	f := heldInFlight()
	f.Verdict, f.Limit, f.MostSurelyHeld = audit.Leaked, 4, 6
	f.Example = append(f.Example, audit.Flight{SentMicros: 170_000, DoneMicros: 371_000})
	f.Reasons = []string{"consumer-0 had 6 requests surely held at once where 4 are allowed: 0.1→207.3 ms, 40.3→242.1 ms, 80.8→282.4 ms, " +
		"120.9→322.4 ms, 160.1→361.9 ms, 170.0→371.0 ms"}
	f.UnderAdmitted, f.UnderAdmittedShare, f.WorstUnderConsumer, f.WorstUnderAdmitted = 3, 3.0/66, "consumer-1", 2
	f.UnderExample, f.UnderExampleHeld = &audit.Flight{SentMicros: 400_000, DoneMicros: 401_200}, 2
	return f
}
