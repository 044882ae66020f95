package algorithms_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// span is the Span of stamps a..b ms.
func span(a, b int64) algorithms.Span {
	return algorithms.Span{From: time.UnixMilli(a), To: time.UnixMilli(b)}
}

// TestMaxInIsTheWorstAlignment: MaxIn(d) is Max over every placement of a
// span whose stamps are d ms apart, for every guarantee.
func TestMaxInIsTheWorstAlignment(t *testing.T) {
	for _, g := range algorithms.Guarantees() {
		for _, w := range []int64{1, 2, 3, 7, 10} {
			for _, l := range []int64{1, 2, 3, 5, 13} {
				p := algorithms.Policy{Limit: l, Window: time.Duration(w) * time.Millisecond}
				for d := int64(0); d <= 4*w+2; d++ {
					var worst int64
					for a := int64(1000 * w); a < 1000*w+w; a++ {
						worst = max(worst, g.Max(p, span(a, a+d)))
					}
					// A real span of d ms exactly, or a little shorter, has stamps at most d ms apart.
					for _, s := range []time.Duration{time.Duration(d) * time.Millisecond, time.Duration(d)*time.Millisecond - time.Microsecond} {
						if s < 0 {
							continue
						}
						if got := g.MaxIn(p, s); got != worst {
							t.Fatalf("%s %s: MaxIn(%s) = %d, worst alignment of Max = %d", g, p, s, got, worst)
						}
					}
				}
			}
		}
	}
}

// TestGuaranteeFormulas pins each rule at the points the README quotes.
func TestGuaranteeFormulas(t *testing.T) {
	p := algorithms.Policy{Limit: 100, Window: time.Second}
	boundary := int64(1_700_000_000_000) // a multiple of 1 s
	for _, tc := range []struct {
		g    algorithms.Guarantee
		in   time.Duration // MaxIn's span
		want int64
	}{
		{algorithms.SlidingWindow, 999 * time.Millisecond, 100},
		{algorithms.SlidingWindow, 1000 * time.Millisecond, 200}, // stamps a window apart
		{algorithms.AlignedWindows, time.Millisecond, 200},       // across one edge
		{algorithms.AlignedWindows, 1001 * time.Millisecond, 300},
		{algorithms.ExpiryWindows, 0, 100},
		{algorithms.ExpiryWindows, 500 * time.Millisecond, 200},
		{algorithms.BurstRefill, 10 * time.Millisecond, 101}, // GCRA's 101 in a few ms is its guarantee
		{algorithms.BurstRefill, 9999 * time.Microsecond, 101},
		{algorithms.BurstRefill, 9 * time.Millisecond, 100},
		{algorithms.WeightedWindows, time.Millisecond, 100},       // at the edge the last window weighs fully
		{algorithms.WeightedWindows, 999 * time.Millisecond, 199}, // a full window just before an edge
	} {
		if got := tc.g.MaxIn(p, tc.in); got != tc.want {
			t.Errorf("%s: MaxIn(%s) = %d, want %d", tc.g, tc.in, got, tc.want)
		}
	}
	// Where the span lies decides for aligned windows, and for no span rule.
	if got := algorithms.AlignedWindows.Max(p, span(boundary+1, boundary+999)); got != 100 {
		t.Errorf("aligned windows inside one window: %d, want 100", got)
	}
	if got := algorithms.AlignedWindows.Max(p, span(boundary-1, boundary)); got != 200 {
		t.Errorf("aligned windows across an edge: %d, want 200", got)
	}
	if got := algorithms.WeightedWindows.Max(p, span(boundary-1, boundary+500)); got != 150 {
		t.Errorf("weighted windows half-way into the next window: %d, want 150", got)
	}
	fresh := algorithms.Span{From: time.UnixMilli(boundary), To: time.UnixMilli(boundary + 999), Fresh: true}
	if got := algorithms.ExpiryWindows.Max(p, fresh); got != 100 {
		t.Errorf("expiry windows from a fresh key over 999 ms: %d, want 100", got)
	}
	if got := algorithms.ExpiryWindows.Max(p, span(boundary, boundary+999)); got != 200 {
		t.Errorf("expiry windows from a key of unknown age over 999 ms: %d, want 200", got)
	}
	for g, want := range map[algorithms.Guarantee]time.Duration{
		algorithms.SlidingWindow:   time.Second,
		algorithms.AlignedWindows:  time.Second,
		algorithms.ExpiryWindows:   time.Second,
		algorithms.BurstRefill:     10 * time.Millisecond,
		algorithms.WeightedWindows: 1010 * time.Millisecond,
	} {
		if got := g.SlotWithin(p); got != want {
			t.Errorf("%s: SlotWithin = %s, want %s", g, got, want)
		}
	}
	if got, want := algorithms.WeightedWindows.SlotWithin(algorithms.Policy{Limit: 1, Window: time.Second}), 2*time.Second; got != want {
		t.Errorf("weighted windows, limit 1: SlotWithin = %s, want %s", got, want)
	}
	if got := algorithms.BurstRefill.Rule(p); got != "a burst of 100, then 100 per 1s" {
		t.Errorf("rule %q", got)
	}
}

