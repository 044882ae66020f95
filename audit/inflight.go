package audit

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"
)

// The in-flight audit: a gateway's per-consumer limit on the requests in
// flight at once, judged from each request's flight (sent to answered)
// and the upstream's service time, the hold D.
//
// Over-admission. An admitted request i spends at least D inside the
// upstream, in an interval H_i = [s_i, s_i+D] that lies within its flight:
// s_i ∈ [sent_i, done_i−D]. Its hold starts at latest L_i = done_i−D and
// ends at earliest E_i = sent_i+D. Two admitted requests i and j surely
// held at one instant, whatever the placements, iff L_i < E_j and
// L_j < E_i (the adversary starts one as late and the other as early as
// it can). By Helly's theorem for intervals, a set of admitted requests
// pairwise surely overlapping shares an instant under every placement:
// the set was surely held at once, and more than N of them is proven
// over-admission. When L_i < E_i, i's core [L_i, E_i) is the time i is
// surely in its hold; the pair condition is then that the cores meet, and
// the largest such set is the deepest point of the cores (a sweep). A
// flight of 2D or more has no core; such a request is surely held with
// every request whose core covers [E_i, L_i], and two of them never are,
// so the largest set with one is one more than those cores (a sweep with a
// Fenwick tree). A flight shorter than D was not held D at all: the audit
// says so and judges nothing.
//
// Under-admission. A denial was decided at some instant of its flight.
// Another request of its consumer that was not denied (admitted, failed,
// a transport error) can hold a slot at most over its whole flight (a
// transport error's, for all we know, from its send on). A denial at whose
// every possible instant fewer than N of them could be held is wrongful.

// InFlightAudit is what the in-flight audit found (--expect-in-flight).
type InFlightAudit struct {
	// Verdict: leaked when more than Limit requests of one consumer were
	// surely held at once; no verdict when the hold is not what the
	// gateway did (an admitted flight shorter than it) or nothing was
	// admitted; not reached when no consumer both had Limit surely held
	// at once and had some of its requests denied; held otherwise.
	// Reasons say why in words (none when it held).
	Verdict Verdict  `json:"verdict"`
	Reasons []string `json:"reasons"`
	// Limit is the requests each consumer may have in flight at once;
	// HoldMillis the least time each admitted request spends in the
	// upstream (--hold).
	Limit      int64 `json:"limit"`
	HoldMillis int64 `json:"hold_ms"`
	// Requests counts the requests judged, Admitted their 2xx, Denied
	// their 429s; Consumers the consumers that got a response.
	Requests  int64 `json:"requests"`
	Admitted  int64 `json:"admitted"`
	Denied    int64 `json:"denied"`
	Consumers int   `json:"consumers"`
	// ShortFlights counts the admitted requests answered in less than the
	// hold: the gateway did not hold them (NoVerdict).
	ShortFlights int64 `json:"short_flights"`
	// MostSurelyHeld is the most admitted requests of one consumer,
	// WorstConsumer, that surely were held at one instant; Example holds
	// their flights.
	MostSurelyHeld int64    `json:"most_surely_held"`
	WorstConsumer  string   `json:"worst_consumer"`
	Example        []Flight `json:"example"`
	// DenialsJudged counts the denials judged for under-admission (those
	// sent once the samples hold every request, and answered before they
	// stop); UnderAdmitted those of them at whose every possible instant
	// of decision fewer than Limit of the consumer's other requests could
	// be held, and UnderAdmittedShare their share. WorstUnderConsumer had
	// the most, WorstUnderAdmitted; UnderExample is the first, with
	// UnderExampleHeld, the most that could be held while it was decided.
	DenialsJudged      int64   `json:"denials_judged"`
	UnderAdmitted      int64   `json:"under_admitted"`
	UnderAdmittedShare float64 `json:"under_admitted_share"`
	WorstUnderConsumer string  `json:"worst_under_consumer"`
	WorstUnderAdmitted int64   `json:"worst_under_admitted"`
	UnderExample       *Flight `json:"under_example,omitempty"`
	UnderExampleHeld   int64   `json:"under_example_held"`
	// UnderSkipped says why under-admission was not judged, if so.
	UnderSkipped string `json:"under_skipped,omitempty"`
}

