package bench

import (
	"cmp"
	"context"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
)

// sample is one response of a consumer, kept for the audit.
type sample struct {
	consumer   int32
	status     int16
	sent, done time.Duration // since the measured run began
	retryAfter time.Duration // -1 when absent
	limit      int64         // advertised limit; -1 when absent
	remaining  int64         // advertised remaining; -1 when absent
	reset      time.Duration // advertised time until the quota resets; -1 when absent
}

func (s sample) ok() bool { return s.status >= 200 && s.status < 300 }

// maxSamples bounds what the audit keeps.
const maxSamples = 5_000_000

// Audit is what the audit found. It runs when ExpectLimit is set.
type Audit struct {
	Limit        int64 `json:"limit"`
	WindowMillis int64 `json:"window_ms"`
	// Algorithm is the algorithm the endpoint was held to (--expect-algorithm);
	// empty for the sliding-window rule of --expect-limit alone. Rule says
	// in words what its guarantee allows.
	Algorithm string `json:"algorithm"`
	Rule      string `json:"rule"`
	// Samples is the number of responses the audit judged.
	Samples int64 `json:"samples"`
	// CappedFromMillis, when not null, is when the audit stopped keeping
	// responses (it keeps at most 5,000,000), since the measured run began:
	// what came after was not judged.
	CappedFromMillis *int64 `json:"capped_from_ms"`
	// WorstConsumer had the span of time in which it was admitted the most
	// beyond what the rule allows: WorstWindowAdmitted successes in
	// WorstSpanMillis, where WorstSpanAllowed were allowed; OverAdmitted is
	// the difference when positive. Only responses whose whole flight (sent
	// to received) lies inside the span count, so a latency can never make
	// an honest limiter look leaky. Under the sliding-window rule the span
	// is a window less a millisecond, for limiters that keep whole
	// milliseconds.
	WorstConsumer       string `json:"worst_consumer"`
	WorstWindowAdmitted int64  `json:"worst_window_admitted"`
	WorstSpanMillis     int64  `json:"worst_span_ms"`
	WorstSpanAllowed    int64  `json:"worst_span_allowed"`
	OverAdmitted        int64  `json:"over_admitted"`
	RetryAfter          struct {
		// Probes is how many denied consumers were asked again around their
		// advertised Retry-After.
		Probes int `json:"probes"`
		// MaxErrorMillis is how long after the advertised time the worst
		// probe was admitted, when it was denied at its first try after it
		// (0 when every probe was admitted at its first try).
		MaxErrorMillis int64 `json:"max_error_ms"`
		// Honest is false when a consumer was still denied after its
		// Retry-After, or admitted a whole second before it; null when no
		// probe was made (Skipped says why).
		Honest *bool `json:"honest"`
		// Skipped says why probes could not be made, if so.
		Skipped string `json:"skipped,omitempty"`
	} `json:"retry_after"`
	Headers struct {
		// Checked is the number of responses whose rate-limit headers were read.
		Checked int64 `json:"checked"`
		// Violations counts advertised limits other than the expected one,
		// remaining counts above the limit, remaining counts that fall by
		// more than the admissions in between, and successes right after a
		// response that said 0 remaining (see remainingChecks).
		Violations int64 `json:"violations"`
		// Example describes the first violation.
		Example string `json:"example,omitempty"`
		// Partial, when set, says why the checks that need every response
		// of a consumer (how remaining falls, and remaining 0) were not made:
		// other load machines send the same consumers. report merge makes
		// them over every machine's responses.
		Partial string `json:"partial,omitempty"`
	} `json:"headers"`
}

// sharedNote says why a shard of shared consumers cannot judge alone what
// needs all of a consumer's responses.
const sharedNote = "other load machines send the same consumers (--shared-consumers): report merge judges this over all of them"

