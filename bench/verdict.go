package bench

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// judgeLimit judges the samples against one limit, the audit's unit: each
// consumer's requests apart (named by name), and then all of them taken
// together to tell a limit shared across identities. Every figure and the
// verdict come from the samples; the Retry-After probes, which send more,
// are added by the caller.
func judgeLimit(samples []sample, exp expectation, consumers int, cov coverage, name func(int32) string) LimitAudit {
	p := exp.policy
	l := LimitAudit{Limit: p.Limit, WindowMillis: p.Window.Milliseconds(), Algorithm: exp.algorithm,
		Rule: exp.rule(), Reasons: []string{}, WorstConsumers: []ConsumerAudit{}}
	per := make([][]sample, consumers)
	statuses := map[string]int64{}
	var answered, turnedAway int64
	for _, s := range samples {
		per[s.consumer] = append(per[s.consumer], s)
		if s.answered() {
			answered++
			statuses[strconv.Itoa(int(s.status))]++
			if !s.ok() && !s.denied() {
				turnedAway++
			}
		}
		checkAdvertised(s, p.Limit, exp.guarantee.Capacity(p), &l.Headers, name)
		if exp.refusedAtZero && s.denied() && !s.otherMayDeny && s.remaining > 0 {
			// Refused, and by this limit alone: nothing remained of it.
			l.Headers.Violations++
			if l.Headers.Example == "" {
				l.Headers.Example = name(s.consumer) + " was refused with " + strconv.FormatInt(s.remaining, 10) + " remaining"
			}
		}
	}
	lookback := exp.guarantee.Lookback(p)
	underJudged := cov.skipUnder == ""
	worst, worstOf := span{}, int32(-1)
	var noOK []int32 // consumers answered without a single 2xx
	underConsumers := 0
	for c, ss := range per {
		if len(ss) == 0 {
			continue
		}
		j := judgeConsumer(ss, exp, lookback, cov)
		if j.answered == 0 {
			continue
		}
		l.Consumers++
		if worstOf < 0 || j.worst.admitted-j.worst.allowed > worst.admitted-worst.allowed {
			worst, worstOf = j.worst, int32(c)
		}
		l.Denials += j.denied
		l.DenialsJudged += j.judged
		l.UnderAdmitted += j.under
		if j.under > 0 {
			underConsumers++
		}
		if j.under > l.WorstUnderAdmitted {
			l.WorstUnderConsumer, l.WorstUnderAdmitted = name(int32(c)), j.under
		}
		if j.admitted == 0 {
			noOK = append(noOK, int32(c))
		}
		if !cov.partial {
			counted := j.ok
			if exp.refusedMaySpend {
				counted = spentOrNot(ss)
			}
			remainingChecks(counted, p.Window, cov.horizon, exp.guarantee == algorithms.SlidingWindow, &l.Headers, name)
		}
		keepWorst(&l.WorstConsumers, ConsumerAudit{Admitted: j.admitted, Denied: j.denied, Failed: j.failed,
			OverAdmitted: max(j.worst.admitted-j.worst.allowed, 0), UnderAdmitted: j.under}, int32(c), name)
	}
	if worstOf >= 0 {
		l.WorstConsumer, l.WorstWindowAdmitted, l.WorstSpanAllowed = name(worstOf), worst.admitted, worst.allowed
		l.WorstSpanMillis = worst.span.Milliseconds()
	} else {
		l.WorstSpanMillis, l.WorstSpanAllowed = (p.Window - time.Millisecond).Milliseconds(), p.Limit
	}
	l.OverAdmitted = max(l.WorstWindowAdmitted-l.WorstSpanAllowed, 0)
	if cov.partial {
		l.Headers.Partial = sharedNote
	}
	if !underJudged {
		l.UnderSkipped = cov.skipUnder
	} else if l.DenialsJudged > 0 {
		l.UnderAdmittedShare = float64(l.UnderAdmitted) / float64(l.DenialsJudged)
	}
	// All the consumers taken as one: when that one holds the limit, and
	// its admissions account for what each consumer was denied below its
	// own, the gateway keys them all alike.
	if underJudged && underConsumers >= 2 {
		var ok []sample
		for _, s := range samples {
			if s.ok() {
				ok = append(ok, s)
			}
		}
		together := worstSpan(ok, exp)
		_, under := falseDenials(samples, exp.guarantee.Capacity(p), lookback, cov)
		l.SharedLimit = together.admitted <= together.allowed && 10*under <= l.UnderAdmitted
	}

	reasons := l.unjudgeable(seen{requests: len(samples), answered: answered, turnedAway: turnedAway, statuses: statuses, noOK: noOK},
		per, exp, name)
	switch {
	case l.OverAdmitted > 0:
		l.Verdict = Leaked
		l.Reasons = []string{fmt.Sprintf("%s got %d through in %s where %d were allowed (%s)", l.WorstConsumer,
			l.WorstWindowAdmitted, time.Duration(l.WorstSpanMillis)*time.Millisecond, l.WorstSpanAllowed, l.Rule)}
	case len(reasons) > 0:
		l.Verdict, l.Reasons = NoVerdict, reasons
	default:
		l.Verdict = Held
	}
	return l
}

