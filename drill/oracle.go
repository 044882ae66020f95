package drill

import (
	"slices"
	"sort"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/hdr"
)

// decided reports whether Redis decided r: an answer with rate-limit fields.
func decided(r bench.Response) bool { return r.Error == "" && r.Limited }

func refused(r bench.Response) bool {
	return r.Error == "" && (r.Status == 429 || r.Status >= 500)
}

// judge makes a row of what came back from a run whose fault lasted w.
func judge(cfg Config, rs []bench.Response, w window) Row {
	info, _ := algorithms.Lookup(cfg.Algorithm)
	row := Row{FaultMillis: w.end.Sub(w.start).Milliseconds()}
	if w.failover > 0 {
		ms := w.failover.Milliseconds()
		row.FailoverMillis = &ms
	}
	per := make([][]bench.Response, cfg.Consumers)
	lat := hdr.New()
	var firstDegraded *bench.Response
	for i, r := range rs {
		row.Decisions++
		if r.Error != "" {
			row.TransportErrors++
		}
		if r.Error == "" && r.Status >= 200 && r.Status < 300 {
			row.Admitted++
		}
		if !decided(r) {
			row.Errors++
			if !r.Sent.Before(w.start) {
				if firstDegraded == nil || r.Done.Before(firstDegraded.Done) {
					firstDegraded = &rs[i]
				}
			}
		}
		if !r.Due.Before(w.start) && !r.Due.After(w.end) {
			hdr.Record(lat, r.Done.Sub(r.Due).Microseconds())
		}
		if r.Consumer >= 0 && r.Consumer < len(per) {
			per[r.Consumer] = append(per[r.Consumer], r)
		}
	}
	p := hdr.PercentilesOf(lat)
	row.P50Millis, row.P99Millis = float64(p.P50)/1000, float64(p.P99)/1000
	if firstDegraded != nil {
		ms := max(firstDegraded.Done.Sub(w.start), 0).Milliseconds()
		row.DetectMillis = &ms
		// Recovered when Redis decided a request sent after the fault's
		// end: from the end to the last answer made without Redis before
		// that one. A later failure (one request's timeout on a loaded
		// machine) is counted as an error, not as the fault going on.
		var back *bench.Response
		for i, r := range rs {
			if decided(r) && !r.Sent.Before(w.end) && (back == nil || r.Done.Before(back.Done)) {
				back = &rs[i]
			}
		}
		if back != nil {
			var last time.Time
			for _, r := range rs {
				if !decided(r) && !r.Sent.Before(w.start) && !r.Done.After(back.Done) && r.Done.After(last) {
					last = r.Done
				}
			}
			ms := max(last.Sub(w.end), 0).Milliseconds()
			row.RecoverMillis = &ms
		}
	}
	exact := info.Guarantee == algorithms.SlidingWindow
	var over, wrong []bench.Response
	for _, c := range per {
		over = append(over, overAdmitted(info.Guarantee, cfg.Policy, c)...)
		wrong = append(wrong, wronglyDenied(cfg.Policy, c, exact)...)
	}
	row.OverAdmitted, row.WronglyDenied = int64(len(over)), int64(len(wrong))
	row.Timeline = timeline(rs, over, wrong, w)
	return row
}

// timelineInterval is the length of a drill timeline's intervals.
const timelineInterval = 250 * time.Millisecond

// timeline cuts the run into intervals by when each answer came, counting
// what the row counts, and places the fault on it.
func timeline(rs, over, wrong []bench.Response, w window) *Timeline {
	if len(rs) == 0 {
		return nil
	}
	began := rs[0].Due
	for _, r := range rs {
		if r.Due.Before(began) {
			began = r.Due
		}
	}
	t := &Timeline{IntervalMillis: timelineInterval.Milliseconds(),
		FaultFromMillis: w.start.Sub(began).Milliseconds(), FaultToMillis: w.end.Sub(began).Milliseconds()}
	at := func(r bench.Response) *TimelineInterval {
		i := int(max(r.Done.Sub(began), 0) / timelineInterval)
		for len(t.Intervals) <= i {
			t.Intervals = append(t.Intervals, TimelineInterval{StartMillis: int64(len(t.Intervals)) * t.IntervalMillis})
		}
		return &t.Intervals[i]
	}
	for _, r := range rs {
		iv := at(r)
		iv.Decisions++
		if r.Error == "" && r.Status >= 200 && r.Status < 300 {
			iv.Admitted++
		}
		if !decided(r) {
			iv.Errors++
		}
	}
	for _, r := range over {
		at(r).OverAdmitted++
	}
	for _, r := range wrong {
		at(r).WronglyDenied++
	}
	return t
}