// TestSlotFreesAfter: the earliest a slot can free follows from MaxIn.
func TestSlotFreesAfter(t *testing.T) {
	p := algorithms.Policy{Limit: 3, Window: time.Second}
	t0 := time.UnixMilli(1_700_000_000_000)
	full := []time.Time{t0.Add(20 * time.Millisecond), t0, t0.Add(10 * time.Millisecond)}
	for _, tc := range []struct {
		g        algorithms.Guarantee
		admitted []time.Time
		want     time.Time
	}{
		{algorithms.SlidingWindow, full, t0.Add(999 * time.Millisecond)},   // the oldest leaves the window
		{algorithms.BurstRefill, full, t0.Add(333 * time.Millisecond)},     // one token, 334 ms after the burst began
		{algorithms.AlignedWindows, full, time.Time{}},                     // an edge may come at once
		{algorithms.SlidingWindow, full[:2], time.Time{}},                  // a slot is still free
		{algorithms.SlidingWindow, nil, time.Time{}},                       // nothing admitted
		{algorithms.WeightedWindows, full, t0.Add(334 * time.Millisecond)}, // 3 just before an edge weigh 1 by then
		{algorithms.ExpiryWindows, full, time.Time{}},                      // a key may expire at once
	} {
		if got := tc.g.SlotFreesAfter(p, tc.admitted); !got.Equal(tc.want) {
			t.Errorf("%s after %d admissions: %v, want %v", tc.g, len(tc.admitted), got, tc.want)
		}
	}
}

// TestInfoDecides: which clock decides each limiter's windows.
func TestInfoDecides(t *testing.T) {
	for name, want := range map[string][2]algorithms.Clock{
		"naive":        {algorithms.ClockRedis, algorithms.ClockRedis},
		"watch":        {algorithms.ClockRedis, algorithms.ClockRedis},
		"multi":        {algorithms.ClockCaller, algorithms.ClockCaller},
		"lua":          {algorithms.ClockCaller, algorithms.ClockRedis},
		"fixed-window": {algorithms.ClockCaller, algorithms.ClockRedis},
	} {
		info, _ := algorithms.Lookup(name)
		if got := [2]algorithms.Clock{info.Decides(algorithms.ClockCaller), info.Decides(algorithms.ClockRedis)}; got != want {
			t.Errorf("%s decides on %v, want %v", name, got, want)
		}
	}
	for _, info := range algorithms.Registered() {
		if info.Guarantee == "" {
			t.Errorf("%s states no guarantee", info.Name)
		}
	}
}

