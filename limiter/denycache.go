package limiter

import (
	"sync"
	"time"
)

// denyCache remembers limits that denied, until they admit again: the
// gateway and the rate limit service answer a request that meets one from
// memory, without Redis. A limiter's retry-after is the earliest a request
// of the same cost can be admitted, and a refused request consumes nothing,
// so the cache never refuses what Redis would admit.
type denyCache struct {
	mu     sync.Mutex
	denied map[string]denial
	sweep  time.Time
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
func (c *denyCache) get(key string, now time.Time) (denial, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.denied[key]
	if ok && !now.Before(d.until) {
		delete(c.denied, key)
		return denial{}, false
	}
	return d, ok
}

// put remembers a denial; it sweeps expired entries at most once a second,
// so the cache holds only limits denied within their retry-after, and at
// most maxDenied of them.
func (c *denyCache) put(key string, d denial, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.denied == nil {
		c.denied = map[string]denial{}
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
