package batch

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// startCluster starts a Redis Cluster of 3 masters, stopped when t ends.
func startCluster(t *testing.T) *redisrun.Cluster {
	t.Helper()
	redistest.Client(t, srv) // skips without redis-server, fails under CI
	cl, err := redisrun.StartCluster(context.Background(), 3, redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	return cl
}

// halfPast is a caller's clock stopped half way through an aligned hour:
// no hour-long window of a test starts or ends while it runs.
func halfPast() time.Time {
	return time.UnixMilli(1_700_000_000_000).Truncate(time.Hour).Add(30 * time.Minute)
}

// TestDeciderOnClusterThroughBatcher: a Decider built as ratelab edge and
// ratelab rls build theirs, on a Cluster's redis.UniversalOptions and
// through a batcher's Wrap, decides a consumer's limit and a global cap,
// tagged apart, each in a call of its own: every request is admitted or
// denied by the right limit, with no error, and a request the cap denies
// leaves the consumer's limit as it was.
func TestDeciderOnClusterThroughBatcher(t *testing.T) {
	cl := startCluster(t)
	opts := &redis.UniversalOptions{Addrs: cl.Addrs(), Protocol: 2, MaxRetries: -1,
		DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	c := redis.NewUniversalClient(opts)
	t.Cleanup(func() { c.Close() })
	b := newBatcher(t, c, Options{})
	d := algorithms.NewDecider(b.Wrap(c), algorithms.DecideNow(halfPast), algorithms.DecideOnCluster(redisrun.IsCluster(opts)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Load(ctx); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	global := algorithms.Key(prefix+"global", "cap")
	checks := func(who string, cost int64) []algorithms.Check {
		return []algorithms.Check{
			{Key: algorithms.Key(prefix+who, "limit"), Algorithm: "sliding-log", Policy: algorithms.Policy{Limit: 3, Window: time.Hour}, Cost: cost},
			{Key: global, Algorithm: "fixed-window", Policy: algorithms.Policy{Limit: 4, Window: time.Hour}, Cost: cost},
		}
	}
	if a, g := c.ClusterKeySlot(ctx, checks("alice", 1)[0].Key).Val(), c.ClusterKeySlot(ctx, global).Val(); a == g {
		t.Fatalf("the consumer's limit and the cap share slot %d: the test needs two", a)
	}
	for i, step := range []struct {
		who      string
		allowed  bool
		deniedBy int // the check that denied: 0 the consumer's limit, 1 the cap
	}{
		{"alice", true, 0}, {"alice", true, 0}, {"alice", true, 0},
		{"alice", false, 0}, // her limit: the cap is never asked
		{"bob", true, 0},    // the cap's fourth
		{"bob", false, 1},   // the cap: bob's admission is given back
		{"carol", false, 1},
	} {
		out, err := d.Decide(ctx, checks(step.who, 1))
		if err != nil {
			t.Fatalf("request %d of %s: %v", i+1, step.who, err)
		}
		if out.Allowed != step.allowed || !step.allowed && out.Checks[step.deniedBy].Allowed {
			t.Fatalf("request %d of %s: %+v; want allowed %t, denied by check %d if not", i+1, step.who, out, step.allowed, step.deniedBy)
		}
	}
	for _, tc := range []struct {
		who       string
		remaining int64
	}{{"alice", 0}, {"bob", 2}, {"carol", 3}} {
		out, err := d.Decide(ctx, checks(tc.who, 0))
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Checks[0].Remaining; got != tc.remaining {
			t.Errorf("%s's limit has %d left, want %d", tc.who, got, tc.remaining)
		}
	}
}
