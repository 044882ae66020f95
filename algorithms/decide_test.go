package algorithms_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

func decide(t *testing.T, d *algorithms.Decider, checks ...algorithms.Check) algorithms.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := d.Decide(ctx, checks)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	if len(out.Checks) != len(checks) {
		t.Fatalf("Decide: %d decisions for %d checks", len(out.Checks), len(checks))
	}
	return out
}

// steps are the gaps between the stamps of TestDecideMatchesLimiter's
// requests, for a window of 10 s (the test stretches them to its window):
// bursts at one instant, gaps shorter and longer than a window, and a step
// back (a caller whose clock is behind).
var steps = []time.Duration{
	0, 0, 0, 0, 0, 0, 0, // a burst over the limit
	300 * time.Millisecond, 1 * time.Second, 1700 * time.Millisecond, 0, 2 * time.Second,
	3 * time.Second, 0, 0, 999 * time.Millisecond, time.Millisecond, 4 * time.Second,
	-1500 * time.Millisecond, 0, 500 * time.Millisecond, // the clock steps back
	11 * time.Second, 0, 0, 0, 0, 0, 0, 250 * time.Millisecond, 9750 * time.Millisecond,
	5 * time.Second, 5 * time.Second, 0, 0, 21 * time.Second, 0, 1 * time.Second, 1 * time.Second,
	2 * time.Second, 2 * time.Second, 0, 0, 0, 0, 3333 * time.Millisecond, 0, 0, 0,
}

// TestDecideMatchesLimiter holds each algorithm's single-limit behaviour
// under Decide identical to its Limiter's: on the same sequence of stamps,
// each request gets the same answer, remaining and retry-after.
// On redis-server and on the embedded server alike.
func TestDecideMatchesLimiter(t *testing.T) {
	emb, err := redisrun.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Stop()
	for _, server := range []*redisrun.Server{srv, emb} {
		if server == nil {
			continue
		}
		c := redistest.Client(t, server)
		for _, name := range algorithms.Algorithms() {
			p := algorithms.Policy{Limit: 5, Window: window}
			t.Run(string(server.Mode)+"/"+name, func(t *testing.T) { decideMatchesLimiter(t, c, name, p) })
			if algorithms.HasBurst(name) {
				for _, burst := range []int64{2, 9} {
					p.Burst = burst
					t.Run(fmt.Sprintf("%s/%s/burst-%d", server.Mode, name, burst), func(t *testing.T) { decideMatchesLimiter(t, c, name, p) })
				}
			}
		}
	}
}

func decideMatchesLimiter(t *testing.T, c redis.UniversalClient, name string, p algorithms.Policy) {
	t.Helper()
	stretch := time.Duration(window / (10 * time.Second))
	clock := &fakeClock{now: alignedStart(window).Add(3 * window / 10)}
	l := newLimiter(t, name, c, p, algorithms.WithNow(clock.Now))
	d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now))
	prefix := redistest.Prefix(t)
	lkey, dkey := algorithms.Key(prefix, "limiter"), algorithms.Key(prefix, "decider")
	denied := 0
	for i, step := range steps {
		clock.Add(step * stretch)
		want := allow(t, l, lkey)
		out := decide(t, d, algorithms.Check{Key: dkey, Algorithm: name, Policy: p, Cost: 1})
		got := out.Checks[0]
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter || out.Allowed != want.Allowed {
			t.Fatalf("request %d at %s: Decide %+v (allowed %t), Limiter %+v", i+1, clock.Now().Format("15:04:05.000"), got, out.Allowed, want)
		}
		if i > 0 && out.Calls != 1 {
			t.Fatalf("request %d: %d calls, want 1", i+1, out.Calls)
		}
		if !want.Allowed {
			denied++
		}
	}
	if denied < 3 || denied > len(steps)-3 {
		t.Fatalf("%d of %d requests denied: the sequence must hold admissions and denials", denied, len(steps))
	}
}

// state reads what keys hold, for comparing before and after: each key's
// type and contents (a hash's fields, a sorted set's members and scores).
func state(t *testing.T, c redis.UniversalClient, keys ...string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := map[string]string{}
	for _, k := range keys {
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			t.Fatalf("TYPE %s: %v", k, err)
		}
		var v any
		switch typ {
		case "hash":
			v, err = c.HGetAll(ctx, k).Result()
		case "zset":
			v, err = c.ZRangeWithScores(ctx, k, 0, -1).Result()
		}
		if err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
		s[k] = fmt.Sprintf("%s %v", typ, v)
	}
	return s
}

