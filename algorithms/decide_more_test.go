package algorithms_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestDecideConcurrent: goroutines released together on two limits of one
// key, 5 per unit and 12 per ten units (as 5/1s and 12/10s), admit in each
// round, a unit apart, exactly what the same requests decided one at a time
// admit: never more than either limit, never less. The clock is the test's,
// moved only between rounds, so scheduling cannot change an answer, and the
// unit is the package's hour-long window, so no key expires meanwhile.
func TestDecideConcurrent(t *testing.T) {
	c := redistest.Client(t, srv)
	const goroutines, rounds = 16, 25
	for _, pair := range [][2]string{
		{"sliding-log", "sliding-log"}, {"fixed-window", "fixed-window"}, {"sliding-counter", "sliding-counter"},
		{"token-bucket", "token-bucket"}, {"gcra", "gcra"}, {"sliding-log", "gcra"}, {"token-bucket", "sliding-counter"},
	} {
		t.Run(pair[0]+"+"+pair[1], func(t *testing.T) {
			clock := &fakeClock{now: alignedStart(10 * window)}
			d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now))
			prefix := redistest.Prefix(t)
			checks := func(who string) []algorithms.Check {
				return []algorithms.Check{
					{Key: algorithms.Key(prefix+who, "one"), Algorithm: pair[0], Policy: algorithms.Policy{Limit: 5, Window: window}, Cost: 1},
					{Key: algorithms.Key(prefix+who, "ten"), Algorithm: pair[1], Policy: algorithms.Policy{Limit: 12, Window: 10 * window}, Cost: 1},
				}
			}
			raced, alone := checks("raced"), checks("alone")
			var got, want []int
			for range rounds {
				n := 0
				for range goroutines {
					if decide(t, d, alone...).Allowed {
						n++
					}
				}
				want = append(want, n)
				got = append(got, burst(t, d, raced, goroutines))
				clock.Add(window)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("admitted per round, raced %v, one at a time %v", got, want)
			}
			if pair == [2]string{"sliding-log", "sliding-log"} {
				exact := "[5 5 2 0 0 0 0 0 0 0 5 5 2 0 0 0 0 0 0 0 5 5 2 0 0]"
				if fmt.Sprint(got) != exact {
					t.Fatalf("admitted per round %v, want %s", got, exact)
				}
			}
		})
	}
}