// TestGuaranteesHoldAndAreReached drives each algorithm's script on
// redis-server with a caller clock the test moves a hundredth of the window
// at a time, from several places relative to an aligned edge: a greedy
// client that asks until denied at every step is admitted exactly what the
// guarantee allows (where the bound is exact) and never more, and every
// retry-after is within SlotWithin. Steps and offsets are counted in
// hundredths of the window (an hour's, so that no key expires in Redis
// however long the test takes).
func TestGuaranteesHoldAndAreReached(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 10, Window: window}
	w := p.Window.Milliseconds()
	step := w / 100
	edge := alignedStart(p.Window).UnixMilli()
	names := append([]string{"lua", "multi"}, algorithms.Algorithms()...)
	for _, name := range names {
		info, _ := algorithms.Lookup(name)
		g := info.Guarantee
		for _, from := range []int64{-1, -30, 0} {
			for _, steps := range []int64{0, 1, 99, 100, 170} {
				t.Run(fmt.Sprintf("%s/%+d/%d", name, from, steps), func(t *testing.T) {
					start, end := edge+from*step, edge+(from+steps)*step
					clock := &fakeClock{now: time.UnixMilli(start)}
					l := newLimiter(t, name, c, p, algorithms.WithNow(clock.Now))
					key := algorithms.Key(redistest.Prefix(t), name)
					var stamps []int64
					for ms := start; ms <= end; ms += step {
						clock.Set(time.UnixMilli(ms))
						for range 3 * p.Limit {
							dec := allow(t, l, key)
							if !dec.Allowed {
								if slot := g.SlotWithin(p); dec.RetryAfter > slot {
									t.Fatalf("retry-after %s beyond the guarantee's %s", dec.RetryAfter, slot)
								}
								break
							}
							stamps = append(stamps, ms)
						}
					}
					c.Del(context.Background(), algorithms.KeysOf(l, key)...)
					// Never more than the guarantee over any sub-span.
					for i := range stamps {
						for j := i; j < len(stamps); j++ {
							if n, bound := int64(j-i+1), g.Max(p, span(stamps[i], stamps[j])); n > bound {
								t.Fatalf("%d admitted stamped %d..%d steps from the edge, guarantee %d",
									n, (stamps[i]-edge)/step, (stamps[j]-edge)/step, bound)
							}
						}
					}
					bound := g.Max(p, span(start, end))
					exact := g != algorithms.WeightedWindows || end/w-start/w <= 1
					if got := int64(len(stamps)); got > bound || (exact && got != bound) {
						t.Fatalf("greedy client admitted %d over %d..%d steps from the edge, guarantee %d", got, from, from+steps, bound)
					}
				})
			}
		}
	}
}

// TestGuaranteesHoldUnderShuffledStamps: decisions whose times reach Redis
// out of order (requests in flight side by side) still keep each
// algorithm's guarantee. A script may take a stale time as the newest it has
// seen, so each admission is placed only within [the time it read, the
// latest time read so far], as a flight from send to reply places it, and
// a span counts only the admissions placed wholly inside it. Times are
// counted in fiftieths of the window (an hour's, so that no key expires in
// Redis however long the test takes).
func TestGuaranteesHoldUnderShuffledStamps(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 5, Window: window}
	step := p.Window.Milliseconds() / 50
	base := alignedStart(p.Window).UnixMilli() - 7*step
	for _, name := range append([]string{"lua"}, algorithms.Algorithms()...) {
		info, _ := algorithms.Lookup(name)
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			clock := &fakeClock{}
			l := newLimiter(t, name, c, p, algorithms.WithNow(clock.Now))
			key := algorithms.Key(redistest.Prefix(t), name)
			defer c.Del(context.Background(), algorithms.KeysOf(l, key)...)
			// 400 requests over four windows, each read up to 5 steps before the one decided before it.
			type placed struct{ lo, hi int64 }
			var adm []placed
			latest := int64(0)
			for i := range 400 {
				ms := base + (int64(i)/2-rng.Int64N(6))*step
				latest = max(latest, ms)
				clock.Set(time.UnixMilli(ms))
				if allow(t, l, key).Allowed {
					adm = append(adm, placed{ms, latest})
				}
			}
			if len(adm) < 3*int(p.Limit) {
				t.Fatalf("only %d admitted", len(adm))
			}
			for _, first := range adm {
				for _, last := range adm {
					x, y := first.lo, last.hi
					if y < x {
						continue
					}
					var n int64
					for _, a := range adm {
						if a.lo >= x && a.hi <= y {
							n++
						}
					}
					if bound := info.Guarantee.Max(p, span(x, y)); n > bound {
						t.Fatalf("%d admitted within %d..%d steps, guarantee %d", n, (x-base)/step, (y-base)/step, bound)
					}
				}
			}
		})
	}
}

