package algorithms_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
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
// requests: bursts at one instant, gaps shorter and longer than a window,
// and a step back (a caller whose clock is behind).
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
func TestDecideMatchesLimiter(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 5, Window: 10 * time.Second}
	for _, name := range algorithms.Algorithms() {
		t.Run(name, func(t *testing.T) {
			clock := &fakeClock{now: time.UnixMilli(1_700_000_003_000)}
			l := newLimiter(t, name, c, p, algorithms.WithNow(clock.Now))
			d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now))
			prefix := redistest.Prefix(t)
			lkey, dkey := algorithms.Key(prefix, "limiter"), algorithms.Key(prefix, "decider")
			denied := 0
			for i, step := range steps {
				clock.Add(step)
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
		})
	}
}