// burst releases n goroutines together, each deciding checks once, and
// returns how many were admitted.
func burst(t *testing.T, d *algorithms.Decider, checks []algorithms.Check, n int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	var errs []error
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := d.Decide(ctx, checks)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if out.Allowed {
				admitted++
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return admitted
}

// TestDecideOnCluster: on a Redis Cluster a consumer's limits share a hash
// tag and are decided in one call; a global cap, tagged apart, in a second
// call after the first admitted. When the cap denies, what the first call
// consumed is given back: the consumer's limits hold what they held before.
func TestDecideOnCluster(t *testing.T) {
	cl := redistest.Cluster(t, srv)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DialTimeout: 2 * time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	t.Cleanup(func() { c.Close() })

	clock := &fakeClock{now: alignedStart(window).Add(3 * window / 10)}
	d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now), algorithms.DecideOnCluster(true))
	if err := d.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	consumer := everyAlgorithm("alice-" + prefix)
	capped := append(consumer, algorithms.Check{Key: algorithms.Key("global-"+prefix, "cap"), Algorithm: "fixed-window",
		Policy: algorithms.Policy{Limit: 3, Window: window}, Cost: 1})
	for i := range 3 {
		out := decide(t, d, capped...)
		if !out.Allowed || out.Calls != 2 {
			t.Fatalf("request %d: allowed %t in %d calls, want admitted in 2", i+1, out.Allowed, out.Calls)
		}
	}
	before := decide(t, d, zeroCost(consumer)...)
	out := decide(t, d, capped...)
	if out.Allowed || out.Calls != 3 || out.Checks[len(consumer)].Allowed {
		t.Fatalf("fourth request: %+v; want denied by the cap in 3 calls (decide, cap, refund)", out)
	}
	after := decide(t, d, zeroCost(consumer)...)
	for j := range consumer {
		if after.Checks[j].Remaining != before.Checks[j].Remaining || out.Checks[j].Remaining != before.Checks[j].Remaining {
			t.Errorf("%s: remaining %d before, %d reported, %d after the refund; want all equal",
				consumer[j].Algorithm, before.Checks[j].Remaining, out.Checks[j].Remaining, after.Checks[j].Remaining)
		}
	}
	if n, err := c.ZCard(context.Background(), consumer[1].Key).Result(); err != nil || n != 3 {
		t.Fatalf("sliding log holds %d members (%v), want the 3 admitted", n, err)
	}
	// A caller that gives up after the first call: the second fails, and
	// the first call's consumption is given back all the same.
	before = decide(t, d, zeroCost(consumer)...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.OnNewNode(func(n *redis.Client) { n.AddHook(cancelAfter{ctx: ctx, cancel: cancel}) })
	c.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
		n.AddHook(cancelAfter{ctx: ctx, cancel: cancel})
		return nil
	})
	out, err := d.Decide(ctx, capped)
	if !errors.Is(err, context.Canceled) || out.Allowed || out.Calls != 3 {
		t.Fatalf("a request cancelled after its first call: %+v, %v; want the cancellation, in 3 calls", out, err)
	}
	after = decide(t, d, zeroCost(consumer)...)
	for j := range consumer {
		if after.Checks[j].Remaining != before.Checks[j].Remaining {
			t.Errorf("%s: remaining %d before, %d after the cancelled request; want equal",
				consumer[j].Algorithm, before.Checks[j].Remaining, after.Checks[j].Remaining)
		}
	}
	// Denied by the consumer's own limits: the cap is never asked.
	for range 2 {
		decide(t, d, consumer...)
	}
	out = decide(t, d, capped...)
	if out.Allowed || out.Calls != 1 {
		t.Fatalf("request over the consumer's limits: %+v; want denied in 1 call", out)
	}
	if c := out.Checks[len(consumer)]; !c.Skipped || c.Attempts != 0 || c.Limit != 3 {
		t.Fatalf("the cap, never asked: %+v; want it skipped, with only its limit, and no attempts", c)
	}
}

