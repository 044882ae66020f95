package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
)

// LocalLimiter decides while Redis fails (FailLocal): each limit at this
// node's share, its limit over the nodes sharing it (rounded down, at
// least 1), with the limit's own algorithm running the very same script as
// the decisions in Redis (algorithms.Decider) in an embedded in-process
// Redis, on this host's clock. A fleet of nodes deciding alone so admits
// at most about the limit between them.
type LocalLimiter struct {
	decider *algorithms.Decider
	nodes   int
	stop    func()
}

// NewLocalLimiter starts the embedded server for a fleet of nodes. Close
// it when done.
func NewLocalLimiter(nodes int) (*LocalLimiter, error) {
	srv, err := redisrun.StartEmbedded()
	if err != nil {
		return nil, fmt.Errorf("local limiter: %w", err)
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, MaxRetries: -1})
	return &LocalLimiter{decider: algorithms.NewDecider(client, algorithms.DecideClock(algorithms.ClockCaller)), nodes: max(nodes, 1),
		stop: func() { client.Close(); srv.Stop() }}, nil
}

// Share is p at one node's share of a fleet of nodes: its limit (and its
// burst, when it has one) over the nodes, rounded down, at least 1, per the
// same window.
func Share(p algorithms.Policy, nodes int) algorithms.Policy {
	n := int64(max(nodes, 1))
	s := algorithms.Policy{Limit: max(p.Limit/n, 1), Window: p.Window}
	if p.Burst > 0 {
		s.Burst = max(p.Burst/n, 1)
	}
	return s
}

// LocalAnswer is what the local limiter decided: whether it admitted and,
// when not, after how long it admits again and the share it applied.
type LocalAnswer struct {
	Allowed    bool
	RetryAfter time.Duration
	Policy     algorithms.Policy
	// Key is, when it refused, the counter of the limit whose share
	// refused (a Plan limit's Check.Key).
	Key string

	failed bool // the local limiter failed too
}

// decide decides checks at their shares, all at once as in Redis: the
// request takes what it takes of each (its cost) only when every one
// admits it (shadow ones are not asked). A share below what one request
// takes is raised to it: as a share is at least 1, each node admits at
// least one request a window.
func (l *LocalLimiter) decide(ctx context.Context, checks []algorithms.Check) (LocalAnswer, error) {
	shares := make([]algorithms.Check, 0, len(checks))
	for _, c := range checks {
		// An in-flight limit is not shared out: its slots are released in
		// Redis, and the local limiter bounds rates alone.
		if c.Shadow || c.Algorithm == algorithms.InFlight {
			continue
		}
		c.Policy = Share(c.Policy, l.nodes)
		c.Policy.Limit = max(c.Policy.Limit, c.Cost)
		if c.Policy.Burst > 0 {
			c.Policy.Burst = max(c.Policy.Burst, c.Cost)
		}
		shares = append(shares, c)
	}
	out, err := l.decider.Decide(ctx, shares)
	if err != nil {
		return LocalAnswer{}, fmt.Errorf("local limiter: %w", err)
	}
	if out.Allowed {
		return LocalAnswer{Allowed: true}, nil
	}
	// Of the shares that refused, the one that admits again last.
	a := LocalAnswer{}
	for i, d := range out.Checks {
		if !d.Allowed && (a.Policy.Window == 0 || d.RetryAfter > a.RetryAfter) {
			a.RetryAfter, a.Policy, a.Key = d.RetryAfter, shares[i].Policy, shares[i].Key
		}
	}
	return a, nil
}

// Close stops the embedded server.
func (l *LocalLimiter) Close() { l.stop() }
