package audit

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/rules"
)

// Which limit made a denial. A 429 does not say; what each limit counted
// on its own counter does. Each limit a denied request met is in one of
// four states at the denial's decision (made at some instant of its
// flight, from send to reply):
//
//   - full: its window was full: at least as many of the counter's 2xx as
//     its guarantee allows had flights lying wholly within its lookback
//     before the decision, whatever instant of the flight it was. It
//     justifies the denial. Only admissions known to be inside count, so
//     an honest limiter is never blamed; none outside the lookback is
//     needed, nor any other limit's history.
//   - may deny: enough requests that may have been admitted reach into its
//     lookback, but too few are known inside it.
//   - room: it would surely have admitted the request: fewer than that
//     reach into its lookback, all of which the samples hold.
//   - unknown: it would have admitted what the samples show, but its
//     lookback reaches before they begin (the run's start, the warm-up's
//     end), or the denial came after they stop: what it counted is not
//     known.
//
// A denial that one limit alone justifies, with no other limit full or
// possibly denying, is that limit's own (LimitAudit.DenialsAttributed): it
// shows that the load pushed that limit to its cap. A limit whose state is
// unknown is taken by what the samples show of it (an hour's limit in a
// run of seconds: the run alone never filled it), unless what came before
// shows: a denial on its counter, while its state is unknown, that nothing
// in the run explains (no limit it met full, or possibly denying), as
// when an earlier run's requests still count. Such a denial is put down
// to the unknown limits of the shortest lookback among those it met (the
// most recent requests before the run), and their counter's unknown state
// may have denied any request then. A denial some limit justifies
// or may have made is no under-admission; one that every limit met would
// surely have admitted is; one that neither can be told of is not judged.

// fullWindow is what fills limit e's window on one counter: need
// admissions decided within lookback before a decision. The guarantee
// denies nothing with fewer (algorithms.Guarantee.Lookback); with that
// many, a denial is justified. margin is how far a span seen from outside
// may stray from the limiter's own: a millisecond for the scripts' whole
// milliseconds, and 0.2% for clocks that tick at slightly different rates.
// Every check of a denial, justified or surely false, asks it.
func (e Expectation) fullWindow() (need int64, lookback, margin time.Duration) {
	lookback = e.guarantee.Lookback(e.policy)
	return e.guarantee.Capacity(e.policy), lookback, time.Millisecond + lookback/500
}

// fullSpan is the span over which how far the load got of limit e is
// counted, and how many fill it: a window and the limit, but for a bucket,
// whose burst may be above or below its limit, its lookback (the time the
// burst takes to refill) and the burst.
func (e Expectation) fullSpan() (time.Duration, int64) {
	if need, lookback, _ := e.fullWindow(); e.guarantee == algorithms.BurstRefill {
		return lookback, need
	}
	return e.policy.Window, e.policy.Limit
}

// limitState is what one limit's counter shows at a denial's decision.
type limitState uint8

const (
	stateRoom    limitState = iota // it would surely have admitted it
	stateFull                      // its window was full: it justifies it
	stateMay                       // it may have denied it
	stateUnknown                   // what it counted is not known
)

// checkDenials tells the state of limit exp at each denial of ss, one
// counter's samples, calling f with the denial's index in ss. O(n log n).
//
// A request admitted within a denial's lookback is known inside it when
// its flight began after the lookback did, for the latest instant the
// decision could have been made (its reply), and ended before the
// earliest (its send). One that may have been admitted (any but a 429; any
// at all when a refused request may have spent the limit) may count when
// its flight reaches into the span from a lookback before the denial was
// sent to when it came back.
func checkDenials(ss []Sample, exp Expectation, cov Coverage, f func(i int, st limitState)) {
	need, lookback, margin := exp.fullWindow()
	var okSents, okDones, sents, dones []time.Duration
	for _, s := range ss {
		if s.OK() {
			okSents, okDones = append(okSents, s.Sent), append(okDones, s.Done)
		}
		if !s.Denied() || exp.refusedMaySpend {
			sents, dones = append(sents, s.Sent), append(dones, s.Done)
		}
	}
	for _, d := range [][]time.Duration{okSents, okDones, sents, dones} {
		slices.Sort(d)
	}
	upTo := func(sorted []time.Duration, v time.Duration) int64 { // values <= v
		return int64(sort.Search(len(sorted), func(i int) bool { return sorted[i] > v }))
	}
	below := func(sorted []time.Duration, v time.Duration) int64 { // values < v
		return int64(sort.Search(len(sorted), func(i int) bool { return sorted[i] >= v }))
	}
	for i, d := range ss {
		if !d.Denied() {
			continue
		}
		// Those that ended by its send, less those that began by the
		// lookback's start: a flight that spans the whole lookback is
		// taken away, never added, so the count is never above the truth.
		inside := upTo(okDones, d.Sent) - upTo(okSents, d.Done-lookback+margin)
		from := d.Sent - lookback - margin
		reach := below(sents, d.Done) - upTo(dones, from)
		switch {
		case inside >= need:
			f(i, stateFull)
		case reach >= need:
			f(i, stateMay)
		case from < cov.from || (cov.horizon >= 0 && d.Done >= cov.horizon):
			f(i, stateUnknown)
		default:
			f(i, stateRoom)
		}
	}
}