// Flight is one request's flight, since the measured run began, in
// microseconds.
type Flight struct {
	SentMicros int64 `json:"sent_us"`
	DoneMicros int64 `json:"done_us"`
}

func flightOf(s Sample) Flight {
	return Flight{SentMicros: s.Sent.Microseconds(), DoneMicros: s.Done.Microseconds()}
}

// String is the flight as sent→done in milliseconds.
func (f Flight) String() string {
	return fmt.Sprintf("%.1f→%.1f ms", float64(f.SentMicros)/1e3, float64(f.DoneMicros)/1e3)
}

// JudgeInFlight judges the samples against a limit of limit requests in
// flight per consumer, each admitted one held at least hold in the
// upstream. consumers is the number of consumers (samples' Consumer below
// it); name names them.
func JudgeInFlight(samples []Sample, limit int64, hold time.Duration, consumers int, cov Coverage, name func(int32) string) InFlightAudit {
	a := InFlightAudit{Limit: limit, HoldMillis: hold.Milliseconds(), Reasons: []string{}, Example: []Flight{}, UnderSkipped: cov.skipUnder}
	per := make([][]Sample, max(consumers, 1))
	for _, s := range samples {
		if int(s.Consumer) >= len(per) || s.Consumer < 0 {
			continue
		}
		per[s.Consumer] = append(per[s.Consumer], s)
	}
	var firstShort Sample
	// tried: some consumer had limit surely held at once and was denied.
	tried := false
	for c, ss := range per {
		answered := false
		var ok []Sample
		var denied int64
		for _, s := range ss {
			a.Requests++
			answered = answered || s.Answered()
			switch {
			case s.OK():
				a.Admitted++
				if s.Done-s.Sent < hold {
					if a.ShortFlights == 0 {
						firstShort = s
					}
					a.ShortFlights++
					continue
				}
				ok = append(ok, s)
			case s.Denied():
				denied++
			}
		}
		a.Denied += denied
		if answered {
			a.Consumers++
		}
		set := surelyHeld(ok, hold)
		tried = tried || (int64(len(set)) >= limit && denied > 0)
		if int64(len(set)) > a.MostSurelyHeld {
			a.MostSurelyHeld, a.WorstConsumer = int64(len(set)), name(int32(c))
			a.Example = a.Example[:0]
			for _, s := range set {
				a.Example = append(a.Example, flightOf(s))
			}
		}
		if cov.skipUnder == "" {
			judged, under, first, held := underInFlight(ss, limit, cov)
			a.DenialsJudged += judged
			a.UnderAdmitted += under
			if under > a.WorstUnderAdmitted {
				a.WorstUnderConsumer, a.WorstUnderAdmitted = name(int32(c)), under
			}
			if under > 0 && (a.UnderExample == nil || first.Sent < time.Duration(a.UnderExample.SentMicros)*time.Microsecond) {
				f := flightOf(first)
				a.UnderExample, a.UnderExampleHeld = &f, held
			}
		}
	}
	if a.DenialsJudged > 0 {
		a.UnderAdmittedShare = float64(a.UnderAdmitted) / float64(a.DenialsJudged)
	}
	switch {
	case a.Requests == 0:
		a.Verdict, a.Reasons = NoVerdict, []string{"no request was sent in the measured run"}
	case a.ShortFlights > 0:
		a.Verdict, a.Reasons = NoVerdict, []string{fmt.Sprintf("%d admitted requests were answered in less than the hold of %s, such as %s of %s: "+
			"the upstream did not hold them that long (is --hold right, or does the gateway answer some itself?)",
			a.ShortFlights, hold, flightOf(firstShort), name(firstShort.Consumer))}
	case a.Admitted == 0:
		a.Verdict, a.Reasons = NoVerdict, []string{"no request was admitted: nothing shows what the limit admits"}
	case a.MostSurelyHeld > limit:
		a.Verdict, a.Reasons = Leaked, []string{fmt.Sprintf("%s had %d requests surely held at once where %d are allowed: %s",
			a.WorstConsumer, a.MostSurelyHeld, limit, flightsText(a.Example))}
	case a.MostSurelyHeld < limit && a.UnderAdmitted > 0:
		a.Verdict, a.Reasons = NotReached, []string{fmt.Sprintf("the most requests of one consumer surely held at once was %d of %d, "+
			"and %d denials came while fewer than %d could be held: the gateway, not the load, kept fewer in flight (see the under-admission)", a.MostSurelyHeld, limit, a.UnderAdmitted, limit)}
	case a.MostSurelyHeld < limit:
		a.Verdict, a.Reasons = NotReached, []string{fmt.Sprintf("the most requests of one consumer surely held at once was %d of %d: "+
			"send more at once per consumer (--rate 0 with --in-flight-per-consumer above the limit)", a.MostSurelyHeld, limit)}
	case a.Denied == 0:
		a.Verdict, a.Reasons = NotReached, []string{fmt.Sprintf("%s had %d surely held at once, but no request was denied: "+
			"the load never tried more than the limit", a.WorstConsumer, a.MostSurelyHeld)}
	case !tried:
		a.Verdict, a.Reasons = NotReached, []string{fmt.Sprintf("%s had %d surely held at once but was never denied, and no consumer that was denied had %d surely held: "+
			"the load never tried more than the limit on one consumer", a.WorstConsumer, a.MostSurelyHeld, limit)}
	default:
		a.Verdict = Held
	}
	return a
}

