package audit

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"time"
)

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
func remainingChecks(ok []Sample, window, horizon time.Duration, zero bool, h *HeadersAudit, name func(int32) string) {
	// Pairs are of successes that gave a remaining; what came between is
	// counted over every success, with one or not: a response that names
	// only the policy closest to exhaustion still consumed the others.
	all := slices.Clone(ok)
	slices.SortFunc(all, func(a, b Sample) int { return cmpDur(a.Sent, b.Sent) })
	var ss []Sample
	for _, s := range all {
		if s.remaining >= 0 {
			ss = append(ss, s)
		}
	}
	if len(ss) < 2 {
		return
	}
	ssSents := make([]time.Duration, len(ss))
	for i, s := range ss {
		ssSents[i] = s.Sent
	}
	sents := make([]time.Duration, len(all))
	dones := make([]time.Duration, len(all))
	for i, s := range all {
		sents[i], dones[i] = s.Sent, s.Done
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
	violate := func(s Sample, what string) {
		h.Violations++
		if h.Example == "" {
			h.Example = name(s.Consumer) + " " + what
		}
	}
	oldest := 0 // the first success (of all), in send order, that ended after x.sent - window
	for i, x := range ss {
		for oldest < len(all) && all[oldest].Done <= x.Sent-window {
			oldest++
		}
		// y: the first success with a remaining sent after x came back.
		j := sort.Search(len(ssSents), func(k int) bool { return ssSents[k] >= x.Done })
		if j == len(ss) {
			continue
		}
		if j <= i { // x.done <= x.sent: a flight of no length
			j = i + 1
		}
		y := ss[j]
		if horizon >= 0 && y.Done >= horizon {
			continue
		}
		// Successes other than x and y whose flights overlap [x.sent, y.done]:
		// those sent before y.done, less those that ended by x.sent.
		between := countBelow(sents, y.Done, false) - countBelow(dones, x.Sent, true) - 2
		if x.remaining-y.remaining > 1+between {
			violate(y, "remaining fell from "+strconv.FormatInt(x.remaining, 10)+" to "+strconv.FormatInt(y.remaining, 10)+
				" with "+strconv.FormatInt(between, 10)+" admissions in between")
		}
		if zero && x.remaining == 0 && x.Reset >= 0 {
			// The earliest success that may still count in x's window frees
			// its slot a window after it was sent, less a millisecond for
			// limiters that keep whole milliseconds.
			earliest := time.Duration(math.MaxInt64)
			if oldest < len(all) && all[oldest].Sent <= x.Done {
				earliest = all[oldest].Sent + window - time.Millisecond
			}
			resetAt := x.Sent + x.Reset - time.Second
			if y.Done < earliest && y.Done < resetAt {
				violate(y, "was admitted right after a response that said 0 remaining")
			}
		}
	}
}
