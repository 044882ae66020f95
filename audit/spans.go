package audit

import (
	"slices"
	"sort"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// span is a stretch of time and what one consumer was admitted in it.
type span struct {
	span              time.Duration
	admitted, allowed int64
}

// worstSpan finds the span of time in which ok (a consumer's successes)
// went furthest beyond what the expectation allows.
func worstSpan(ok []Sample, exp Expectation) span {
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
	// A request of several units: the bound in units, over its cost.
	units, cost := exp.units()
	return worstRamp(ok, units, g, cost)
}

// worstWindow is the most successes whose whole flight lies inside one span
// [s, s+span) that starts at a success's send, in O(n log n): a sweep over
// the starts in send order, with the flights not yet passed counted by when
// they ended in a Fenwick tree.
func worstWindow(ok []Sample, span time.Duration) int64 {
	if len(ok) == 0 {
		return 0
	}
	slices.SortFunc(ok, func(a, b Sample) int { return cmpDur(a.Sent, b.Sent) })
	// Each flight's place among the flights ordered by end.
	byEnd := make([]int, len(ok))
	for i := range byEnd {
		byEnd[i] = i
	}
	slices.SortFunc(byEnd, func(i, j int) int { return cmpDur(ok[i].Done, ok[j].Done) })
	dones := make([]time.Duration, len(ok))
	ranks := make([]int, len(ok))
	for r, i := range byEnd {
		dones[r], ranks[i] = ok[i].Done, r
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
		end := sort.Search(len(dones), func(k int) bool { return dones[k] >= s.Sent+span })
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