// TestDenialsLookBack: each algorithm's script, driven with a caller clock
// that moves forward in random steps and a client that asks in random
// bursts, denies a request only when at least the limit of the client's
// admissions were stamped within the guarantee's Lookback before it. A
// denial with fewer would be one the guarantee admits: the bench audit
// counts such denials as under-admission, and must never find one in an
// honest limiter. The clock steps in fiftieths of the window (an hour's, so
// that no key expires in Redis however long the test takes).
func TestDenialsLookBack(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 5, Window: window}
	step := p.Window / 50
	for _, name := range append([]string{"lua"}, algorithms.Algorithms()...) {
		info, _ := algorithms.Lookup(name)
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(len(name))))
			clock := &fakeClock{now: alignedStart(p.Window).Add(-13 * step)}
			l := newLimiter(t, name, c, p, algorithms.WithNow(clock.Now))
			key := algorithms.Key(redistest.Prefix(t), name)
			defer c.Del(context.Background(), algorithms.KeysOf(l, key)...)
			back := info.Guarantee.Lookback(p).Milliseconds()
			var admitted []int64
			denials, tight := 0, 0
			for range 800 {
				clock.Add(time.Duration(rng.IntN(4)) * step)
				now := clock.Now().UnixMilli()
				for range rng.IntN(4) {
					if allow(t, l, key).Allowed {
						admitted = append(admitted, now)
						continue
					}
					denials++
					var n int64
					for _, a := range admitted {
						if a > now-back {
							n++
						}
					}
					if n < p.Limit {
						t.Fatalf("denied at %d ms with %d admitted in the %d ms before: the guarantee admits it", now, n, back)
					}
					if n == p.Limit {
						tight++
					}
				}
			}
			if denials == 0 || tight == 0 {
				t.Fatalf("%d denials, %d at exactly the limit: the test proves nothing", denials, tight)
			}
		})
	}
}

// TestBurstFormulas pins BurstRefill with a burst apart from the limit:
// nginx's rate=10r/s burst=5 (6 at one instant, then one every 100 ms),
// and a burst above the limit.
func TestBurstFormulas(t *testing.T) {
	g := algorithms.BurstRefill
	for _, tc := range []struct {
		p        algorithms.Policy
		in       time.Duration // MaxIn's span
		want     int64
		lookback time.Duration
		rule     string
	}{
		{algorithms.Policy{Limit: 10, Window: time.Second, Burst: 6}, 0, 6, 600 * time.Millisecond, "a burst of 6, then 10 per 1s"},
		{algorithms.Policy{Limit: 10, Window: time.Second, Burst: 6}, 99 * time.Millisecond, 6, 600 * time.Millisecond, ""},
		{algorithms.Policy{Limit: 10, Window: time.Second, Burst: 6}, 100 * time.Millisecond, 7, 600 * time.Millisecond, ""},
		{algorithms.Policy{Limit: 10, Window: time.Second, Burst: 6}, 3 * time.Second, 36, 600 * time.Millisecond, ""},
		{algorithms.Policy{Limit: 10, Window: time.Second, Burst: 40}, time.Second, 50, 4 * time.Second, "a burst of 40, then 10 per 1s"},
		{algorithms.Policy{Limit: 3, Window: time.Second, Burst: 2}, 0, 2, 667 * time.Millisecond, ""}, // 2 × 1000 / 3, rounded up
		{algorithms.Policy{Limit: 10, Window: time.Second}, 0, 10, time.Second, "a burst of 10, then 10 per 1s"},
	} {
		if got := g.MaxIn(tc.p, tc.in); got != tc.want {
			t.Errorf("%s: MaxIn(%s) = %d, want %d", tc.p, tc.in, got, tc.want)
		}
		if got := g.Lookback(tc.p); got != tc.lookback {
			t.Errorf("%s: Lookback = %s, want %s", tc.p, got, tc.lookback)
		}
		if got := g.Capacity(tc.p); got != tc.p.Capacity() {
			t.Errorf("%s: Capacity = %d, want the burst", tc.p, got)
		}
		if got := g.SlotWithin(tc.p); got != time.Duration((tc.p.Window.Milliseconds()+tc.p.Limit-1)/tc.p.Limit)*time.Millisecond {
			t.Errorf("%s: SlotWithin = %s, want one emission interval", tc.p, got)
		}
		if got := g.Rule(tc.p); tc.rule != "" && got != tc.rule {
			t.Errorf("%s: Rule = %q, want %q", tc.p, got, tc.rule)
		}
	}
	// Every other guarantee is judged by the limit.
	p := algorithms.Policy{Limit: 10, Window: time.Second}
	for _, o := range algorithms.Guarantees() {
		if got := o.Capacity(p); got != 10 {
			t.Errorf("%s: Capacity = %d, want the limit", o, got)
		}
	}
	full := []time.Time{time.UnixMilli(0), time.UnixMilli(0), time.UnixMilli(0), time.UnixMilli(0), time.UnixMilli(0), time.UnixMilli(0)}
	if got, want := g.SlotFreesAfter(algorithms.Policy{Limit: 10, Window: time.Second, Burst: 6}, full), time.UnixMilli(99); !got.Equal(want) {
		t.Errorf("6 at once under 10/1s:burst=6: a slot frees after %v, want %v", got, want)
	}
}