// flightsText lists flights, sorted by send.
func flightsText(fs []Flight) string {
	s := ""
	for i, f := range fs {
		if i > 0 {
			s += ", "
		}
		s += f.String()
	}
	return s
}

// surelyHeld is the largest set of ok (admitted requests each at least
// hold long) surely held at one instant whatever their placements, sorted
// by send (see the file's comment).
func surelyHeld(ok []Sample, hold time.Duration) []Sample {
	type ev struct {
		at    time.Duration
		delta int
	}
	var cores []Sample
	var long []Sample
	for _, s := range ok {
		if s.Done-hold < s.Sent+hold {
			cores = append(cores, s)
		} else {
			long = append(long, s)
		}
	}
	// The deepest point of the cores [done−D, sent+D): ends before starts
	// at one instant, the cores being open at their end.
	evs := make([]ev, 0, 2*len(cores))
	for _, s := range cores {
		evs = append(evs, ev{s.Done - hold, +1}, ev{s.Sent + hold, -1})
	}
	slices.SortFunc(evs, func(x, y ev) int { return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(x.delta, y.delta)) })
	depth, best := 0, 0
	var at time.Duration
	for _, e := range evs {
		depth += e.delta
		if depth > best {
			best, at = depth, e.at
		}
	}
	var set []Sample
	if best > 0 {
		for _, s := range cores {
			if s.Done-hold <= at && at < s.Sent+hold {
				set = append(set, s)
			}
		}
	}
	if len(ok) > 0 && len(set) == 0 {
		set = []Sample{ok[0]}
	}
	// A long flight i with the cores j where L_j < E_i and E_j > L_i:
	// the long flights by E_i, the cores by L_j, the cores' E_j counted in
	// a Fenwick tree over their ranks.
	if len(long) > 0 && len(cores) > 0 {
		byL := slices.Clone(cores)
		slices.SortFunc(byL, func(x, y Sample) int { return cmp.Compare(x.Done, y.Done) })
		ends := make([]time.Duration, len(cores))
		for i, s := range cores {
			ends[i] = s.Sent + hold
		}
		slices.Sort(ends)
		tree := make([]int, len(ends)+1)
		add := func(i int) {
			for i++; i < len(tree); i += i & -i {
				tree[i]++
			}
		}
		prefix := func(i int) int { // counted with rank below i
			n := 0
			for ; i > 0; i -= i & -i {
				n += tree[i]
			}
			return n
		}
		slices.SortFunc(long, func(x, y Sample) int { return cmp.Compare(x.Sent, y.Sent) })
		next, inserted := 0, 0
		bestLong, bestI := 0, -1
		for i, s := range long {
			for next < len(byL) && byL[next].Done-hold < s.Sent+hold {
				add(sort.Search(len(ends), func(k int) bool { return ends[k] >= byL[next].Sent+hold }))
				next++
				inserted++
			}
			// Those inserted whose E_j > L_i.
			n := inserted - prefix(sort.Search(len(ends), func(k int) bool { return ends[k] > s.Done-hold }))
			if n+1 > bestLong {
				bestLong, bestI = n+1, i
			}
		}
		if bestLong > len(set) {
			s := long[bestI]
			set = []Sample{s}
			for _, c := range cores {
				if c.Done-hold < s.Sent+hold && c.Sent+hold > s.Done-hold {
					set = append(set, c)
				}
			}
		}
	}
	slices.SortFunc(set, func(x, y Sample) int { return cmp.Compare(x.Sent, y.Sent) })
	return set
}