// overAdmitted counts one consumer's admissions beyond g, taken in the
// order their answers came: one is counted when, with the earlier ones
// not counted, a span from one of their sends to its own answer holds more
// whole flights than g.MaxIn allows over a span that long. Every decision
// lies within its flight, so a limiter that keeps g is never counted,
// wherever its clock's windows lie. Spans longer than two windows are not
// searched: the count can only be lower for it.
func overAdmitted(g algorithms.Guarantee, p algorithms.Policy, rs []bench.Response) []bench.Response {
	var ok []bench.Response
	for _, r := range rs {
		if r.Error == "" && r.Status >= 200 && r.Status < 300 {
			ok = append(ok, r)
		}
	}
	slices.SortStableFunc(ok, func(a, b bench.Response) int { return a.Done.Compare(b.Done) })
	horizon := 2 * p.Window
	var kept []bench.Response // not counted, in answer order
	var over []bench.Response
	sends := make([]time.Time, 0, 64)
	for _, j := range ok {
		// The kept flights that can share a span with j, by send, latest first.
		sends = sends[:0]
		for i := len(kept) - 1; i >= 0 && !kept[i].Done.Before(j.Done.Add(-horizon)); i-- {
			if s := kept[i].Sent; !s.Before(j.Done.Add(-horizon)) {
				sends = append(sends, s)
			}
		}
		slices.SortFunc(sends, func(a, b time.Time) int { return b.Compare(a) })
		// A span [x, j.Done] with x at or before j's send holds j and every
		// kept flight sent at or after x (each answered by j.Done).
		holds := func(x time.Time) bool {
			n := sort.Search(len(sends), func(i int) bool { return sends[i].Before(x) })
			return int64(1+n) > g.MaxIn(p, j.Done.Sub(x))
		}
		beyond := holds(j.Sent)
		for _, x := range sends {
			if beyond {
				break
			}
			if !x.After(j.Sent) {
				beyond = holds(x)
			}
		}
		if beyond {
			over = append(over, j)
			continue
		}
		kept = append(kept, j)
	}
	return over
}

// wronglyDenied counts one consumer's refusals that an exact sliding
// window would have admitted for certain: fewer than the limit of its
// admissions and failed requests had flights that could put them in the
// window before some moment of the refusal's flight (a millisecond wider,
// for the scripts' whole milliseconds). Refusals decided by Redis count
// only when exact (the algorithm is the exact sliding log).
func wronglyDenied(p algorithms.Policy, rs []bench.Response, exact bool) []bench.Response {
	var sents, dones []time.Time
	for _, r := range rs {
		if r.Error != "" || (r.Status >= 200 && r.Status < 300) {
			sents, dones = append(sents, r.Sent), append(dones, r.Done)
		}
	}
	slices.SortFunc(sents, func(a, b time.Time) int { return a.Compare(b) })
	slices.SortFunc(dones, func(a, b time.Time) int { return a.Compare(b) })
	var wrong []bench.Response
	for _, d := range rs {
		if !refused(d) || (decided(d) && !exact) {
			continue
		}
		from := d.Sent.Add(-p.Window - time.Millisecond)
		// Flights sent by d's answer, less those over by from.
		sentBy := sort.Search(len(sents), func(i int) bool { return sents[i].After(d.Done) })
		overBy := sort.Search(len(dones), func(i int) bool { return dones[i].After(from) })
		if int64(sentBy-overBy) < p.Limit {
			wrong = append(wrong, d)
		}
	}
	return wrong
}