// seen is what came back to a limit's requests, for the reasons of no
// verdict.
type seen struct {
	requests             int
	answered, turnedAway int64            // responses, and those neither 2xx nor 429
	statuses             map[string]int64 // responses by status
	noOK                 []int32          // consumers answered without a single 2xx
}

// unjudgeable says why the audit could not judge l, in words; none when
// it could. per holds each consumer's requests.
func (l *LimitAudit) unjudgeable(s seen, per [][]sample, exp expectation, name func(int32) string) []string {
	switch {
	case s.requests == 0:
		return []string{"no request was sent in the measured run"}
	case s.answered == 0:
		return []string{fmt.Sprintf("no request got a response (%d transport errors)", s.requests)}
	}
	var reasons []string
	if 2*s.turnedAway > s.answered {
		reasons = append(reasons, fmt.Sprintf("most responses, %d of %d, were neither 2xx nor 429 (%s): "+
			"the gateway turned the requests away for something other than its limit", s.turnedAway, s.answered,
			statusList(s.statuses, failed)))
	}
	if len(s.noOK) > 0 {
		first := s.noOK[0]
		statuses := map[string]int64{}
		for _, r := range per[first] {
			if r.answered() {
				statuses[strconv.Itoa(int(r.status))]++
			}
		}
		if len(s.noOK) == 1 {
			reasons = append(reasons, fmt.Sprintf("%s got no 2xx in its responses (%s): nothing shows what its limit admits",
				name(first), statusList(statuses, anyStatus)))
		} else {
			reasons = append(reasons, fmt.Sprintf("%d of the %d consumers got no 2xx, such as %s (%s): nothing shows what their limit admits",
				len(s.noOK), l.Consumers, name(first), statusList(statuses, anyStatus)))
		}
	}
	if l.Denials == 0 {
		if most := mostOffered(per, exp); most.admitted <= most.allowed {
			reasons = append(reasons, fmt.Sprintf("no request was denied, and no consumer sent more than the rule allows in any span "+
				"(at most %d in %s, where %d were allowed): the load never reached the limit",
				most.admitted, most.span, most.allowed))
		}
	}
	if l.SharedLimit {
		reasons = append(reasons, fmt.Sprintf("the gateway seems to share one limit across the identities sent: "+
			"%d of the %d denials judged would have been admitted had each of the %d consumers its own limit, "+
			"yet their admissions taken together never went over one consumer's", l.UnderAdmitted, l.DenialsJudged, l.Consumers))
	}
	return reasons
}

// judged is what one consumer's requests show.
type judged struct {
	ok []sample // its successes
	// answered counts its responses; admitted, denied and failed split
	// its requests into 2xx, 429 and the rest (transport errors included).
	answered, admitted, denied, failed int64
	// worst is the span in which it was admitted furthest beyond the rule.
	worst span
	// judged counts the denials judged for under-admission, under those
	// the rule would have admitted.
	judged, under int64
}

func judgeConsumer(ss []sample, exp expectation, lookback time.Duration, cov coverage) judged {
	var j judged
	for _, s := range ss {
		switch {
		case s.ok():
			j.ok = append(j.ok, s)
			j.admitted++
		case s.denied():
			j.denied++
		default:
			j.failed++
		}
		if s.answered() {
			j.answered++
		}
	}
	j.worst = worstSpan(j.ok, exp)
	if cov.skipUnder == "" {
		j.judged, j.under = falseDenials(ss, exp.guarantee.Capacity(exp.policy), lookback, cov)
	}
	return j
}