// burstPolicies are the limits with a burst that the bucket tests drive,
// each on the hour-long window: below the limit (nginx's rate and burst),
// above it, a burst of one, a limit of one, and the default (the limit).
var burstPolicies = []algorithms.Policy{
	{Limit: 10, Window: window, Burst: 6},
	{Limit: 10, Window: window, Burst: 25},
	{Limit: 7, Window: window, Burst: 1},
	{Limit: 1, Window: window, Burst: 4},
	{Limit: 3, Window: window},
}

// bucketPaths are the two ways a bucket is decided: its own script (the
// Limiter: ratelab compare, the race) and decide.lua (the Decider: the
// gateways, the rate limit service and the nginx module).
var bucketPaths = []string{"limiter", "decider"}

// bucket decides one client's requests under the burst algorithm name
// with policy p on clock, by path; decisions through the Decider carry
// Reset.
func bucket(t *testing.T, c redis.UniversalClient, path, name string, p algorithms.Policy, clock *fakeClock) func() algorithms.Decision {
	t.Helper()
	key := algorithms.Key(redistest.Prefix(t), name)
	t.Cleanup(func() { c.Del(context.Background(), key) })
	if path == "limiter" {
		l := newLimiter(t, name, c, p, algorithms.WithNow(clock.Now))
		return func() algorithms.Decision { return allow(t, l, key) }
	}
	d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now))
	return func() algorithms.Decision {
		return decide(t, d, algorithms.Check{Key: key, Algorithm: name, Policy: p, Cost: 1}).Checks[0]
	}
}

// TestBurstGuaranteesHoldAndAreReached drives the token bucket and GCRA,
// through their own scripts and through decide.lua, for several limits,
// windows and bursts, with a greedy client that asks until denied at every
// step of a caller clock moved a hundredth of the window at a time: it is
// admitted exactly what BurstRefill allows over the run (the burst at
// once, then the refill) and never more over any sub-span; every remaining
// is what the same instant then admits, and every retry-after is within
// SlotWithin.
func TestBurstGuaranteesHoldAndAreReached(t *testing.T) {
	c := redistest.Client(t, srv)
	g := algorithms.BurstRefill
	for _, p := range burstPolicies {
		step := p.Window.Milliseconds() / 100
		for _, name := range []string{"token-bucket", "gcra"} {
			for _, path := range bucketPaths {
				for _, steps := range []int64{0, 1, 37, 250} {
					t.Run(fmt.Sprintf("%d-per-%s-burst-%d/%s/%s/%d", p.Limit, p.Window, p.Capacity(), name, path, steps), func(t *testing.T) {
						start := alignedStart(p.Window).UnixMilli() + 13*step
						end := start + steps*step
						clock := &fakeClock{now: time.UnixMilli(start)}
						ask := bucket(t, c, path, name, p, clock)
						var stamps []int64
						for ms := start; ms <= end; ms += step {
							clock.Set(time.UnixMilli(ms))
							promised := int64(-1) // the remaining the last admission told
							for range 3*p.Capacity() + 3 {
								dec := ask()
								if !dec.Allowed {
									if promised > 0 {
										t.Fatalf("%d ms in: denied after an admission said %d remained", ms-start, promised)
									}
									if slot := g.SlotWithin(p); dec.RetryAfter <= 0 || dec.RetryAfter > slot {
										t.Fatalf("retry-after %s: want within the guarantee's %s", dec.RetryAfter, slot)
									}
									break
								}
								if promised == 0 {
									t.Fatalf("%d ms in: admitted after an admission said 0 remained", ms-start)
								}
								if dec.Remaining > p.Capacity()-1 {
									t.Fatalf("remaining %d after an admission: the burst is %d", dec.Remaining, p.Capacity())
								}
								promised = dec.Remaining
								stamps = append(stamps, ms)
							}
						}
						for i := range stamps {
							for j := i; j < len(stamps); j++ {
								if n, bound := int64(j-i+1), g.Max(p, span(stamps[i], stamps[j])); n > bound {
									t.Fatalf("%d admitted stamped %d..%d ms in, guarantee %d", n, stamps[i]-start, stamps[j]-start, bound)
								}
							}
						}
						// A bucket that holds two tokens or more never overflows
						// with a step's refill (under one) on top of a drained
						// bucket's fraction: the bound is reached. A bucket of
						// one may overflow and lose the fraction.
						got, want := int64(len(stamps)), g.Max(p, span(start, end))
						if got > want || (p.Capacity() >= 2 && got != want) {
							t.Fatalf("greedy client admitted %d over %d steps, guarantee %d", got, steps, want)
						}
					})
				}
			}
		}
	}
}

