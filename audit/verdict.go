package audit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/rules"
)

// judgeLimit judges the samples against one limit, the audit's unit: each
// consumer's requests apart (named by name), and then all of them taken
// together to tell a limit shared across identities. Every figure and the
// verdict come from the samples; the Retry-After probes, which send more,
// are added by the caller. notes are what its denials say beyond counts.
func judgeLimit(samples []Sample, exp Expectation, consumers int, cov Coverage, name func(int32) string, notes denialNotes) LimitAudit {
	p := exp.policy
	l := LimitAudit{Limit: p.Limit, WindowMillis: p.Window.Milliseconds(), Algorithm: exp.algorithm,
		Rule: exp.rule(), Reasons: []string{}, WorstConsumers: []ConsumerAudit{}}
	per := make([][]Sample, consumers)
	statuses := map[string]int64{}
	var answered, turnedAway int64
	for _, s := range samples {
		per[s.Consumer] = append(per[s.Consumer], s)
		if s.Answered() {
			answered++
			statuses[strconv.Itoa(int(s.Status))]++
			if !s.OK() && !s.Denied() {
				turnedAway++
			}
		}
		checkAdvertised(s, p.Limit, exp.guarantee.Capacity(p), &l.Headers, name)
		if exp.refusedAtZero && s.Denied() && !s.otherMayDeny && s.remaining > 0 {
			// Refused, and by this limit alone: nothing remained of it.
			l.Headers.Violations++
			if l.Headers.Example == "" {
				l.Headers.Example = name(s.Consumer) + " was refused with " + strconv.FormatInt(s.remaining, 10) + " remaining"
			}
		}
	}
	underJudged := cov.skipUnder == ""
	worst, worstOf := span{}, int32(-1)
	var noOK []int32 // consumers answered without a single 2xx
	underConsumers := 0
	for c, ss := range per {
		if len(ss) == 0 {
			continue
		}
		j := judgeConsumer(ss, exp, cov)
		if j.answered == 0 {
			continue
		}
		l.Consumers++
		if worstOf < 0 || j.worst.admitted-j.worst.allowed > worst.admitted-worst.allowed {
			worst, worstOf = j.worst, int32(c)
		}
		l.Denials += j.denied
		l.DenialsAttributed += j.own
		l.DenialsJudged += j.judged
		l.DenialsElsewhere += j.elsewhere
		l.UnderAdmitted += j.under
		l.MostInWindow = max(l.MostInWindow, j.most)
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
	span, full := exp.fullSpan()
	l.FullAt, l.FullSpanMillis = full, span.Milliseconds()
	l.DenialsUnjudged = l.Denials - l.DenialsJudged
	switch {
	case !underJudged:
		l.UnderSkipped = cov.skipUnder
	case l.DenialsUnjudged > 0:
		l.UnjudgedReason = notes.unjudged
	}
	if l.DenialsJudged > 0 {
		l.UnderAdmittedShare = float64(l.UnderAdmitted) / float64(l.DenialsJudged)
	}
	// All the consumers taken as one: when that one holds the limit, and
	// its admissions account for what each consumer was denied below its
	// own, the gateway keys them all alike.
	if underJudged && underConsumers >= 2 {
		var ok []Sample
		for _, s := range samples {
			if s.OK() {
				ok = append(ok, s)
			}
		}
		together := worstSpan(ok, exp)
		var under int64 // denials the one counter of them all would surely have admitted
		checkDenials(samples, exp, cov, func(i int, st limitState) {
			if st == stateRoom && !samples[i].otherMayDeny {
				under++
			}
		})
		l.SharedLimit = together.admitted <= together.allowed && 10*under <= l.UnderAdmitted
	}

	reasons := unjudgeable(&l, seen{requests: len(samples), answered: answered, turnedAway: turnedAway, statuses: statuses, noOK: noOK},
		per, name)
	switch {
	case l.OverAdmitted > 0:
		l.Verdict = Leaked
		l.Reasons = []string{fmt.Sprintf("%s got %d through in %s where %d were allowed (%s)", l.WorstConsumer,
			l.WorstWindowAdmitted, time.Duration(l.WorstSpanMillis)*time.Millisecond, l.WorstSpanAllowed, l.Rule)}
	case len(reasons) > 0:
		l.Verdict, l.Reasons = NoVerdict, reasons
	case l.DenialsAttributed == 0:
		l.Verdict, l.Reasons = NotReached, []string{notReached(&l, notes)}
	default:
		l.Verdict = Held
	}
	return l
}

// notReached says how far the load got of a limit that none of its
// denials shows enforced: the most one counter got in a window, and, when
// that filled it, why no denial was its own.
func notReached(l *LimitAudit, notes denialNotes) string {
	got := fmt.Sprintf("%d of %d in %s", l.MostInWindow, l.FullAt, rules.Window(time.Duration(l.FullSpanMillis)*time.Millisecond))
	unsure := ""
	if notes.unsure != "" {
		unsure = fmt.Sprintf(" (what %s counted before the run began is unknown, and the run began with denials nothing in it explains: "+
			"an earlier run's requests may still have counted)", notes.unsure)
	}
	switch {
	case notes.sharedFull == 1:
		return fmt.Sprintf("%s, but the one request denied while its window was full met %s too, which may have denied it%s: not tested",
			got, notes.rivals, unsure)
	case notes.sharedFull > 1:
		return fmt.Sprintf("%s, but each of the %d requests denied while its window was full met %s too, which may have denied it%s: not tested",
			got, notes.sharedFull, notes.rivals, unsure)
	case l.MostInWindow >= l.FullAt:
		return got + ", but none of its requests was denied while its window was seen full: not tested"
	}
	return got + ": not tested"
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
func unjudgeable(l *LimitAudit, s seen, per [][]Sample, name func(int32) string) []string {
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
			plural.Tally(s.statuses, failed)))
	}
	if len(s.noOK) > 0 {
		first := s.noOK[0]
		statuses := map[string]int64{}
		for _, r := range per[first] {
			if r.Answered() {
				statuses[strconv.Itoa(int(r.Status))]++
			}
		}
		if len(s.noOK) == 1 {
			reasons = append(reasons, fmt.Sprintf("%s got no 2xx in its responses (%s): nothing shows what its limit admits",
				name(first), plural.Tally(statuses, anyStatus)))
		} else {
			reasons = append(reasons, fmt.Sprintf("%d of the %d consumers got no 2xx, such as %s (%s): nothing shows what their limit admits",
				len(s.noOK), l.Consumers, name(first), plural.Tally(statuses, anyStatus)))
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
	ok []Sample // its successes
	// answered counts its responses; admitted, denied and failed split
	// its requests into 2xx, 429 and the rest (transport errors included).
	answered, admitted, denied, failed int64
	// worst is the span in which it was admitted furthest beyond the rule;
	// most the most it was admitted in a window.
	worst span
	most  int64
	// own counts the denials that were the limit's own; judged those
	// judged for under-admission, elsewhere those of them that another
	// limit may have made, under those the rule would have admitted.
	own, judged, elsewhere, under int64
}

func judgeConsumer(ss []Sample, exp Expectation, cov Coverage) judged {
	var j judged
	for _, s := range ss {
		switch {
		case s.OK():
			j.ok = append(j.ok, s)
			j.admitted++
		case s.Denied():
			j.denied++
			if s.judgement == ownDenial {
				j.own++
			}
			if cov.skipUnder == "" && s.judgement.judgedUnder() {
				j.judged++
				switch s.judgement {
				case elsewhere:
					j.elsewhere++
				case underDenial:
					j.under++
				}
			}
		default:
			j.failed++
		}
		if s.Answered() {
			j.answered++
		}
	}
	j.worst = worstSpan(j.ok, exp)
	j.most = j.worst.admitted
	if span, _ := exp.fullSpan(); exp.guarantee != algorithms.SlidingWindow {
		j.most = worstWindow(j.ok, span-time.Millisecond)
	}
	return j
}

// checkAdvertised checks the limit and remaining a response advertised
// against the expected limit, remaining up to most (a bucket's burst).
func checkAdvertised(s Sample, limit, most int64, h *HeadersAudit, name func(int32) string) {
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
			h.Example = name(s.Consumer) + " " + bad + " (expected limit " + strconv.FormatInt(limit, 10) + ")"
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

// failed says whether a response of status code (a key of a count by
// status) was neither 2xx nor 429.
func failed(code string) bool {
	return !strings.HasPrefix(code, "2") && code != "429"
}

// spentOrNot is every request of ss, as remainingChecks counts them when a
// request refused may have spent the limit: only the admitted ones keep
// their remaining, to be judged.
func spentOrNot(ss []Sample) []Sample {
	out := slices.Clone(ss)
	for i := range out {
		if !out[i].OK() {
			out[i].remaining = -1
		}
	}
	return out
}
