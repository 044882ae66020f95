package limiter

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// denyCache remembers limits that denied, until they admit again: the
// gateway and the rate limit service answer a request that meets one from
// memory, without Redis. A limiter's retry-after is the earliest a request
// of the same cost can be admitted, and a refused request consumes nothing,
// so the cache never refuses what Redis would admit.
type denyCache struct {
	mu     sync.Mutex
	denied map[denyKey]denial
	sweep  time.Time
	// held is len(denied), read without the lock: a limiter that denies
	// nothing looks nothing up.
	held atomic.Int64
}

// denyKey names a limit in the deny cache: its counter and its policy, so
// that a reload that changes a limit never meets the old one's denials.
type denyKey struct {
	key                  string
	limit, window, burst int64
}

func cacheKey(c algorithms.Check) denyKey {
	return denyKey{key: c.Key, limit: c.Policy.Limit, window: c.Policy.Window.Milliseconds(), burst: c.Policy.Burst}
}

// denial is one cached refusal.
type denial struct {
	// until is when the limit admits a request of cost again.
	until time.Time
	// reset is when the limit is whole again (the status's
	// duration_until_reset); until when unknown.
	reset time.Time
	// cost is what the refused request took, at least 1: a request that
	// takes less may be admitted before until.
	cost int64
}

// maxDenied bounds the deny cache. When it is full a denial is simply not
// cached: Redis still decides, so the cache only ever saves work.
const maxDenied = 100_000

// get returns key's denial when it still holds at now.
func (c *denyCache) get(key denyKey, now time.Time) (denial, bool) {
	if c.held.Load() == 0 {
		return denial{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.denied[key]
	if ok && !now.Before(d.until) {
		delete(c.denied, key)
		c.held.Store(int64(len(c.denied)))
		return denial{}, false
	}
	return d, ok
}

// put remembers a denial; it sweeps expired entries at most once a second,
// so the cache holds only limits denied within their retry-after, and at
// most maxDenied of them.
func (c *denyCache) put(key denyKey, d denial, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() { c.held.Store(int64(len(c.denied))) }()
	if c.denied == nil {
		c.denied = map[denyKey]denial{}
	}
	if len(c.denied) < maxDenied {
		c.denied[key] = d
	}
	if now.Sub(c.sweep) < time.Second {
		return
	}
	c.sweep = now
	for k, u := range c.denied {
		if !now.Before(u.until) {
			delete(c.denied, k)
		}
	}
}

// cached answers p from the deny cache when a limit it meets, not in
// shadow mode, is cached as refusing at least what the request takes of it
// (a take of 0 asks whether one more would be admitted: it is refused
// exactly when a take of 1 is). The cached limits are decided, refusing
// until their entries pass, and so are those decided without Redis
// (known); the others are not.
func (l *Limiter) cached(p Plan, cs checks, now time.Time, a *Answer) bool {
	if !l.cfg.DenyCache || len(cs.list) == 0 {
		return false
	}
	found := false
	for i, lim := range p.Limits {
		j := cs.at[i]
		if j < 0 || lim.Check.Shadow {
			continue
		}
		c := cs.list[j]
		if d, ok := l.denied.get(cacheKey(c), now); ok && max(c.Cost, 1) >= d.cost {
			a.Limits[i] = Result{Decided: true, RetryAfter: d.until.Sub(now), Reset: d.reset.Sub(now)}
			found = true
		}
	}
	if found {
		known(p, cs, a)
		a.Outcome = OutcomeDenyCache
	}
	return found
}

// cacheDenials remembers the limits Redis refused (not those in shadow
// mode), decided at now: until they admit again what was asked.
func (l *Limiter) cacheDenials(checks []algorithms.Check, out algorithms.Outcome, now time.Time) {
	if !l.cfg.DenyCache {
		return
	}
	for j, c := range checks {
		d := out.Checks[j]
		if d.Skipped || d.Allowed || c.Shadow || d.RetryAfter <= 0 {
			continue
		}
		l.denied.put(cacheKey(c), denial{until: now.Add(d.RetryAfter), reset: now.Add(max(d.RetryAfter, d.Reset)), cost: max(c.Cost, 1)}, now)
	}
}