// falseDenials counts the denials among ss (one consumer's requests, or
// several consumers' taken as one) that can be judged, and those of them
// that the rule would surely have admitted.
//
// A denial's decision was made within its flight; the rule denies only
// when at least limit admissions were decided within its lookback before
// that decision (algorithms.Guarantee.Lookback). Any request but a 429
// (a 2xx, another status, a transport error) may have been admitted, and
// may lie in that span when its flight reaches into it: from a lookback
// before the denial was sent (a little more, for the scripts' whole
// milliseconds and clocks that tick at slightly different rates) to when
// it came back. Fewer than limit such requests, and the denial was false:
// at every instant its decision could have been made, the rule admitted
// it. Only denials whose span lies inside what the samples hold (cov) are
// judged, and none that another limit the request met may have denied
// (otherMayDeny). O(n log n).
func falseDenials(ss []sample, limit int64, lookback time.Duration, cov coverage) (judgedN, under int64) {
	eachDenial(ss, limit, lookback, cov, func(_ int, surely bool) {
		judgedN++
		if surely {
			under++
		}
	})
	return judgedN, under
}

// eachDenial calls f with each denial of ss that falseDenials judges: its
// index in ss, and whether the rule would surely have admitted it.
func eachDenial(ss []sample, limit int64, lookback time.Duration, cov coverage, f func(i int, surely bool)) {
	var sents, dones []time.Duration
	for _, s := range ss {
		if !s.denied() {
			sents = append(sents, s.sent)
			dones = append(dones, s.done)
		}
	}
	slices.Sort(sents)
	slices.Sort(dones)
	margin := time.Millisecond + lookback/500
	for i, d := range ss {
		if !d.denied() || d.otherMayDeny {
			continue
		}
		from := d.sent - lookback - margin
		if from < cov.from || (cov.horizon >= 0 && d.done >= cov.horizon) {
			continue
		}
		// Flights that reach into (from, d.done): those sent before it
		// ended, less those that ended by from.
		sentBefore := sort.Search(len(sents), func(i int) bool { return sents[i] >= d.done })
		endedBy := sort.Search(len(dones), func(i int) bool { return dones[i] > from })
		f(i, int64(sentBefore-endedBy) < limit)
	}
}

// mostOffered is the span in which a consumer sent the most beyond the
// rule, counting every request answered whose whole flight lies inside it:
// when even that is within the rule, no honest limiter had to deny any.
func mostOffered(per [][]sample, exp expectation) span {
	var most span
	found := false
	for _, ss := range per {
		var answered []sample
		for _, s := range ss {
			if s.answered() {
				answered = append(answered, s)
			}
		}
		if len(answered) == 0 {
			continue
		}
		if w := worstSpan(answered, exp); !found || w.admitted-w.allowed > most.admitted-most.allowed {
			most, found = w, true
		}
	}
	return most
}

// checkAdvertised checks the limit and remaining a response advertised
// against the expected limit, remaining up to most (a bucket's burst).
func checkAdvertised(s sample, limit, most int64, h *HeadersAudit, name func(int32) string) {
	if s.limit < 0 && s.remaining < 0 {
		return
	}
	h.Checked++
	bad := ""
	switch {
	case s.limit >= 0 && s.limit != limit:
		bad = "advertised a limit of " + strconv.FormatInt(s.limit, 10)
	case s.remaining > most:
		bad = "advertised " + strconv.FormatInt(s.remaining, 10) + " remaining"
	}
	if bad != "" {
		h.Violations++
		if h.Example == "" {
			h.Example = name(s.consumer) + " " + bad + " (expected limit " + strconv.FormatInt(limit, 10) + ")"
		}
	}
}

// keepWorst puts consumer c's summary among the worst, if it is one of
// the maxWorstConsumers worst so far: the most over-admitted, then the
// most under-admitted, then one with no 2xx; of equals, the first kept.
func keepWorst(worst *[]ConsumerAudit, ca ConsumerAudit, c int32, name func(int32) string) {
	worse := func(a, b ConsumerAudit) bool {
		switch {
		case a.OverAdmitted != b.OverAdmitted:
			return a.OverAdmitted > b.OverAdmitted
		case a.UnderAdmitted != b.UnderAdmitted:
			return a.UnderAdmitted > b.UnderAdmitted
		}
		return a.Admitted == 0 && b.Admitted > 0
	}
	ws := *worst
	i := len(ws)
	for i > 0 && worse(ca, ws[i-1]) {
		i--
	}
	if i >= maxWorstConsumers {
		return
	}
	ca.Consumer = name(c)
	ws = slices.Insert(ws, i, ca)
	*worst = ws[:min(len(ws), maxWorstConsumers)]
}

func anyStatus(string) bool { return true }

// spentOrNot is every request of ss, as remainingChecks counts them when a
// request refused may have spent the limit: only the admitted ones keep
// their remaining, to be judged.
func spentOrNot(ss []sample) []sample {
	out := slices.Clone(ss)
	for i := range out {
		if !out[i].ok() {
			out[i].remaining = -1
		}
	}
	return out
}
