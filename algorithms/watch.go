package algorithms

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Watch is a fixed-window counter guarded by optimistic locking: WATCH the
// key, read it, and queue the increment in MULTI/EXEC. EXEC aborts when another
// client changed the key after the WATCH; the limiter then starts again, at
// most retries times. It never over-admits, but under contention most attempts
// abort, each costing three round trips, and a request that runs out of
// attempts is denied with ErrRetriesExhausted.
type Watch struct {
	client  redis.UniversalClient
	policy  Policy
	retries int
}

var _ Limiter = (*Watch)(nil)

// Allow tries up to retries optimistic transactions. Each attempt is WATCH,
// then GET and PTTL pipelined, then either EXEC (admit) or UNWATCH (deny).
func (w *Watch) Allow(ctx context.Context, key string) (Decision, error) {
	d := Decision{Limit: w.policy.Limit}
	for range w.retries {
		err := w.client.Watch(ctx, func(tx *redis.Tx) error {
			d.Attempts += 2 // WATCH, then GET and PTTL
			var get *redis.StringCmd
			var pttl *redis.DurationCmd
			_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
				get = p.Get(ctx, key)
				pttl = p.PTTL(ctx, key)
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("get: %w", err)
			}
			count, err := get.Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("get: %w", err)
			}
			d.Attempts++ // EXEC, or the UNWATCH sent when the transaction is dropped
			if count >= w.policy.Limit {
				d.Allowed = false
				d.RetryAfter = pttl.Val()
				if d.RetryAfter <= 0 {
					d.RetryAfter = w.policy.Window
				}
				return nil
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				if count == 0 {
					// The key is absent: the WATCH guarantees it still is, so
					// create it with the window's expiry in one command.
					p.Set(ctx, key, 1, w.policy.Window)
				} else {
					p.Incr(ctx, key)
				}
				return nil
			})
			if err != nil {
				return err
			}
			d.Allowed = true
			d.Remaining = w.policy.Limit - count - 1
			return nil
		}, key)
		if errors.Is(err, redis.TxFailedErr) {
			continue
		}
		if err != nil {
			return d, fmt.Errorf("watch: %w", err)
		}
		return d, nil
	}
	d.Allowed = false
	d.RetryAfter = 0
	return d, fmt.Errorf("watch: %d attempts aborted by contention: %w", w.retries, ErrRetriesExhausted)
}