// denialJudgement is what the audit made of a denial, seen from one limit
// it met.
type denialJudgement uint8

const (
	notDenied denialJudgement = iota
	// ownDenial: this limit alone justifies it, and no other may have
	// made it.
	ownDenial
	// elsewhere: another limit justifies it or may have made it (this one
	// too, maybe).
	elsewhere
	// mayBeOwn: only this limit may have made it, though its window is not
	// known full.
	mayBeOwn
	// underDenial: every limit met would surely have admitted it.
	underDenial
	// unjudged: no limit justifies it or may have made it, and what some
	// limit counted is not known.
	unjudged
)

// judgedUnder says whether the judgement is one of under-admission (or
// not): all but unjudged.
func (j denialJudgement) judgedUnder() bool { return j != notDenied && j != unjudged }

// denialBook keeps, for each denial of a run, the limits in each state,
// and those of the unknown ones whose counter shows what came before
// (suspect).
type denialBook struct {
	at                            []int32 // the denials' indexes among the samples, in order
	full, may, uncounted, suspect []uint64
}

func newDenialBook(samples []Sample) *denialBook {
	b := &denialBook{}
	for i, s := range samples {
		if s.Denied() {
			b.at = append(b.at, int32(i))
		}
	}
	n := len(b.at)
	b.full, b.may, b.uncounted, b.suspect = make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)
	return b
}

// markSuspects finds the counters whose state before the samples shows:
// limit j's counter is suspect when a denial on it, while j's state is
// unknown, met no limit (of enforcing) full or possibly denying, and no
// unknown one of a shorter lookback (lookbacks, by limit). It then marks,
// at each denial, the unknown limits whose counter is suspect.
func (b *denialBook) markSuspects(m Meeting, enforcing uint64, lookbacks []time.Duration) {
	shows := make([][]bool, len(m.of)) // per limit, per counter
	for j, lc := range m.of {
		if enforcing&(1<<j) == 0 {
			continue
		}
		shows[j] = make([]bool, len(lc.names))
		for p, i := range lc.idx {
			d, ok := slices.BinarySearch(b.at, i)
			met := m.met[i] & enforcing
			if !ok || b.uncounted[d]&(1<<j) == 0 || (b.full[d]|b.may[d])&met != 0 {
				continue
			}
			shortest := true
			for u := b.uncounted[d] & met; u != 0; u &= u - 1 {
				shortest = shortest && lookbacks[bits.TrailingZeros64(u)] >= lookbacks[j]
			}
			if shortest {
				shows[j][lc.counter[p]] = true
			}
		}
	}
	for j, lc := range m.of {
		if shows[j] == nil || !slices.Contains(shows[j], true) {
			continue
		}
		for p, i := range lc.idx {
			if d, ok := slices.BinarySearch(b.at, i); ok && b.uncounted[d]&(1<<j) != 0 && shows[j][lc.counter[p]] {
				b.suspect[d] |= 1 << j
			}
		}
	}
}

