package audit

import (
	"slices"
	"sort"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// worstRamp is worstSpan for guarantees whose bound grows with the span, a
// burst and then a steady rate (token bucket, GCRA, sliding counter): at
// most about limit + limit × d / window in a span of length d. It weighs
// every span from one success's send to the reply of another sent no
// earlier (or its own), counting the successes whose whole flight lies
// inside, and keeps the span furthest above that line; it then judges that
// span by the guarantee's exact bound.
//
// A sweep over the replies in time order keeps, for every possible start i
// (a send), N(i) + rate × sent(i), N(i) counting the flights inside
// [sent(i), reply]; each reply adds one to every start at or before its
// flight's send. A segment tree with range additions and a maximum makes
// that O(n log n).
//
// p counts units, of which each request takes cost (1 but for a rate
// limit service's hits_addend or a rules limit's cost): what a span
// allows is its units over the cost, rounded down.
func worstRamp(ok []Sample, p algorithms.Policy, g algorithms.Guarantee, cost int64) span {
	cost = max(cost, 1)
	if len(ok) == 0 {
		return span{allowed: g.MaxIn(p, 0) / cost}
	}
	bySent := slices.Clone(ok)
	slices.SortFunc(bySent, func(a, b Sample) int { return cmpDur(a.Sent, b.Sent) })
	sents := make([]time.Duration, len(bySent))
	for i, s := range bySent {
		sents[i] = s.Sent
	}
	byDone := slices.Clone(bySent)
	slices.SortFunc(byDone, func(a, b Sample) int { return cmpDur(a.Done, b.Done) })

	rate := float64(p.Limit) / float64(cost) / float64(p.Window) // admissions per ns of span
	t := newMaxTree(len(bySent))
	for i, s := range sents {
		t.add(i, i, rate*float64(s))
	}
	upTo := func(d time.Duration) int { // starts sent at or before d
		return sort.Search(len(sents), func(i int) bool { return sents[i] > d })
	}
	best, bestStart, bestEnd := 0.0, -1, time.Duration(0)
	for k, f := range byDone {
		t.add(0, upTo(f.Sent)-1, 1)
		if k+1 < len(byDone) && byDone[k+1].Done == f.Done {
			continue // every flight that ended then first
		}
		// Only the starts at or before f's send: the spans that hold f. A
		// span that starts later and holds another flight is beaten by the
		// one that ends at that flight's reply; one that holds none is no
		// span of admissions (under load, whose flights are long, it scored
		// above every one that held a success, and was reported as the
		// worst: 0 admitted).
		v, i := t.max(0, upTo(f.Sent)-1)
		if v -= rate * float64(f.Done); bestStart < 0 || v > best {
			best, bestStart, bestEnd = v, i, f.Done
		}
	}
	from := sents[bestStart]
	var n int64
	for _, s := range ok {
		if s.Sent >= from && s.Done <= bestEnd {
			n++
		}
	}
	d := bestEnd - from
	return span{span: d, admitted: n, allowed: g.MaxIn(p, d) / cost}
}

// maxTree is a segment tree over n values with range additions and the
// maximum (and where it is) over a range.
type maxTree struct {
	n    int
	best []float64
	at   []int
	lazy []float64
}

func newMaxTree(n int) *maxTree {
	t := &maxTree{n: n, best: make([]float64, 4*n), at: make([]int, 4*n), lazy: make([]float64, 4*n)}
	t.build(1, 0, n-1)
	return t
}

func (t *maxTree) build(node, lo, hi int) {
	t.at[node] = lo
	if lo == hi {
		return
	}
	mid := (lo + hi) / 2
	t.build(2*node, lo, mid)
	t.build(2*node+1, mid+1, hi)
}

// add adds v to the values at lo..hi.
func (t *maxTree) add(lo, hi int, v float64) {
	if lo <= hi {
		t.update(1, 0, t.n-1, lo, hi, v)
	}
}

func (t *maxTree) update(node, nlo, nhi, lo, hi int, v float64) {
	if hi < nlo || nhi < lo {
		return
	}
	if lo <= nlo && nhi <= hi {
		t.best[node] += v
		t.lazy[node] += v
		return
	}
	mid := (nlo + nhi) / 2
	t.update(2*node, nlo, mid, lo, hi, v)
	t.update(2*node+1, mid+1, nhi, lo, hi, v)
	t.pull(node)
}

func (t *maxTree) pull(node int) {
	l, r := 2*node, 2*node+1
	if t.best[l] >= t.best[r] {
		t.best[node], t.at[node] = t.best[l], t.at[l]
	} else {
		t.best[node], t.at[node] = t.best[r], t.at[r]
	}
	t.best[node] += t.lazy[node]
}

// max returns the largest value at lo..hi and its index (lo <= hi).
func (t *maxTree) max(lo, hi int) (float64, int) {
	return t.query(1, 0, t.n-1, lo, hi)
}

func (t *maxTree) query(node, nlo, nhi, lo, hi int) (float64, int) {
	if lo <= nlo && nhi <= hi {
		return t.best[node], t.at[node]
	}
	mid := (nlo + nhi) / 2
	switch {
	case hi <= mid:
		v, i := t.query(2*node, nlo, mid, lo, hi)
		return v + t.lazy[node], i
	case lo > mid:
		v, i := t.query(2*node+1, mid+1, nhi, lo, hi)
		return v + t.lazy[node], i
	}
	lv, li := t.query(2*node, nlo, mid, lo, hi)
	rv, ri := t.query(2*node+1, mid+1, nhi, lo, hi)
	if lv >= rv {
		return lv + t.lazy[node], li
	}
	return rv + t.lazy[node], ri
}