// newSample reads the rate-limit fields of a response.
func newSample(consumer int, sent, done time.Duration, status int, f *limitFields) sample {
	s := sample{consumer: int32(consumer), sent: sent, done: done, status: int16(status), retryAfter: -1, limit: -1, remaining: -1, reset: -1}
	if f.retryAfter != "" {
		if n, err := strconv.ParseFloat(f.retryAfter, 64); err == nil && n >= 0 && n < 1e9 {
			s.retryAfter = time.Duration(n * float64(time.Second))
		} else if t, err := http.ParseTime(f.retryAfter); err == nil {
			s.retryAfter = max(time.Until(t), 0)
		}
	}
	if q, ok := sfParam(f.policy, "q"); ok {
		s.limit = q
	} else if n, err := strconv.ParseInt(cmp.Or(f.limit, f.xLimit), 10, 64); err == nil {
		s.limit = n
	}
	if r, ok := sfParam(f.rateLimit, "r"); ok {
		s.remaining = r
	} else if n, err := strconv.ParseInt(cmp.Or(f.remaining, f.xRemaining), 10, 64); err == nil {
		s.remaining = n
	}
	if t, ok := sfParam(f.rateLimit, "t"); ok {
		s.reset = resetIn(t)
	} else if n, err := strconv.ParseInt(cmp.Or(f.reset, f.xReset), 10, 64); err == nil {
		if n > 1e9 { // an epoch time, as some X-RateLimit-Reset fields send
			n -= time.Now().Unix()
		}
		s.reset = resetIn(max(n, 0))
	}
	return s
}

// expectation is what the audit holds an endpoint to.
type expectation struct {
	policy algorithms.Policy
	// algorithm is the registry name of the algorithm the endpoint claims;
	// empty for the sliding-window rule.
	algorithm string
	guarantee algorithms.Guarantee
}

// newExpectation makes the expectation of limit per window under
// algorithm ("" for the sliding-window rule).
func newExpectation(limit int64, window time.Duration, algorithm string) (expectation, error) {
	e := expectation{policy: algorithms.Policy{Limit: limit, Window: window}, algorithm: algorithm, guarantee: algorithms.SlidingWindow}
	if algorithm != "" {
		info, ok := algorithms.Lookup(algorithm)
		if !ok || !info.Algorithm {
			return e, field.Errorf("ExpectAlgorithm", "%q: want one of %s", algorithm, strings.Join(algorithms.Algorithms(), ", "))
		}
		e.guarantee = info.Guarantee
	}
	return e, nil
}

// audit judges the samples against the expectation. horizon, when not
// negative, is when samples started to be dropped: checks that need every
// response up to some time judge only what ended before it.
//
// partial says the samples are one machine's share of consumers that others
// send too: every admission the run saw is real, so the admission count
// stays sound, but the remaining checks, which need every response of a
// consumer, are not made.
func audit(samples []sample, exp expectation, consumers int, horizon time.Duration, partial bool) Audit {
	limit, window := exp.policy.Limit, exp.policy.Window
	a := Audit{Limit: limit, WindowMillis: window.Milliseconds(), Samples: int64(len(samples)),
		Algorithm: exp.algorithm, Rule: exp.guarantee.Rule(exp.policy)}
	if horizon >= 0 {
		ms := horizon.Milliseconds()
		a.CappedFromMillis = &ms
	}
	per := make([][]sample, consumers)
	for _, s := range samples {
		per[s.consumer] = append(per[s.consumer], s)
		if s.limit >= 0 || s.remaining >= 0 {
			a.Headers.Checked++
			bad := ""
			switch {
			case s.limit >= 0 && s.limit != limit:
				bad = "advertised a limit of " + strconv.FormatInt(s.limit, 10)
			case s.remaining > limit:
				bad = "advertised " + strconv.FormatInt(s.remaining, 10) + " remaining"
			}
			if bad != "" {
				a.Headers.Violations++
				if a.Headers.Example == "" {
					a.Headers.Example = consumerName(s.consumer) + " " + bad + " (expected limit " + strconv.FormatInt(limit, 10) + ")"
				}
			}
		}
	}
	for c, ss := range per {
		var ok []sample
		for _, s := range ss {
			if s.ok() {
				ok = append(ok, s)
			}
		}
		w := worstSpan(ok, exp)
		if a.WorstConsumer == "" || w.admitted-w.allowed > a.WorstWindowAdmitted-a.WorstSpanAllowed {
			a.WorstConsumer, a.WorstWindowAdmitted, a.WorstSpanAllowed = consumerName(int32(c)), w.admitted, w.allowed
			a.WorstSpanMillis = w.span.Milliseconds()
		}
		if !partial {
			remainingChecks(ok, window, horizon, exp.guarantee == algorithms.SlidingWindow, &a)
		}
	}
	if a.WorstConsumer == "" {
		a.WorstSpanMillis, a.WorstSpanAllowed = (window - time.Millisecond).Milliseconds(), limit
	}
	if partial {
		a.Headers.Partial = sharedNote
	}
	a.OverAdmitted = max(a.WorstWindowAdmitted-a.WorstSpanAllowed, 0)
	return a
}