// note records that limit k was in state st at denial i (its index among
// the samples).
func (b *denialBook) note(i int32, k int, st limitState) {
	j, ok := slices.BinarySearch(b.at, i)
	if !ok {
		return
	}
	switch st {
	case stateFull:
		b.full[j] |= 1 << k
	case stateMay:
		b.may[j] |= 1 << k
	case stateUnknown:
		b.uncounted[j] |= 1 << k
	}
}

// denialView is denial i seen from limit k, among the enforcing limits
// its request met.
type denialView struct {
	judgement denialJudgement
	// otherMayDeny: another limit met would not surely have admitted it.
	otherMayDeny bool
	// rivals are the other limits that justify it or may have made it,
	// when k justifies it too, and unsure those of them whose unknown
	// state did (suspect); uncounted, when unjudged, the limits whose count
	// is not known.
	rivals, unsure, uncounted uint64
}

// view is what denial i (its index among the samples) is to limit k, of
// the enforcing limits met. With skipUnder, no limit is known to have
// room (another machine's requests, or unanswered ones, may count).
func (b *denialBook) view(i int32, k int, met uint64, skipUnder bool) denialView {
	j, ok := slices.BinarySearch(b.at, i)
	if !ok {
		return denialView{}
	}
	own := uint64(1) << k
	full, may, uncounted, suspect := b.full[j]&met, b.may[j]&met, b.uncounted[j]&met, b.suspect[j]&met
	v := denialView{otherMayDeny: (full|may|uncounted)&^own != 0}
	if skipUnder {
		v.otherMayDeny = met&^own != 0
	}
	rivals := (full | may | suspect) &^ own
	switch {
	case full == own && rivals == 0:
		v.judgement = ownDenial
	case full&own != 0:
		v.judgement, v.rivals, v.unsure = elsewhere, rivals, suspect&^own
	case (full|may)&^own != 0:
		v.judgement = elsewhere
	case may == own:
		v.judgement = mayBeOwn
	case uncounted != 0:
		v.judgement, v.uncounted = unjudged, uncounted
	default:
		v.judgement = underDenial
	}
	return v
}

// denialNotes are what a limit's denials say beyond their counts, for its
// reasons: how many its full window justified that another limit may
// have made, and which (unsure: those whose count before the run showed);
// and why some were not judged.
type denialNotes struct {
	sharedFull int64
	rivals     string
	unsure     string
	unjudged   string
}

// limitIDs names the limits of mask by their IDs, in order.
func limitIDs(mask uint64, exps []Expectation) string {
	var ids []string
	for m := mask; m != 0; m &= m - 1 {
		ids = append(ids, exps[bits.TrailingZeros64(m)].ID)
	}
	return plural.List(ids, "and")
}

// unjudgedReason says why denials were not judged: late of them came
// after the samples stop; uncounted[k] of the others met limit k, whose
// lookback reaches before they begin. It says what would judge them.
func unjudgedReason(uncounted *[MaxLimits]int64, late int64, exps []Expectation, cov Coverage) string {
	type cause struct {
		k int
		n int64
	}
	var causes []cause
	var longest time.Duration
	for k, n := range uncounted {
		if n > 0 {
			causes = append(causes, cause{k, n})
			_, lookback, _ := exps[k].fullWindow()
			longest = max(longest, lookback)
		}
	}
	slices.SortStableFunc(causes, func(a, b cause) int { return int(b.n - a.n) })
	var parts []string
	if len(causes) > 0 {
		var named []string
		for _, c := range causes {
			_, lookback, _ := exps[c.k].fullWindow()
			named = append(named, fmt.Sprintf("%s (a look-back of %s; %s)", exps[c.k].ID, rules.Window(lookback), plural.Count(c.n, "denial")))
		}
		where, after := "the run's start", "the first "+rules.Window(longest)
		if cov.from > 0 {
			where = fmt.Sprintf("where the samples begin, %s into the run (after the warm-up)", cov.from.Round(time.Millisecond))
			after = rules.Window(longest) + " after that"
		}
		parts = append(parts, fmt.Sprintf("they met a limit whose look-back reaches before %s, where what it counted is unknown: %s; "+
			"in a run longer than %s, those sent after %s are judged", where, strings.Join(named, ", "), rules.Window(longest), after))
	}
	if late > 0 {
		parts = append(parts, fmt.Sprintf("%d came after the audit stopped keeping requests", late))
	}
	return strings.Join(parts, "; ")
}
