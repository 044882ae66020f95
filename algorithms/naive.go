package algorithms

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Naive is the fixed-window limiter most application code starts with: read
// the counter, compare it with the limit, then increment it.
//
// It is racy by design. Between the GET and the INCR any number of other
// requests can read the same count, so a burst of concurrent requests that all
// see "4 of 5 used" are all admitted. ratelab keeps it to show the leak.
type Naive struct {
	client redis.UniversalClient
	policy Policy
}

var _ Limiter = (*Naive)(nil)

// Allow reads the counter and its expiry in one round trip and, when the count
// is under the limit, increments it in a second (and sets the window's expiry
// in a third when this request created the key).
func (n *Naive) Allow(ctx context.Context, key string) (Decision, error) {
	d := Decision{Limit: n.policy.Limit, Attempts: 1}
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return d, fmt.Errorf("naive: get: %w", err)
	}
	count, err := get.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return d, fmt.Errorf("naive: get: %w", err)
	}
	if count >= n.policy.Limit {
		d.RetryAfter = pttl.Val()
		if d.RetryAfter <= 0 {
			d.RetryAfter = n.policy.Window
		}
		return d, nil
	}
	// The race: another request may have incremented the counter since the GET.
	d.Attempts++
	after, err := n.client.Incr(ctx, key).Result()
	if err != nil {
		return d, fmt.Errorf("naive: incr: %w", err)
	}
	if after == 1 {
		d.Attempts++
		if err := n.client.PExpire(ctx, key, n.policy.Window).Err(); err != nil {
			return d, fmt.Errorf("naive: pexpire: %w", err)
		}
	}
	d.Allowed = true
	d.Remaining = max(n.policy.Limit-count-1, 0)
	return d, nil
}
