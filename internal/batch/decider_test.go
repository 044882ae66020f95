package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// halfPast is a caller's clock stopped half way through an aligned hour:
// no hour-long window of a test starts or ends while it runs.
func halfPast() time.Time {
	return time.UnixMilli(1_700_000_000_000).Truncate(time.Hour).Add(30 * time.Minute)
}

// TestDeciderOnCluster: a Decider on a Redis Cluster of 3 masters, through
// a batcher as ratelab edge and ratelab rls decide, or alone.
func TestDeciderOnCluster(t *testing.T) {
	cl := redistest.Cluster(t, srv)
	t.Run("two hash tags through the batcher", func(t *testing.T) { decideTwoTags(t, cl) })
	t.Run("TRYAGAIN replays no call of the pipeline", func(t *testing.T) { tryAgainReplaysNothing(t, cl) })
	t.Run("a refund follows its slot", func(t *testing.T) {
		for _, batched := range []bool{false, true} {
			t.Run(map[bool]string{false: "alone", true: "batched"}[batched], func(t *testing.T) { refundFollowsSlot(t, cl, batched) })
		}
	})
}

// decideTwoTags: a Decider built as ratelab edge and ratelab rls build
// theirs, on a Cluster's redis.UniversalOptions and through a batcher's
// Wrap, decides a consumer's limit and a global cap, tagged apart, each in
// a call of its own: every request is admitted or denied by the right
// limit, with no error, and a request the cap denies leaves the
// consumer's limit as it was.
func decideTwoTags(t *testing.T, cl *redisrun.Cluster) {
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

// tryAgainReplaysNothing: one pipeline of the batcher carries two
// decisions to one node, the first a sliding counter whose slot is
// migrating with one of its two keys moved (the node answers TRYAGAIN), the
// second a fixed window that runs. go-redis would send the node's whole
// pipeline again, up to MaxRedirects times, and count the second decision
// each time: it is counted once, and the first fails with TRYAGAIN.
func tryAgainReplaysNothing(t *testing.T, cl *redisrun.Cluster) {
	trips := &nodeTrips{pipelines: map[string]int{}, commands: map[string]int{}}
	c := clusterClient(t, cl, trips)
	// The first pipeline (the gate's call) is held until the two decisions
	// wait behind it, in order; released, the flusher sends them together.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b := newBatcher(t, c, Options{OnBatch: func(int, bool) {
		once.Do(func() {
			close(held)
			<-release
		})
	}})
	d := algorithms.NewDecider(b.Wrap(c), algorithms.DecideNow(halfPast), algorithms.DecideOnCluster(true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := errors.Join(d.Load(ctx), echo.Load(ctx, c).Err()); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	// The Decider builds a script for each shape of request, whose first
	// call goes out alone, as an EVAL that loads it: one call of each shape
	// first, so that the decisions below are EVALSHAs the batcher carries.
	for _, alg := range []string{"sliding-counter", "fixed-window"} {
		warm := algorithms.Check{Key: algorithms.Key(prefix+"warm", alg), Algorithm: alg, Policy: algorithms.Policy{Limit: 5, Window: time.Hour}, Cost: 1}
		if _, err := d.Decide(ctx, []algorithms.Check{warm}); err != nil {
			t.Fatal(err)
		}
	}
	split := algorithms.Check{Key: algorithms.Key(prefix+"split", "sc"), Algorithm: "sliding-counter",
		Policy: algorithms.Policy{Limit: 5, Window: time.Hour}, Cost: 1}
	from, slot := owner(t, c, split.Key)
	var other algorithms.Check
	for i := 0; other.Key == ""; i++ {
		key := algorithms.Key(prefix+"other"+strconv.Itoa(i), "fw")
		if addr, s := owner(t, c, key); addr == from && s != slot {
			other = algorithms.Check{Key: key, Algorithm: "fixed-window", Policy: algorithms.Policy{Limit: 5, Window: time.Hour}, Cost: 1}
		}
	}
	// Both of the counter's keys hold state, and only one moves.
	for _, k := range []string{split.Key + ":0", split.Key + ":1"} {
		if err := c.HSet(ctx, k, "w", 0, "n", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m, err := startMove(cl, split.Key, from, another(cl, from))
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if err := m.migrate(split.Key + ":0"); err != nil {
		t.Fatal(err)
	}

	errs := make(chan error, 3)
	go func() {
		_, err := b.Run(ctx, echo, []string{prefix + "gate"}, "gate")
		errs <- err
	}()
	<-held
	queued := func(n int) {
		testwait.Eventually(t, 10*time.Second, func() (bool, string) {
			return len(b.calls) == n, fmt.Sprintf("%d calls wait, want %d", len(b.calls), n)
		})
	}
	var splitErr error
	go func() {
		_, splitErr = d.Decide(ctx, []algorithms.Check{split})
		errs <- nil
	}()
	queued(1)
	var out algorithms.Outcome
	go func() {
		var err error
		out, err = d.Decide(ctx, []algorithms.Check{other})
		errs <- err
	}()
	queued(2)
	close(release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if splitErr == nil || !strings.Contains(splitErr.Error(), "TRYAGAIN") {
		t.Errorf("the split decision: %v, want TRYAGAIN", splitErr)
	}
	if !out.Allowed {
		t.Errorf("the other decision: %+v, want admitted", out)
	}
	if n, err := c.HGet(ctx, other.Key, "n").Int(); err != nil || n != 1 {
		t.Errorf("the other decision was counted %d times (%v), want once", n, err)
	}
	if err := m.finish(); err != nil {
		t.Fatal(err)
	}
}

// refundFollowsSlot: a request that the consumer's limits admit and a
// global cap denies has its consumption given back after the consumer's
// slot moved to another master, between the decision and the refund: the
// refund meets MOVED, follows it, and runs once, so that the consumer's
// limits hold what they held before the request.
func refundFollowsSlot(t *testing.T, cl *redisrun.Cluster, batched bool) {
	trips := &nodeTrips{pipelines: map[string]int{}, commands: map[string]int{}}
	c := clusterClient(t, cl, trips)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	policy := algorithms.Policy{Limit: 5, Window: time.Hour}
	var consumer []algorithms.Check
	for _, alg := range []string{"fixed-window", "sliding-counter", "sliding-log"} {
		consumer = append(consumer, algorithms.Check{Key: algorithms.Key(prefix+"alice", alg), Algorithm: alg, Policy: policy, Cost: 1})
	}
	capped := append(slices.Clone(consumer), algorithms.Check{Key: algorithms.Key(prefix+"global", "cap"),
		Algorithm: "fixed-window", Policy: algorithms.Policy{Limit: 1, Window: time.Hour}, Cost: 1})
	from, _ := owner(t, c, consumer[0].Key)
	mover := &refundMover{cl: cl, key: consumer[0].Key, from: from, to: another(cl, from)}
	c.AddHook(mover)
	var client redis.UniversalClient = c
	if batched {
		client = newBatcher(t, c, Options{}).Wrap(c)
	}
	d := algorithms.NewDecider(client, algorithms.DecideNow(halfPast), algorithms.DecideOnCluster(true))
	for _, checks := range [][]algorithms.Check{consumer, capped} { // the second fills the cap
		if out, err := d.Decide(ctx, checks); err != nil || !out.Allowed {
			t.Fatalf("%+v, %v; want admitted", out, err)
		}
	}
	keys := []string{consumer[0].Key, consumer[1].Key + ":0", consumer[1].Key + ":1", consumer[2].Key}
	before := dump(t, c, keys)
	_, _, moved0 := trips.snapshot()
	out, err := d.Decide(ctx, capped)
	if err != nil || out.Allowed || out.Checks[len(consumer)].Allowed {
		t.Fatalf("%+v, %v; want denied by the cap", out, err)
	}
	if err := mover.result(); err != nil {
		t.Fatalf("moving the slot before the refund: %v", err)
	}
	if _, _, moved := trips.snapshot(); moved == moved0 {
		t.Fatal("the refund met no MOVED: the slot did not move before it")
	}
	if after := dump(t, c, keys); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the consumer's limits hold\n%v\nafter the refund, want as before the request\n%v", after, before)
	}
}

// refundMover is a hook of a cluster client that moves key's slot from one
// master to another just before the first refund is sent.
type refundMover struct {
	cl            *redisrun.Cluster
	key, from, to string
	mu            sync.Mutex
	done          bool
	err           error
}

func (r *refundMover) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *refundMover) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.before([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (r *refundMover) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.before(cmds)
		return next(ctx, cmds)
	}
}

// before moves the slot, once, when cmds hold a refund.
func (r *refundMover) before(cmds []redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || !slices.ContainsFunc(cmds, isRefund) {
		return
	}
	r.done = true
	m, err := startMove(r.cl, r.key, r.from, r.to)
	if err != nil {
		r.err = err
		return
	}
	defer m.close()
	r.err = m.finish()
}

// result is the move's error, or an error when no refund was sent.
func (r *refundMover) result() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.done {
		return errors.New("no refund was sent")
	}
	return r.err
}

// isRefund reports whether cmd runs decide.lua's refund.
func isRefund(cmd redis.Cmder) bool {
	_, _, _, args, ok := scriptCall(cmd)
	return ok && len(args) > 0 && args[0] == "refund"
}

// owner returns the address of the master that serves key, and key's slot.
func owner(t *testing.T, c *redis.ClusterClient, key string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node, err := c.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := c.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return node.Options().Addr, slot
}

// another returns a master of cl other than addr.
func another(cl *redisrun.Cluster, addr string) string {
	for _, a := range cl.Addrs() {
		if a != addr {
			return a
		}
	}
	return ""
}

// dump reads what keys hold: each hash's fields, each sorted set's members
// with their scores.
func dump(t *testing.T, c redis.UniversalClient, keys []string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]string{}
	for _, k := range keys {
		kind, err := c.Type(ctx, k).Result()
		var v any
		switch {
		case err != nil:
		case kind == "hash":
			v, err = c.HGetAll(ctx, k).Result()
		case kind == "zset":
			v, err = c.ZRangeWithScores(ctx, k, 0, -1).Result()
		default:
			v = kind
		}
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out[k] = fmt.Sprint(v)
	}
	return out
}