// span is a stretch of time and what one consumer was admitted in it.
type span struct {
	span              time.Duration
	admitted, allowed int64
}

// worstSpan finds the span of time in which ok (a consumer's successes)
// went furthest beyond what the expectation allows.
func worstSpan(ok []sample, exp expectation) span {
	p, g := exp.policy, exp.guarantee
	switch g {
	case algorithms.SlidingWindow:
		s := p.Window - time.Millisecond
		return span{span: s, admitted: worstWindow(ok, s), allowed: p.Limit}
	case algorithms.AlignedWindows, algorithms.ExpiryWindows:
		// Where the windows lie is the endpoint's business: any span may
		// cross k edges. Spans of 1, 2 and 3 windows less a millisecond.
		var worst span
		for k := range 3 {
			s := time.Duration(k+1)*p.Window - time.Millisecond
			w := span{span: s, admitted: worstWindow(ok, s), allowed: g.MaxIn(p, s)}
			if k == 0 || w.admitted-w.allowed > worst.admitted-worst.allowed {
				worst = w
			}
		}
		return worst
	}
	// A burst then a steady rate: the bound grows with the span. Every
	// span from one success's send to another's reply is weighed at once.
	return worstRamp(ok, p, g)
}

func consumerName(c int32) string { return "consumer-" + strconv.Itoa(int(c)) }

