package algorithms

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Guarantee names the rule a limiter promises to hold for one client, and
// answers, as code, what that rule allows: the most a client may be admitted
// over a span of time, and how long a denied client may be kept waiting.
// Verdicts ("leaked", "over-admitted") must be judged with the limiter's own
// guarantee, never with another algorithm's.
//
// Every bound assumes:
//
//   - One clock decides: Info.Decides says which. It advances at the rate of
//     the clock that measures the span and never steps back. Clocks that
//     disagree (several callers' clocks, each off by its own offset) void
//     every bound; that is what ratelab skew measures.
//   - The scripts keep time in whole milliseconds, floored: the decisions of
//     a span of real time of length s carry stamps at most ceil(s / 1ms)
//     apart. Aligned windows (fixed window, sliding counter) are aligned to
//     the epoch of the clock that decides.
//   - Every decision is made less than a window after it read its time (no
//     request in flight for a window or more), and nothing but the limiter
//     writes the client's keys.
//   - Key expiry, on Redis's clock, wipes a client's state only after a
//     window or more without writes. On a clock that advances with real time
//     that frees nothing the clock had not already freed; a frozen or slow
//     caller clock (a test's) can be freed by it, which Span does not cover.
type Guarantee string

const (
	// SlidingWindow is the sliding-window log's rule: at most Limit
	// admissions whose stamps lie within Window − 1 ms of each other (a
	// request stamped s counts while now − Window < s ≤ now). The race's lua,
	// multi (on the caller's clock) and users' scripts are judged by it.
	SlidingWindow Guarantee = "sliding-window"
	// AlignedWindows is the fixed window's rule: at most Limit per window
	// [k × Window, (k+1) × Window) of the clock that decides, so a span that
	// touches k aligned windows may admit k × Limit (2 × Limit across one edge).
	AlignedWindows Guarantee = "aligned-windows"
	// ExpiryWindows is the rule of the counters that keep their window in the
	// key's expiry on Redis's clock (naive, watch): at most Limit per key
	// lifetime, a window that starts at the key's first write. Windows are not
	// aligned to anything a caller can see.
	ExpiryWindows Guarantee = "expiry-windows"
	// BurstRefill is the token bucket's and GCRA's rule: at most
	// Burst + floor(Limit × d / Window) in a span whose stamps are d ms
	// apart, Burst being Policy.Capacity() (the limit unless given): a full
	// bucket, then the refill.
	BurstRefill Guarantee = "burst-refill"
	// WeightedWindows is the sliding-window counter's rule: at most Limit per
	// aligned window, and in the current window at most
	// Limit − last × (Window − elapsed) / Window, where last is the previous
	// aligned window's count and elapsed how far the current one has run.
	WeightedWindows Guarantee = "weighted-windows"
)

// Guarantees lists every guarantee.
func Guarantees() []Guarantee {
	return []Guarantee{SlidingWindow, AlignedWindows, ExpiryWindows, BurstRefill, WeightedWindows}
}

// Rule says in words what g allows under p: "at most 5 in any 10s span".
func (g Guarantee) Rule(p Policy) string {
	w := p.Window.String()
	switch g {
	case AlignedWindows:
		return fmt.Sprintf("at most %d per aligned %s window", p.Limit, w)
	case ExpiryWindows:
		return fmt.Sprintf("at most %d per %s key lifetime", p.Limit, w)
	case BurstRefill:
		return fmt.Sprintf("a burst of %d, then %d per %s", p.Capacity(), p.Limit, w)
	case WeightedWindows:
		return fmt.Sprintf("at most %d per aligned %s window, less the last window's weighted count", p.Limit, w)
	}
	return fmt.Sprintf("at most %d in any %s span", p.Limit, w)
}

// Span is a stretch of the clock that decides, over which Max is asked.
type Span struct {
	// From and To bound the times, read on the clock that decides, of every
	// decision counted: each decision read its time in [From, To].
	From, To time.Time
	// Fresh is set when the client had no state before From (a new key, as
	// in each race trial). Only ExpiryWindows, whose windows start at a key's
	// first write, is the tighter for it.
	Fresh bool
}

// Max is the most one client may be admitted by decisions that read their
// time, on the clock that decides, within s. It knows where s lies, so
// aligned windows are counted exactly.
func (g Guarantee) Max(p Policy, s Span) int64 {
	a, b := s.From.UnixMilli(), s.To.UnixMilli()
	if b < a {
		a, b = b, a
	}
	return g.maxStamped(p, a, b, s.Fresh)
}

// MaxIn is the most one client may be admitted by decisions made within any
// span of real time of length s, wherever the span lies (the worst
// alignment to aligned windows) and whatever the client did before it.
// A count taken from the outside must only count decisions known to lie
// inside the span: requests whose whole flight, from send to reply, does.
func (g Guarantee) MaxIn(p Policy, s time.Duration) int64 {
	return g.maxApart(p, ceilMillis(s))
}

// SlotWithin is the longest a client denied now, which is admitted nothing
// meanwhile, can be kept waiting until a request of it is admitted: every
// honest Retry-After is at most this, and a client that waits this long is
// admitted. It is measured on the clock that decides.
func (g Guarantee) SlotWithin(p Policy) time.Duration {
	w := p.windowMillis()
	perSlot := ceilDiv(w, p.Limit) // one emission interval, rounded up to the script's milliseconds
	switch g {
	case BurstRefill:
		return time.Duration(perSlot) * time.Millisecond
	case WeightedWindows:
		// Denied at the start of a window that is full: the next window
		// starts with this one's count weighing fully, and admits once it
		// weighs limit − 1, a window over limit later.
		return time.Duration(w+perSlot) * time.Millisecond
	}
	return p.Window
}

