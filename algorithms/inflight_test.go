package algorithms_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// inFlightDeciders are a Decider deciding with the script built for each
// shape and one deciding with decide.lua, on the same clock.
func inFlightDeciders(t *testing.T, clock *fakeClock) map[string]*algorithms.Decider {
	if srv == nil {
		t.Skip("no redis-server on PATH")
	}
	c := redistest.Client(t, srv)
	return map[string]*algorithms.Decider{
		"shape":      algorithms.NewDecider(c, algorithms.DecideNow(clock.Now)),
		"decide.lua": algorithms.NewDecider(c, algorithms.DecideNow(clock.Now), algorithms.DecideWithDecideLua()),
	}
}

// TestInFlightHoldsAndReleases: N slots are taken by N requests and the
// next is refused; a release frees exactly one slot, a second release of
// the same lease frees nothing; a lease not released frees its slot once
// it runs out.
func TestInFlightHoldsAndReleases(t *testing.T) {
	clock := &fakeClock{now: alignedStart(window)}
	for name, d := range inFlightDeciders(t, clock) {
		t.Run(name, func(t *testing.T) {
			const n = 3
			key := algorithms.Key(redistest.Prefix(t), "conc")
			c := algorithms.Check{Key: key, Algorithm: algorithms.InFlight, Policy: algorithms.Policy{Limit: n, Window: window}, Cost: 1}
			var members []string
			for i := range n {
				out := decide(t, d, c)
				if !out.Allowed || out.Checks[0].Member == "" {
					t.Fatalf("request %d: %+v, want admitted with a lease", i+1, out)
				}
				if got := out.Checks[0].Remaining; got != int64(n-1-i) {
					t.Errorf("request %d: remaining %d, want %d", i+1, got, n-1-i)
				}
				members = append(members, out.Checks[0].Member)
			}
			if out := decide(t, d, c); out.Allowed || out.Checks[0].Member != "" {
				t.Fatalf("request %d of %d slots: %+v, want refused with no lease", n+1, n, out)
			}
			ctx := context.Background()
			for range 2 { // the second release of the same lease frees nothing
				if err := d.Release(ctx, key, members[0]); err != nil {
					t.Fatal(err)
				}
			}
			out := decide(t, d, c)
			if !out.Allowed {
				t.Fatalf("after a release: refused, want admitted")
			}
			if out := decide(t, d, c); out.Allowed {
				t.Fatalf("a lease released twice freed two slots")
			}
			// The leases run out: a gateway that died holding them loses them
			// after the lease.
			clock.Set(clock.Now().Add(window))
			for i := range n {
				if out := decide(t, d, c); !out.Allowed {
					t.Fatalf("after the leases ran out, request %d refused", i+1)
				}
			}
			clock.Set(clock.Now().Add(window))
		})
	}
}

// TestInFlightIsAtomicWithRates: a request that a rate limit denies takes
// no slot, and a request refused a slot consumes no rate.
func TestInFlightIsAtomicWithRates(t *testing.T) {
	clock := &fakeClock{now: alignedStart(window)}
	for name, d := range inFlightDeciders(t, clock) {
		for _, alg := range algorithms.Algorithms() {
			t.Run(fmt.Sprintf("%s/%s", name, alg), func(t *testing.T) {
				prefix := redistest.Prefix(t)
				conc := algorithms.Check{Key: algorithms.Key(prefix, "conc"), Algorithm: algorithms.InFlight, Policy: algorithms.Policy{Limit: 2, Window: window}, Cost: 1}
				rate := algorithms.Check{Key: algorithms.Key(prefix, "rate"), Algorithm: alg, Policy: algorithms.Policy{Limit: 3, Window: window}, Cost: 1}
				// Two in flight; the third is refused a slot and consumes no
				// rate: the rate limit has one left.
				for i := range 2 {
					if out := decide(t, d, rate, conc); !out.Allowed {
						t.Fatalf("request %d refused", i+1)
					}
				}
				for i := range 3 {
					out := decide(t, d, rate, conc)
					if out.Allowed || out.Checks[1].Allowed || !out.Checks[0].Allowed {
						t.Fatalf("refused slot %d: %+v, want refused by the in-flight limit alone", i+1, out)
					}
				}
				if out := decide(t, d, rate); !out.Allowed || out.Checks[0].Remaining != 0 {
					t.Fatalf("the rate limit after refused slots: %+v, want its third request admitted, 0 left", out)
				}
				// The rate limit now denies: a request it denies takes no
				// slot, though slots are free once the two are released.
				ctx := context.Background()
				if err := d.Release(ctx, conc.Key, ""); err != nil {
					t.Fatal(err)
				}
				if out := decide(t, d, conc); out.Allowed {
					t.Fatalf("a third slot of two")
				}
				clock.Set(clock.Now().Add(window)) // the leases run out, the rate limit is whole
				rate.Policy.Limit = 1
				rate.Key = algorithms.Key(prefix, "rate2")
				decide(t, d, rate)
				for i := range 3 {
					if out := decide(t, d, rate, conc); out.Allowed || out.Checks[0].Allowed {
						t.Fatalf("request %d over the rate: %+v, want denied by the rate limit", i+1, out)
					}
				}
				for i := range 2 {
					if out := decide(t, d, conc); !out.Allowed {
						t.Fatalf("slot %d taken by a request the rate limit denied", i+1)
					}
				}
				clock.Set(clock.Now().Add(window))
			})
		}
	}
}

// TestInFlightOnCluster: on a Redis Cluster the in-flight limit is decided
// with its consumer's hash tag; a global cap, tagged apart, that denies
// gives the slot back (decide.lua's refund), and a release of one key
// reaches the slot's node.
func TestInFlightOnCluster(t *testing.T) {
	cl := redistest.Cluster(t, srv)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DialTimeout: 2 * time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	t.Cleanup(func() { c.Close() })
	clock := &fakeClock{now: alignedStart(window)}
	d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now), algorithms.DecideOnCluster(true))
	prefix := redistest.Prefix(t)
	conc := algorithms.Check{Key: algorithms.Key("alice-"+prefix, "conc"), Algorithm: algorithms.InFlight,
		Policy: algorithms.Policy{Limit: 5, Window: window}, Cost: 1}
	capped := []algorithms.Check{conc, {Key: algorithms.Key("global-"+prefix, "cap"), Algorithm: "fixed-window",
		Policy: algorithms.Policy{Limit: 1, Window: window}, Cost: 1}}
	first := decide(t, d, capped...)
	if !first.Allowed || first.Calls != 2 || first.Checks[0].Member == "" {
		t.Fatalf("first request: %+v, want admitted in 2 calls with a lease", first)
	}
	if out := decide(t, d, capped...); out.Allowed || out.Checks[0].Member != "" {
		t.Fatalf("second request: %+v, want denied by the cap, holding no lease", out)
	}
	ctx := context.Background()
	if n, err := c.ZCard(ctx, conc.Key).Result(); err != nil || n != 1 {
		t.Fatalf("leases after the cap denied: %d (%v), want the first request's alone", n, err)
	}
	if err := d.Release(ctx, conc.Key, first.Checks[0].Member); err != nil {
		t.Fatal(err)
	}
	if n, err := c.ZCard(ctx, conc.Key).Result(); err != nil || n != 0 {
		t.Fatalf("leases after the release: %d (%v), want 0", n, err)
	}
}