// checkKeys lists the Redis keys of checks.
func checkKeys(checks []algorithms.Check) []string {
	var keys []string
	for _, c := range checks {
		if c.Algorithm == "sliding-counter" {
			keys = append(keys, c.Key+":0", c.Key+":1")
			continue
		}
		keys = append(keys, c.Key)
	}
	return keys
}

// everyAlgorithm is one check per algorithm on keys under prefix, limit 5
// per window.
func everyAlgorithm(prefix string) []algorithms.Check {
	var checks []algorithms.Check
	for _, name := range algorithms.Algorithms() {
		checks = append(checks, algorithms.Check{Key: algorithms.Key(prefix, name), Algorithm: name,
			Policy: algorithms.Policy{Limit: 5, Window: window}, Cost: 1})
	}
	return checks
}

// TestDecideMixesAlgorithms decides one limit of each algorithm in one call:
// five requests are admitted by all, with remaining counting down in each,
// and the sixth is denied by all, each with its own retry-after.
func TestDecideMixesAlgorithms(t *testing.T) {
	c := redistest.Client(t, srv)
	tenth := window / 10
	clock := &fakeClock{now: alignedStart(window).Add(3 * tenth)} // 3 tenths into an aligned window
	d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now))
	if err := d.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	checks := everyAlgorithm(redistest.Prefix(t))
	for i := range int64(5) {
		out := decide(t, d, checks...)
		if !out.Allowed || out.Calls != 1 {
			t.Fatalf("request %d: allowed %t in %d calls, want admitted in 1", i+1, out.Allowed, out.Calls)
		}
		for j, got := range out.Checks {
			if !got.Allowed || got.Remaining != 5-i-1 || got.Limit != 5 || got.Reset <= 0 {
				t.Fatalf("request %d, %s: %+v, want admitted with remaining %d and a reset", i+1, checks[j].Algorithm, got, 5-i-1)
			}
		}
	}
	// Whole again once every request has left: the aligned window ends
	// (fixed window), the log's newest request leaves it (sliding log), the
	// next aligned window ends (sliding counter), five tokens refill at two
	// tenths each (token bucket), the arrival time is reached (GCRA).
	reset := map[string]time.Duration{
		"fixed-window": 7 * tenth, "sliding-log": 10 * tenth, "sliding-counter": 17 * tenth,
		"token-bucket": 10 * tenth, "gcra": 10 * tenth,
	}
	for j, got := range decide(t, d, zeroCost(checks)...).Checks {
		if got.Reset != reset[checks[j].Algorithm] {
			t.Errorf("%s: reset %s, want %s", checks[j].Algorithm, got.Reset, reset[checks[j].Algorithm])
		}
	}
	out := decide(t, d, checks...)
	want := map[string]time.Duration{ // as TestAlgorithmsUnderFixedClock's
		"fixed-window": 7 * tenth, "sliding-log": 10 * tenth, "sliding-counter": 9 * tenth,
		"token-bucket": 2 * tenth, "gcra": 2 * tenth,
	}
	if out.Allowed {
		t.Fatalf("sixth request admitted: %+v", out)
	}
	for j, got := range out.Checks {
		if got.Allowed || got.RetryAfter != want[checks[j].Algorithm] {
			t.Errorf("sixth request, %s: %+v, want denied with retry-after %s", checks[j].Algorithm, got, want[checks[j].Algorithm])
		}
	}
}