// worstWindow is the most successes whose whole flight lies inside one span
// [s, s+span) that starts at a success's send, in O(n log n): a sweep over
// the starts in send order, with the flights not yet passed counted by when
// they ended in a Fenwick tree.
func worstWindow(ok []sample, span time.Duration) int64 {
	if len(ok) == 0 {
		return 0
	}
	slices.SortFunc(ok, func(a, b sample) int { return cmpDur(a.sent, b.sent) })
	// Each flight's place among the flights ordered by end.
	byEnd := make([]int, len(ok))
	for i := range byEnd {
		byEnd[i] = i
	}
	slices.SortFunc(byEnd, func(i, j int) int { return cmpDur(ok[i].done, ok[j].done) })
	dones := make([]time.Duration, len(ok))
	ranks := make([]int, len(ok))
	for r, i := range byEnd {
		dones[r], ranks[i] = ok[i].done, r
	}
	tree := make([]int64, len(ok)+1) // counts the flights not yet passed, by place
	add := func(r int, v int64) {
		for r++; r < len(tree); r += r & -r {
			tree[r] += v
		}
	}
	below := func(n int) int64 { // flights not yet passed among the first n places
		var s int64
		for ; n > 0; n -= n & -n {
			s += tree[n]
		}
		return s
	}
	for _, r := range ranks {
		add(r, 1)
	}
	var worst int64
	for i, s := range ok {
		end := sort.Search(len(dones), func(k int) bool { return dones[k] >= s.sent+span })
		if n := below(end); n > worst {
			worst = n
		}
		add(ranks[i], -1) // the flights sent from here on only
	}
	return worst
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// remainingChecks judges a consumer's advertised remaining counts with rules
// that hold for any honest limiter (the second only for one that holds the
// sliding-window rule, zero set):
//
//   - remaining falls by at most one per request admitted in between: for
//     two successes a and b, b sent after a came back, remaining(a) -
//     remaining(b) is at most 1 plus the consumer's other successes whose
//     flights overlap a's and b's;
//   - remaining 0 is followed by a 429: a success b sent after a success a
//     that said 0 remaining breaks it when b came back before any slot could
//     have freed, both for a sliding window (a window after the earliest
//     success that could still be in it) and for a's own advertised reset
//     (less the second it may have been rounded up by). A token bucket's
//     slot may free a moment after it said 0, and a fixed window's edge may
//     come at any moment: for them 0 promises nothing.
//
// Only pairs whose second success ended before horizon (when not negative)
// are judged, so that no success in between can be missing. Each pair costs
// O(log n).
func remainingChecks(ok []sample, window, horizon time.Duration, zero bool, a *Audit) {
	var ss []sample
	for _, s := range ok {
		if s.remaining >= 0 {
			ss = append(ss, s)
		}
	}
	if len(ss) < 2 {
		return
	}
	slices.SortFunc(ss, func(a, b sample) int { return cmpDur(a.sent, b.sent) })
	sents := make([]time.Duration, len(ss))
	dones := make([]time.Duration, len(ss))
	for i, s := range ss {
		sents[i], dones[i] = s.sent, s.done
	}
	slices.Sort(dones)
	// countBelow counts the values of sorted below v (or up to v, with inclusive).
	countBelow := func(sorted []time.Duration, v time.Duration, inclusive bool) int64 {
		return int64(sort.Search(len(sorted), func(i int) bool {
			if inclusive {
				return sorted[i] > v
			}
			return sorted[i] >= v
		}))
	}
	violate := func(s sample, what string) {
		a.Headers.Violations++
		if a.Headers.Example == "" {
			a.Headers.Example = consumerName(s.consumer) + " " + what
		}
	}
	oldest := 0 // the first success, in send order, that ended after x.sent - window
	for i, x := range ss {
		for oldest < len(ss) && ss[oldest].done <= x.sent-window {
			oldest++
		}
		// y: the first success sent after x came back.
		j := sort.Search(len(sents), func(k int) bool { return sents[k] >= x.done })
		if j == len(ss) {
			continue
		}
		if j <= i { // x.done <= x.sent: a flight of no length
			j = i + 1
		}
		y := ss[j]
		if horizon >= 0 && y.done >= horizon {
			continue
		}
		// Successes other than x and y whose flights overlap [x.sent, y.done]:
		// those sent before y.done, less those that ended by x.sent.
		between := countBelow(sents, y.done, false) - countBelow(dones, x.sent, true) - 2
		if x.remaining-y.remaining > 1+between {
			violate(y, "remaining fell from "+strconv.FormatInt(x.remaining, 10)+" to "+strconv.FormatInt(y.remaining, 10)+
				" with "+strconv.FormatInt(between, 10)+" admissions in between")
		}
		if zero && x.remaining == 0 && x.reset >= 0 {
			// The earliest success that may still count in x's window frees
			// its slot a window after it was sent, less a millisecond for
			// limiters that keep whole milliseconds.
			earliest := time.Duration(math.MaxInt64)
			if oldest < len(ss) && ss[oldest].sent <= x.done {
				earliest = ss[oldest].sent + window - time.Millisecond
			}
			resetAt := x.sent + x.reset - time.Second
			if y.done < earliest && y.done < resetAt {
				violate(y, "was admitted right after a response that said 0 remaining")
			}
		}
	}
}

// prober is what the audit asks of the load engine: requests beyond the
// measured run, to the consumers it names. The audit chooses whom to ask
// and judges what came back; the engine sends.
type prober interface {
	// denials asks up to n of the run's own consumers, back to back, until
	// one is denied with a Retry-After, and returns those denials (at most
	// one per consumer).
	denials(ctx context.Context, n int, limit int64) []sample
	// retry asks each denied consumer again around its Retry-After, all at
	// once, and returns what it found, one per denial, in their order.
	retry(ctx context.Context, denials []sample) []retried
}

// retried is what asking a denied consumer again found.
type retried struct {
	// asked is false when ctx ended first: nothing was found.
	asked bool
	// early is set when it was admitted just before its Retry-After could
	// have freed a slot.
	early bool
	// admitted is set when it was admitted after its Retry-After (asked
	// again for at most 10 seconds); first when at the first try after it,
	// and late is how long after the advertised time that was.
	admitted, first bool
	late            time.Duration
}

// probeRetryAfter judges the endpoint's Retry-After: it has pr ask a few
// consumers whose last response was a 429 again around their advertised
// Retry-After (or, when no denial in the run can be trusted, first drive a
// few to a denial), and judges what came back.
func probeRetryAfter(ctx context.Context, pr prober, samples []sample, a *Audit) {
	picks := trustedDenials(samples)
	if len(picks) == 0 {
		// No denial in the run can be trusted (the limiter refills as it
		// goes): ask a few consumers until they are denied.
		picks = pr.denials(ctx, 3, a.Limit)
	}
	if len(picks) == 0 {
		if ctx.Err() == nil {
			a.RetryAfter.Skipped = "no consumer was denied with a Retry-After, in the run or when asked again after it"
		}
		return
	}
	picks = picks[:min(len(picks), 3)]
	const maxWait = 70 * time.Second
	for _, s := range picks {
		if s.retryAfter > maxWait {
			a.RetryAfter.Skipped = "Retry-After above 70 s: too long to wait for"
			return
		}
	}
	honest := true
	for _, r := range pr.retry(ctx, picks) {
		if !r.asked {
			continue
		}
		a.RetryAfter.Probes++
		switch {
		case r.early:
			honest = false
		case !r.admitted:
			honest = false
			a.RetryAfter.MaxErrorMillis = max(a.RetryAfter.MaxErrorMillis, (10 * time.Second).Milliseconds())
		case r.first:
			// Admitted at the first try after the advertised time: on time,
			// however late a busy client got round to asking.
		default:
			honest = false
			a.RetryAfter.MaxErrorMillis = max(a.RetryAfter.MaxErrorMillis, int64(math.Ceil(float64(r.late)/float64(time.Millisecond))))
		}
	}
	switch {
	case ctx.Err() != nil:
		a.RetryAfter.Skipped = "the probes were interrupted"
	case a.RetryAfter.Probes > 0:
		a.RetryAfter.Honest = &honest
	}
}

// trustedDenials are, per consumer, its last 429 with a Retry-After that
// was sent after every one of its successes had come back: a denial tells
// the truth about the consumer's state only if nothing was admitted after
// it. They come in the consumers' order.
func trustedDenials(samples []sample) []sample {
	lastOK := map[int32]time.Duration{}
	for _, s := range samples {
		if s.ok() {
			lastOK[s.consumer] = max(lastOK[s.consumer], s.done)
		}
	}
	last := map[int32]sample{}
	for _, s := range samples {
		if s.status != http.StatusTooManyRequests || s.retryAfter <= 0 || s.sent <= lastOK[s.consumer] {
			continue
		}
		if prev, ok := last[s.consumer]; !ok || s.done > prev.done {
			last[s.consumer] = s
		}
	}
	var picks []sample
	for _, s := range last {
		picks = append(picks, s)
	}
	sort.Slice(picks, func(i, j int) bool { return picks[i].consumer < picks[j].consumer })
	return picks
}
