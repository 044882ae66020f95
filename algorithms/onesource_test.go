package algorithms_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestSlidingLogReadsAsDecide holds slidinglog.lua, the sliding log
// written to be read, to the scripts built from algorithms/lua: over a
// seeded sequence of requests (bursts, gaps shorter and longer than the
// window, a clock that steps back), the lua limiter (slidinglog.lua), the
// sliding-log limiter (the script built for one sliding log) and a
// Decider running decide.lua admit the same requests and answer the same
// remaining and retry-after, on a real Redis.
func TestSlidingLogReadsAsDecide(t *testing.T) {
	c := redistest.Client(t, srv)
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 27))
			p := algorithms.Policy{Limit: 1 + rng.Int64N(6), Window: 10 * time.Second}
			clock := &fakeClock{now: alignedStart(window).Add(time.Duration(rng.Int64N(int64(window))))}
			prefix := redistest.Prefix(t)
			readable := newLimiter(t, "lua", c, p, algorithms.WithNow(clock.Now))
			built := newLimiter(t, "sliding-log", c, p, algorithms.WithNow(clock.Now))
			d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now), algorithms.DecideWithDecideLua())
			check := algorithms.Check{Key: algorithms.Key(prefix, "decide"), Algorithm: "sliding-log", Policy: p, Cost: 1}
			var admitted, denied int
			for i := range 300 {
				clock.Add(step(rng, p.Window))
				r := allow(t, readable, algorithms.Key(prefix, "readable"))
				b := allow(t, built, algorithms.Key(prefix, "built"))
				g := decide(t, d, check).Checks[0]
				for name, got := range map[string]algorithms.Decision{"built": b, "decide.lua": g} {
					if got.Allowed != r.Allowed || got.Remaining != r.Remaining || got.RetryAfter != r.RetryAfter {
						t.Fatalf("request %d: slidinglog.lua admitted %t, remaining %d, retry-after %s; %s %t, %d, %s",
							i+1, r.Allowed, r.Remaining, r.RetryAfter, name, got.Allowed, got.Remaining, got.RetryAfter)
					}
				}
				if r.Allowed {
					admitted++
				} else {
					denied++
				}
			}
			if admitted < 10 || denied < 10 {
				t.Fatalf("%d admitted and %d denied: the sequence must hold both", admitted, denied)
			}
		})
	}
}

// step is a random gap between requests: often none (a burst), else up to
// a window and a half, and now and then a step back.
func step(rng *rand.Rand, w time.Duration) time.Duration {
	switch n := rng.IntN(10); {
	case n < 4:
		return 0
	case n == 4:
		return -time.Duration(rng.Int64N(int64(w / 5)))
	default:
		return time.Duration(rng.Int64N(int64(w*3/2))) / time.Millisecond * time.Millisecond / 4
	}
}

// TestShapesDecideAsDecideLua holds the scripts built per shape to
// decide.lua: over seeded random requests of one to four limits of random
// algorithms, policies, shadows and costs, on a clock that jumps and steps
// back, a Decider with the shape scripts and one running decide.lua give
// every request the same outcome, limit by limit.
func TestShapesDecideAsDecideLua(t *testing.T) {
	c := redistest.Client(t, srv)
	names := algorithms.Algorithms()
	for seed := range uint64(12) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			clock := &fakeClock{now: alignedStart(window).Add(time.Duration(rng.Int64N(int64(window))))}
			shaped := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now))
			generic := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now), algorithms.DecideWithDecideLua())
			prefix := redistest.Prefix(t)
			var checks []algorithms.Check
			for j := range 1 + rng.IntN(4) {
				name := names[rng.IntN(len(names))]
				p := algorithms.Policy{Limit: 1 + rng.Int64N(5), Window: time.Duration(1+rng.Int64N(10)) * time.Second}
				if algorithms.HasBurst(name) && rng.IntN(2) == 0 {
					p.Burst = 1 + rng.Int64N(8)
				}
				checks = append(checks, algorithms.Check{Key: fmt.Sprintf("%d:%s", j, name), Algorithm: name, Policy: p,
					Shadow: j > 0 && rng.IntN(4) == 0})
			}
			keyed := func(side string) []algorithms.Check {
				out := make([]algorithms.Check, len(checks))
				for j, ch := range checks {
					ch.Key = algorithms.Key(prefix+side, ch.Key)
					ch.Cost = min(rng.Int64N(3), ch.Policy.Capacity())
					out[j] = ch
				}
				return out
			}
			var allowed int
			for i := range 200 {
				clock.Add(step(rng, checks[0].Policy.Window))
				a := keyed("shaped")
				b := make([]algorithms.Check, len(a))
				copy(b, a)
				for j := range b {
					b[j].Key = algorithms.Key(prefix+"generic", checks[j].Key)
				}
				x, y := decide(t, shaped, a...), decide(t, generic, b...)
				if x.Allowed != y.Allowed {
					t.Fatalf("request %d of %v: allowed %t by its shape's script, %t by decide.lua", i+1, a, x.Allowed, y.Allowed)
				}
				for j := range x.Checks {
					p, q := x.Checks[j], y.Checks[j]
					p.Member, q.Member = "", ""
					if p != q {
						t.Fatalf("request %d, limit %d (%s): %+v by its shape's script, %+v by decide.lua", i+1, j+1, a[j].Algorithm, p, q)
					}
				}
				if x.Allowed {
					allowed++
				}
			}
			if allowed == 0 || allowed == 200 {
				t.Fatalf("%d of 200 admitted: the sequence must hold admissions and denials", allowed)
			}
		})
	}
}
