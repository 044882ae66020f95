package race

import (
	"slices"
	"time"
)

// span is an interval of time, [from, to).
type span struct{ from, to time.Time }

// measure fills t's counts of what was held, from the holders' requests
// (see InFlightTrial for the intervals). end is the trial's end: where an
// interval whose end nobody saw stops.
func (f *inFlight) measure(t *InFlightTrial, hs []*holder, end time.Time) {
	ttl, slack := f.policy.LeaseTTL, leaseSlack(f.policy.LeaseTTL)
	var inFlight, sure, maybe, denials []span
	for _, h := range hs {
		for _, r := range h.reqs {
			if !r.admitted {
				if !r.failed {
					denials = append(denials, span{r.sent, r.replied})
				}
				continue
			}
			inFlight = append(inFlight, span{r.replied, r.end})
			s := span{r.replied, r.end}
			m := span{r.sent, r.released}
			if r.released.IsZero() {
				m.to = end // nobody saw it end
			}
			if r.fault == faultKill || r.fault == faultLose {
				m.to = r.end
			}
			if f.info.Expires {
				// The lease surely lasted until its acquire's send plus
				// the TTL, and may have until its reply plus the TTL.
				if lasted := r.sent.Add(ttl - slack); s.to.After(lasted) {
					s.to = lasted
				}
				if r.end.After(r.replied.Add(ttl + slack)) {
					t.OutlivedLeases++
				}
				if r.fault == faultKill || r.fault == faultLose {
					m.to = later(m.to, r.replied.Add(ttl+slack))
				}
			}
			sure = append(sure, s)
			maybe = append(maybe, m)
		}
	}
	t.MostInFlight, _ = mostAtOnce(inFlight)
	most, counts := mostAtOnce(sure)
	t.MostHeld = most
	t.Over = most > f.policy.Limit
	for _, n := range counts {
		if n > f.policy.Limit {
			t.OverHolders++
		}
	}
	t.WrongfulDenials = wrongful(denials, maybe, f.policy.Limit)
}

// mostAtOnce is the most spans that cover one instant, and, for each span,
// how many covered its start, itself included (spans that start at one
// instant are counted in their order). A span ends before another starts
// at the same instant; an empty span covers nothing.
func mostAtOnce(spans []span) (int64, []int64) {
	type edge struct {
		t     time.Time
		start bool
		i     int
	}
	edges := make([]edge, 0, 2*len(spans))
	for i, s := range spans {
		if s.to.After(s.from) {
			edges = append(edges, edge{s.from, true, i}, edge{s.to, false, i})
		}
	}
	slices.SortStableFunc(edges, func(a, b edge) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		switch {
		case a.start == b.start:
			return 0
		case a.start:
			return 1 // ends first
		}
		return -1
	})
	counts := make([]int64, len(spans))
	var n, most int64
	for _, e := range edges {
		if !e.start {
			n--
			continue
		}
		n++
		counts[e.i] = n
		most = max(most, n)
	}
	return most, counts
}

// wrongful counts the denials that fewer than limit of the spans met: at
// no instant from the denial's send to its reply could limit requests
// have been held, even counting every span that met it as held at once.
func wrongful(denials, spans []span, limit int64) int64 {
	starts := make([]time.Time, len(spans))
	ends := make([]time.Time, len(spans))
	for i, s := range spans {
		starts[i], ends[i] = s.from, s.to
	}
	slices.SortFunc(starts, time.Time.Compare)
	slices.SortFunc(ends, time.Time.Compare)
	var n int64
	for _, d := range denials {
		// Spans that met [d.from, d.to]: begun by its end, not ended before its start.
		begun, _ := slices.BinarySearchFunc(starts, d.to, func(s, t time.Time) int {
			if s.After(t) {
				return 1
			}
			return -1
		})
		ended, _ := slices.BinarySearchFunc(ends, d.from, func(e, t time.Time) int {
			if e.Before(t) {
				return -1
			}
			return 1
		})
		if int64(begun-ended) < limit {
			n++
		}
	}
	return n
}