// TestBurstRetryAfterAndResetAreHonest: after a denial, the bucket admits
// again exactly when its retry-after says (not a millisecond before), and
// through decide.lua an admission's reset is when the bucket holds its
// whole burst again: a client that waits that long is admitted the burst
// at once. The clock moves in random steps, the client asks in random
// bursts.
func TestBurstRetryAfterAndResetAreHonest(t *testing.T) {
	c := redistest.Client(t, srv)
	for _, p := range burstPolicies {
		for _, name := range []string{"token-bucket", "gcra"} {
			for _, path := range bucketPaths {
				t.Run(fmt.Sprintf("%s/%s/%s", p, name, path), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(3, uint64(p.Limit*100+p.Burst)))
					clock := &fakeClock{now: alignedStart(p.Window).Add(7 * time.Minute)}
					ask := bucket(t, c, path, name, p, clock)
					step := p.Window / 200
					retries, resets := 0, 0
					for range 300 {
						clock.Add(time.Duration(rng.IntN(5)) * step)
						dec := ask()
						if !dec.Allowed {
							retries++
							if dec.RetryAfter > time.Millisecond {
								clock.Add(dec.RetryAfter - time.Millisecond)
								if early := ask(); early.Allowed {
									t.Fatalf("admitted a millisecond before the retry-after of %s", dec.RetryAfter)
								}
								clock.Add(time.Millisecond)
							} else {
								clock.Add(dec.RetryAfter)
							}
							if dec = ask(); !dec.Allowed {
								t.Fatalf("denied after waiting the retry-after of %s", dec.RetryAfter)
							}
						}
						if path == "decider" && rng.IntN(4) == 0 {
							resets++
							clock.Add(dec.Reset)
							for i := range p.Capacity() {
								if !ask().Allowed {
									t.Fatalf("after the reset of %s: request %d of the burst of %d denied", dec.Reset, i+1, p.Capacity())
								}
							}
							if ask().Allowed {
								t.Fatalf("more than the burst of %d admitted at once", p.Capacity())
							}
						}
					}
					if retries < 10 || (path == "decider" && resets < 3) {
						t.Fatalf("%d denials, %d resets: the test proves nothing", retries, resets)
					}
				})
			}
		}
	}
}

// TestBurstDenialsLookBack is TestDenialsLookBack for buckets with a
// burst apart from the limit: each denial follows at least the guarantee's
// Capacity (the burst) of admissions within its Lookback (burst × window /
// limit), through both scripts, and some follow exactly that many, so
// that neither bound is loose.
func TestBurstDenialsLookBack(t *testing.T) {
	c := redistest.Client(t, srv)
	g := algorithms.BurstRefill
	for _, p := range burstPolicies {
		for _, name := range []string{"token-bucket", "gcra"} {
			for _, path := range bucketPaths {
				t.Run(fmt.Sprintf("%s/%s/%s", p, name, path), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(11, uint64(p.Limit*100+p.Burst)))
					step := g.Lookback(p) / 20
					clock := &fakeClock{now: alignedStart(p.Window).Add(-13 * step)}
					ask := bucket(t, c, path, name, p, clock)
					back, need := g.Lookback(p).Milliseconds(), g.Capacity(p)
					var admitted []int64
					denials, tight := 0, 0
					for range 800 {
						clock.Add(time.Duration(rng.IntN(4)) * step)
						now := clock.Now().UnixMilli()
						for range rng.IntN(int(min(p.Capacity(), 6)) + 2) {
							if ask().Allowed {
								admitted = append(admitted, now)
								continue
							}
							denials++
							var n int64
							for _, a := range admitted {
								if a > now-back {
									n++
								}
							}
							if n < need {
								t.Fatalf("denied at %d ms with %d admitted in the %d ms before: the guarantee admits it", now, n, back)
							}
							if n == need {
								tight++
							}
						}
					}
					if denials == 0 || tight == 0 {
						t.Fatalf("%d denials, %d at exactly the burst: the test proves nothing", denials, tight)
					}
				})
			}
		}
	}
}