// underInFlight judges one consumer's denials (ss are all its requests)
// for under-admission against limit: it counts those judged and those
// wrongful, and returns the first wrongful one with the most requests that
// could be held while it was decided.
func underInFlight(ss []Sample, limit int64, cov Coverage) (judged, under int64, first Sample, held int64) {
	// Each request not denied may hold a slot over [sent, done] (a
	// transport error from its send on, for ever).
	var starts, ends []time.Duration
	const never = time.Duration(1<<63 - 1)
	for _, s := range ss {
		if s.Denied() {
			continue
		}
		starts = append(starts, s.Sent)
		end := s.Done
		if !s.Answered() {
			end = never
		}
		ends = append(ends, end)
	}
	slices.Sort(starts)
	slices.Sort(ends)
	// could(t): those with sent ≤ t ≤ done.
	could := func(t time.Duration) int64 {
		up, _ := slices.BinarySearch(starts, t+1)
		lo, _ := slices.BinarySearch(ends, t)
		return int64(up - lo)
	}
	// The count only rises at a start: the most over [a, b] is could(a) or
	// could at a start in (a, b]: a sparse table of could at each start.
	table := [][]int64{make([]int64, len(starts))}
	for i, t := range starts {
		table[0][i] = could(t)
	}
	for k := 1; 1<<k <= len(starts); k++ {
		prev, row := table[k-1], make([]int64, len(starts)-(1<<k)+1)
		for i := range row {
			row[i] = max(prev[i], prev[i+1<<(k-1)])
		}
		table = append(table, row)
	}
	most := func(lo, hi int) int64 { // over starts[lo:hi], hi > lo
		k := 0
		for 1<<(k+1) <= hi-lo {
			k++
		}
		return max(table[k][lo], table[k][hi-(1<<k)])
	}
	for _, s := range ss {
		if !s.Denied() || s.Sent < cov.from || (cov.horizon >= 0 && s.Done >= cov.horizon) {
			continue
		}
		judged++
		m := could(s.Sent)
		lo, _ := slices.BinarySearch(starts, s.Sent+1)
		hi, _ := slices.BinarySearch(starts, s.Done+1)
		if hi > lo {
			m = max(m, most(lo, hi))
		}
		if m < limit {
			if under == 0 || s.Sent < first.Sent {
				first, held = s, m
			}
			under++
		}
	}
	return judged, under, first, held
}
