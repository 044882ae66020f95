package rls_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rls"
)

// countingDecider counts the decisions that reach Redis.
type countingDecider struct {
	d     limiter.Decider
	calls atomic.Int64
}

func (c *countingDecider) Decide(ctx context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
	c.calls.Add(1)
	return c.d.Decide(ctx, checks)
}

// TestRLSDenyCacheSkipsRedis: a call over a limit that Redis refused is
// answered OVER_LIMIT from memory, with the duration_until_reset Redis
// gave, and reaches no Redis; a call that takes fewer hits than the one
// refused, and so may be admitted, still goes to Redis.
func TestRLSDenyCacheSkipsRedis(t *testing.T) {
	file := "domain: " + testDomain + "d\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n" +
		"  - key: org\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"
	counter := &countingDecider{d: algorithms.NewDecider(redistest.Client(t, srv), algorithms.DecideClock(algorithms.ClockCaller),
		algorithms.DecideNow(func() time.Time { return rlsFixed }))}
	s := startRLS(t, map[string]string{"d.yaml": file}, rls.Config{Config: limiter.Config{DenyCache: true, Decider: counter}})
	const minute = pb.RateLimitResponse_RateLimit_MINUTE
	user := st{limit: 3, unit: minute}
	over := st{over: true, limit: 3, unit: minute}
	for i, step := range []struct {
		hits      uint32
		org       bool // a second descriptor, org, under its limit
		over      bool
		remaining uint32
		redis     int64 // decisions in Redis so far
	}{
		{hits: 2, remaining: 1, redis: 1},
		{hits: 2, over: true, redis: 2}, // refused by Redis: cached for 2 hits
		{hits: 2, over: true, redis: 2}, // from the cache
		{hits: 3, over: true, redis: 2}, // more hits: from the cache
		{hits: 1, remaining: 0, redis: 3},
		{hits: 1, over: true, redis: 4}, // refused by Redis: cached for 1 hit
		{hits: 0, over: true, redis: 4}, // asks whether 1 more would be: from the cache
		{hits: 1, org: true, over: true, redis: 4},
	} {
		descs := []*rlpb.RateLimitDescriptor{desc("user", "u1")}
		want := user
		want.remaining = step.remaining
		if step.over {
			want = over
		}
		wants := []st{want}
		if step.org {
			descs = append(descs, desc("org", "o1"))
			wants = append(wants, st{limit: 10, unit: pb.RateLimitResponse_RateLimit_HOUR})
		}
		resp := s.call(t, "d", step.hits, descs...)
		checkResp(t, resp, step.over, wants...)
		if got := counter.calls.Load(); got != step.redis {
			t.Errorf("call %d: %d decisions in Redis, want %d", i, got, step.redis)
		}
		if step.over {
			if got := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration(); got != time.Minute {
				t.Errorf("call %d: duration_until_reset %s, want 1m0s (the window ends at 12:01:00, 59.5s on, rounded up)", i, got)
			}
		}
	}
	if hits, outcome := s.metrics.DenyCacheHits(), s.metrics.Decisions(limiter.OutcomeDenyCache); hits != 4 || outcome != 4 {
		t.Errorf("%d deny cache hits, %d decisions %s; want 4 and 4", hits, outcome, limiter.OutcomeDenyCache)
	}
	if n := s.metrics.Decisions(limiter.OutcomeDenied); n != 2 {
		t.Errorf("%d decisions denied by Redis, want 2", n)
	}
}

// TestRLSDenyCacheAgreesWithRedis: on a simulated clock stepped 18s at a
// time, a service with the deny cache and one without, on one Redis, are
// sent the same calls: they answer every call alike, with the same
// duration_until_reset when over the limit. The cache never refuses what
// Redis would admit, not even at the step a limit admits again: with a
// limit of 40 an hour, every algorithm's refusals end on the 18s grid. (An
// hour, so that no counter expires in Redis, which keeps real time, while
// the test runs.)
func TestRLSDenyCacheAgreesWithRedis(t *testing.T) {
	hits := []uint32{1, 2, 1, 0, 1, 4, 1, 3}
	for _, alg := range []string{"", "sliding-log", "sliding-counter", "token-bucket", "gcra"} {
		name := alg
		if name == "" {
			name = "fixed-window (no algorithm)"
		}
		t.Run(name, func(t *testing.T) {
			limit := "{unit: hour, requests_per_unit: 40}"
			if alg != "" {
				limit = "{unit: hour, requests_per_unit: 40, algorithm: " + alg + "}"
			}
			file := "domain: " + testDomain + "d\ndescriptors:\n  - key: user\n    rate_limit: " + limit + "\n"
			start := rlsFixed.Truncate(time.Hour)
			var clock atomic.Int64
			clock.Store(start.UnixNano())
			now := func() time.Time { return time.Unix(0, clock.Load()) }
			cached := startRLS(t, map[string]string{"d.yaml": file}, rls.Config{Config: limiter.Config{DenyCache: true, Now: now}})
			fresh := startRLS(t, map[string]string{"d.yaml": file}, rls.Config{Config: limiter.Config{Now: now}})
			admitted := 0
			const steps = 400
			for k := range steps {
				at := time.Duration(k) * 18 * time.Second
				clock.Store(start.Add(at).UnixNano())
				h := hits[k%len(hits)]
				a, b := cached.call(t, "d", h, desc("user", "u1")), fresh.call(t, "d", h, desc("user", "u1"))
				where := fmt.Sprintf("at +%s, %d hits", at, h)
				if a.GetOverallCode() != b.GetOverallCode() {
					t.Fatalf("%s: with the cache %v, without %v", where, a.GetOverallCode(), b.GetOverallCode())
				}
				if a.GetOverallCode() == pb.RateLimitResponse_OK {
					admitted++
					continue
				}
				da, db := a.GetStatuses()[0].GetDurationUntilReset().AsDuration(), b.GetStatuses()[0].GetDurationUntilReset().AsDuration()
				if da != db {
					t.Fatalf("%s: duration_until_reset %s with the cache, %s without", where, da, db)
				}
			}
			hitsCached, hitsFresh := cached.metrics.DenyCacheHits(), fresh.metrics.DenyCacheHits()
			t.Logf("%d of %d calls admitted; %d answered from the cache", admitted, steps, hitsCached)
			if hitsCached == 0 || hitsFresh != 0 || admitted == 0 {
				t.Errorf("%d calls from the cache, %d without one, %d admitted: want some, none, some", hitsCached, hitsFresh, admitted)
			}
		})
	}
}
