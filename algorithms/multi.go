package algorithms

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Multi is the sliding-window log people write first with MULTI/EXEC: prune,
// add this request, count and set the expiry, all queued in one transaction,
// then decide after EXEC and ZREM its own member when it was over the limit.
//
// The transaction is atomic, so it never over-admits, but it cannot branch:
// every request is added before anyone knows whether it is allowed. Until its
// ZREM arrives a denied request still sits in the set and is counted against
// others, so concurrent traffic can be under-admitted, and a client that dies
// between EXEC and ZREM leaves a phantom request behind. It always takes the
// time from the caller. Its retry-after is a lower bound: it is computed from
// the oldest member, which may be one of several that must leave first.
type Multi struct {
	client  redis.UniversalClient
	policy  Policy
	now     func() time.Time
	members *members
}

var _ Limiter = (*Multi)(nil)

func newMulti(c redis.UniversalClient, p Policy, o Options) *Multi {
	return &Multi{client: c, policy: p, now: o.Now, members: newMembers()}
}

// Allow runs the transaction and, when over the limit, removes its own member.
func (m *Multi) Allow(ctx context.Context, key string) (Decision, error) {
	d := Decision{Limit: m.policy.Limit, Attempts: 1}
	now := m.now().UnixMilli()
	member := m.members.next()
	var card *redis.IntCmd
	var oldest *redis.ZSliceCmd
	_, err := m.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(now-m.policy.windowMillis(), 10))
		p.ZAdd(ctx, key, redis.Z{Score: float64(now), Member: member})
		card = p.ZCard(ctx, key)
		oldest = p.ZRangeWithScores(ctx, key, 0, 0)
		p.PExpire(ctx, key, m.policy.Window)
		return nil
	})
	if err != nil {
		return d, fmt.Errorf("multi: exec: %w", err)
	}
	count := card.Val()
	if count <= m.policy.Limit {
		d.Allowed = true
		d.Remaining = m.policy.Limit - count
		d.Member = member
		return d, nil
	}
	// Over: take this request back out. Until this lands it counts against others.
	d.Attempts++
	if err := m.client.ZRem(ctx, key, member).Err(); err != nil {
		return d, fmt.Errorf("multi: zrem: %w", err)
	}
	d.RetryAfter = m.policy.Window
	if z := oldest.Val(); len(z) == 1 {
		// An estimate: the oldest member may itself be a denied request not yet removed.
		d.RetryAfter = time.Duration(int64(z[0].Score)+m.policy.windowMillis()-now) * time.Millisecond
	}
	d.RetryAfter = max(d.RetryAfter, time.Millisecond)
	return d, nil
}