// TestDecideSkipped: decided by hash tag, as on a Cluster, the checks of
// the calls after one that denied or failed are Skipped, and only they:
// the checks of the calls that were made never are.
func TestDecideSkipped(t *testing.T) {
	c := redistest.Client(t, srv)
	for _, tc := range []struct {
		name string
		// full is the tag whose limits are used up before the request;
		// broken the tag whose key holds a string, which fails its call.
		full, broken string
		allowed      bool
		skipped      []bool // per check: alice's two, the cap, the region's
	}{
		{"all admit", "", "", true, []bool{false, false, false, false}},
		{"the first call denies", "alice", "", false, []bool{false, false, true, true}},
		{"the second call denies", "cap", "", false, []bool{false, false, false, true}},
		{"the first call fails", "", "alice", false, []bool{false, false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: alignedStart(window).Add(window / 2)}
			d := algorithms.NewDecider(c, algorithms.DecideNow(clock.Now), algorithms.DecideOnCluster(true))
			prefix := redistest.Prefix(t)
			p := algorithms.Policy{Limit: 1, Window: window}
			checks := []algorithms.Check{
				{Key: algorithms.Key(prefix+"alice", "a"), Algorithm: "gcra", Policy: p, Cost: 1},
				{Key: algorithms.Key(prefix+"alice", "b"), Algorithm: "fixed-window", Policy: algorithms.Policy{Limit: 2, Window: window}, Cost: 1},
				{Key: algorithms.Key(prefix+"cap", "cap"), Algorithm: "fixed-window", Policy: p, Cost: 1},
				{Key: algorithms.Key(prefix+"region", "cap"), Algorithm: "token-bucket", Policy: p, Cost: 1},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, ch := range checks {
				if tc.full != "" && strings.Contains(ch.Key, "{"+prefix+tc.full+"}") {
					decide(t, d, ch)
				}
				if tc.broken != "" && strings.Contains(ch.Key, "{"+prefix+tc.broken+"}") {
					if err := c.Set(ctx, ch.Key, "not a limit's state", time.Minute).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			out, err := d.Decide(ctx, checks)
			if (err != nil) != (tc.broken != "") || out.Allowed != tc.allowed {
				t.Fatalf("allowed %t, error %v; want allowed %t, and an error only from a broken key", out.Allowed, err, tc.allowed)
			}
			for j, got := range out.Checks {
				if got.Skipped != tc.skipped[j] {
					t.Errorf("%s: skipped %t, want %t (%+v)", checks[j].Key, got.Skipped, tc.skipped[j], got)
				}
			}
		})
	}
}

// cancelAfter is a hook that cancels a context once a command sent with
// it has run: the next command sent with it fails.
type cancelAfter struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func (h cancelAfter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cancelAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if ctx == h.ctx {
			h.cancel()
		}
		return err
	}
}

func (h cancelAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func zeroCost(checks []algorithms.Check) []algorithms.Check {
	zero := make([]algorithms.Check, len(checks))
	for i, c := range checks {
		c.Cost = 0
		zero[i] = c
	}
	return zero
}

// TestDecideRedisClock decides on Redis's clock, with hour-long windows: a
// burst of six has its sixth denied by every algorithm, with a retry-after
// no longer than the algorithm's guarantee lets a denied client wait;
// unless the burst straddled an aligned hour, where the aligned windows
// may rightly admit it, which Redis's TIME before and after tells.
func TestDecideRedisClock(t *testing.T) {
	c := redistest.Client(t, srv)
	d := algorithms.NewDecider(c, algorithms.DecideClock(algorithms.ClockRedis))
	checks := everyAlgorithm(redistest.Prefix(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := c.Time(ctx).Val()
	for range 5 {
		decide(t, d, checks...)
	}
	out := decide(t, d, checks...)
	straddled := before.Truncate(time.Hour) != c.Time(ctx).Val().Truncate(time.Hour)
	for j, got := range out.Checks {
		info, _ := algorithms.Lookup(checks[j].Algorithm)
		slot := info.Guarantee.SlotWithin(checks[j].Policy)
		if got.Allowed && straddled {
			continue
		}
		if got.Allowed || got.RetryAfter <= 0 || got.RetryAfter > slot {
			t.Errorf("%s: %+v, want denied with a retry-after within %s", checks[j].Algorithm, got, slot)
		}
	}
}

// TestDecideRefusesBadChecks: a check that cannot be decided is an error
// naming its field, and nothing is sent.
func TestDecideRefusesBadChecks(t *testing.T) {
	c := redistest.Client(t, srv)
	d := algorithms.NewDecider(c)
	good := algorithms.Check{Key: "rl:{x}:a", Algorithm: "gcra", Policy: algorithms.Policy{Limit: 5, Window: time.Second}, Cost: 1}
	for _, tc := range []struct {
		name  string
		edit  func(*algorithms.Check)
		field string
	}{
		{"no key", func(c *algorithms.Check) { c.Key = "" }, "Key"},
		{"unknown algorithm", func(c *algorithms.Check) { c.Algorithm = "lua" }, "Algorithm"},
		{"no limit", func(c *algorithms.Check) { c.Policy.Limit = 0 }, "Limit"},
		{"no window", func(c *algorithms.Check) { c.Policy.Window = 0 }, "Window"},
		{"negative cost", func(c *algorithms.Check) { c.Cost = -1 }, "Cost"},
		{"cost over the limit", func(c *algorithms.Check) { c.Cost = 6 }, "Cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := good
			tc.edit(&bad)
			out, err := d.Decide(context.Background(), []algorithms.Check{good, bad})
			var fe *field.Error
			if !errors.As(err, &fe) || fe.Field != tc.field || out.Calls != 0 {
				t.Fatalf("Decide = %+v, %v; want a field error on %s and no call", out, err, tc.field)
			}
		})
	}
	if _, err := d.Decide(context.Background(), []algorithms.Check{good, good}); err == nil {
		t.Fatal("two checks on one key decided; want an error")
	}
	if out, err := d.Decide(context.Background(), nil); err != nil || !out.Allowed || out.Calls != 0 {
		t.Fatalf("no checks: %+v, %v; want admitted without a call", out, err)
	}
}