// TestDecideDeniedConsumesNothing: a request denied by one limit leaves
// every other limit's state as it was, whichever algorithm denied it, and
// the limits that admitted report what they have now.
func TestDecideDeniedConsumesNothing(t *testing.T) {
	c := redistest.Client(t, srv)
	for _, denier := range algorithms.Algorithms() {
		t.Run(denier, func(t *testing.T) {
			clock := &fakeClock{now: alignedStart(window).Add(3 * window / 10)}
			d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now))
			checks := everyAlgorithm(redistest.Prefix(t))
			var tight algorithms.Check
			for j, ch := range checks {
				if ch.Algorithm == denier {
					checks[j].Policy.Limit = 2 // full after two requests
					tight = checks[j]
				}
			}
			decide(t, d, checks...) // every limit holds one request
			decide(t, d, tight)     // and the denier two
			clock.Add(window / 10)  // refills a token bucket or GCRA of 2 by a fifth of a request
			before := state(t, c, checkKeys(checks)...)
			out := decide(t, d, checks...)
			if out.Allowed {
				t.Fatalf("admitted over %s's limit: %+v", denier, out)
			}
			for j, got := range out.Checks {
				if got.Allowed == (checks[j].Algorithm == denier) {
					t.Errorf("%s: %+v, want only %s to deny", checks[j].Algorithm, got, denier)
				}
				if checks[j].Algorithm != denier && got.Remaining != 4 {
					t.Errorf("%s: remaining %d, want 4 (nothing consumed)", checks[j].Algorithm, got.Remaining)
				}
			}
			if after := state(t, c, checkKeys(checks)...); !maps.Equal(before, after) {
				t.Fatalf("a denied request changed the limits' state:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestDecideShadow: a shadow limit that denies never denies the request,
// and says it would have; while it admits, the requests are counted in it.
func TestDecideShadow(t *testing.T) {
	c := redistest.Client(t, srv)
	tenth := window / 10
	clock := &fakeClock{now: alignedStart(window).Add(3 * tenth)}
	d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now))
	prefix := redistest.Prefix(t)
	enforced := algorithms.Check{Key: algorithms.Key(prefix, "enforced"), Algorithm: "sliding-log",
		Policy: algorithms.Policy{Limit: 5, Window: window}, Cost: 1}
	shadow := algorithms.Check{Key: algorithms.Key(prefix, "shadow"), Algorithm: "fixed-window",
		Policy: algorithms.Policy{Limit: 2, Window: window}, Cost: 1, Shadow: true}
	for i := range 6 {
		out := decide(t, d, enforced, shadow)
		wantShadow := i < 2
		if out.Allowed != (i < 5) || out.Checks[1].Allowed != wantShadow {
			t.Fatalf("request %d: allowed %t, shadow %+v; want allowed %t, shadow admitting %t", i+1, out.Allowed, out.Checks[1], i < 5, wantShadow)
		}
		if !wantShadow && out.Checks[1].RetryAfter != 7*tenth {
			t.Fatalf("request %d: the shadow limit's retry-after is %s, want %s", i+1, out.Checks[1].RetryAfter, 7*tenth)
		}
	}
	if n, err := c.HGet(context.Background(), shadow.Key, "n").Int64(); err != nil || n != 2 {
		t.Fatalf("the shadow limit counted %d (%v), want 2: the requests it admitted", n, err)
	}
}

// TestDecideCost: a request of cost 2 takes two from each limit and is
// denied when fewer than two remain; one of cost 0 admits while one request
// would be, and takes nothing.
func TestDecideCost(t *testing.T) {
	c := redistest.Client(t, srv)
	for _, name := range algorithms.Algorithms() {
		t.Run(name, func(t *testing.T) {
			clock := &fakeClock{now: alignedStart(window).Add(3 * window / 10)}
			d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now))
			ch := algorithms.Check{Key: algorithms.Key(redistest.Prefix(t), name), Algorithm: name,
				Policy: algorithms.Policy{Limit: 5, Window: window}}
			cost := func(n int64) algorithms.Decision {
				t.Helper()
				ch.Cost = n
				return decide(t, d, ch).Checks[0]
			}
			for i, step := range []struct {
				cost      int64
				allowed   bool
				remaining int64
			}{
				{0, true, 5}, {2, true, 3}, {2, true, 1}, {0, true, 1}, {2, false, 1}, {1, true, 0}, {0, false, 0},
			} {
				before := state(t, c, checkKeys([]algorithms.Check{ch})...)
				got := cost(step.cost)
				if got.Allowed != step.allowed || got.Remaining != step.remaining {
					t.Fatalf("step %d, cost %d: %+v, want allowed %t with remaining %d", i+1, step.cost, got, step.allowed, step.remaining)
				}
				if !got.Allowed && got.RetryAfter <= 0 {
					t.Fatalf("step %d, cost %d: denied with no retry-after", i+1, step.cost)
				}
				if after := state(t, c, checkKeys([]algorithms.Check{ch})...); (step.cost == 0 || !step.allowed) && !maps.Equal(before, after) {
					t.Fatalf("step %d, cost %d: the state changed:\nbefore %v\nafter  %v", i+1, step.cost, before, after)
				}
			}
		})
	}
}