// Lookback is how far back a decision under g looks at the client's
// admissions: a request is denied only when at least Capacity of them
// were made by decisions stamped within the Lookback before its own
// (stamps after its stamp less the Lookback), on the clock that decides.
// A denial with fewer is one the guarantee would have admitted. Each
// aligned window (fixed window), key lifetime and sliding log looks back a
// window; the sliding counter weighs the last aligned window too, and so
// looks back two. A bucket (token bucket, GCRA) of Burst refilling Limit
// per Window forgets after Burst × Window / Limit, rounded up to the
// scripts' milliseconds (a window, when Burst is Limit): in that time it
// refills at least Burst, so k admissions within it leave room for
// Burst − k more.
func (g Guarantee) Lookback(p Policy) time.Duration {
	switch g {
	case WeightedWindows:
		return 2 * p.Window
	case BurstRefill:
		// Burst × window in ms is below 2^53 (Policy.Validate).
		return time.Duration(ceilDiv(p.Capacity()*p.windowMillis(), p.Limit)) * time.Millisecond
	}
	return p.Window
}

// Capacity is how many admissions within the Lookback before a decision
// make a denial due under g: a denial with fewer is one the guarantee
// would have admitted. It is Policy.Capacity() for a bucket (the burst,
// which may be below or above the limit), and the limit for every window.
func (g Guarantee) Capacity(p Policy) int64 {
	if g == BurstRefill {
		return p.Capacity()
	}
	return p.Limit
}

// SlotFreesAfter is the latest moment at which a client admitted at the
// given times (read on the clock that decides, in any order) still cannot be
// admitted again under g: one more admission at or before it would put more
// than MaxIn into some span. The zero time means a slot may be free at once,
// right after the last admission. A success that came back before it breaks
// the guarantee.
func (g Guarantee) SlotFreesAfter(p Policy, admitted []time.Time) time.Time {
	ts := slices.Clone(admitted)
	slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
	var latest time.Time
	n := int64(len(ts))
	for i, t := range ts {
		need := n - int64(i) + 1 // these admissions and one more
		d := g.minApart(p, need)
		if d == 0 {
			continue
		}
		// A span must be longer than d − 1 ms to hold them all.
		if until := t.Add(time.Duration(d-1) * time.Millisecond); until.After(latest) {
			latest = until
		}
	}
	if len(ts) == 0 || !latest.After(ts[len(ts)-1]) {
		return time.Time{}
	}
	return latest
}

// maxStamped is the most admitted by decisions stamped a..b (ms, inclusive)
// on the clock that decides.
func (g Guarantee) maxStamped(p Policy, a, b int64, fresh bool) int64 {
	l, w, d := p.Limit, p.windowMillis(), b-a
	switch g {
	case AlignedWindows:
		return mulSat(l, floorDiv(b, w)-floorDiv(a, w)+1)
	case ExpiryWindows:
		if fresh {
			// The first key is created at or after a and lives a window; each
			// later one is created after the last expired.
			return mulSat(l, d/w+1)
		}
		return mulSat(l, ceilDiv(d, w)+1)
	case BurstRefill:
		return addSat(p.Capacity(), refill(l, d, w))
	case WeightedWindows:
		wa, wb := floorDiv(a, w), floorDiv(b, w)
		if wa == wb {
			return l
		}
		// Every window before b's admits at most the limit. In b's window,
		// an admission at elapsed e needs last × (w − e) + n × w ≤ limit × w,
		// so that window and the one before it admit together at most
		// limit + last × e / w ≤ limit + limit × y / w, y being b's elapsed.
		y := b - wb*w
		return addSat(mulSat(l, wb-wa), l*y/w)
	}
	// SlidingWindow: each run of w consecutive milliseconds holds at most
	// the limit (the newest admission of a run still sees the others).
	return mulSat(l, d/w+1)
}

// maxApart is the most admitted by decisions stamped at most d ms apart,
// wherever they lie and whatever came before.
func (g Guarantee) maxApart(p Policy, d int64) int64 {
	l, w := p.Limit, p.windowMillis()
	switch g {
	case AlignedWindows, ExpiryWindows:
		return mulSat(l, ceilDiv(d, w)+1)
	case WeightedWindows:
		if d == 0 {
			return l
		}
		// maxStamped over every alignment: the span ends as late in its
		// window as it can while still crossing ceil(d / w) boundaries.
		c := ceilDiv(d, w)
		r := d - (c-1)*w
		return addSat(mulSat(l, c), l*(r-1)/w)
	}
	return g.maxStamped(p, 0, d, false)
}

// minApart is the fewest milliseconds apart that n admissions' stamps can
// be under g: 0 when n fit at one instant.
func (g Guarantee) minApart(p Policy, n int64) int64 {
	if g.maxApart(p, 0) >= n {
		return 0
	}
	lo, hi := int64(0), int64(1)
	for g.maxApart(p, hi) < n {
		if hi > math.MaxInt64/4 {
			return hi
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 { // maxApart(lo) < n <= maxApart(hi)
		mid := lo + (hi-lo)/2
		if g.maxApart(p, mid) >= n {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// refill is floor(l × d / w) without overflow: what a bucket refills in d ms.
func refill(l, d, w int64) int64 {
	return addSat(mulSat(l, d/w), l*(d%w)/w) // l × w < 2^53 (Policy.Validate)
}

// ceilMillis is s in whole milliseconds, rounded up; 0 for s <= 0.
func ceilMillis(s time.Duration) int64 {
	if s <= 0 {
		return 0
	}
	return ceilDiv(int64(s), int64(time.Millisecond))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
