package limiter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
)

// LocalLimiter decides while Redis fails (FailLocal): each limit at this
// node's share, its limit over the nodes sharing it (rounded down, at
// least 1), with the limit's own algorithm running the very same script in
// an embedded in-process Redis, on this host's clock. A fleet of nodes
// deciding alone so admits at most about the limit between them. It holds
// one limiter per algorithm and share, built when a limit is first met.
type LocalLimiter struct {
	client redis.UniversalClient
	nodes  int
	stop   func()

	mu     sync.Mutex
	shares map[string]algorithms.Limiter // by algorithm and share
}

// NewLocalLimiter starts the embedded server for a fleet of nodes. Close
// it when done.
func NewLocalLimiter(nodes int) (*LocalLimiter, error) {
	srv, err := redisrun.StartEmbedded()
	if err != nil {
		return nil, fmt.Errorf("local limiter: %w", err)
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, MaxRetries: -1})
	return &LocalLimiter{client: client, nodes: max(nodes, 1), shares: map[string]algorithms.Limiter{},
		stop: func() { client.Close(); srv.Stop() }}, nil
}

// Share is p at one node's share of a fleet of nodes: its limit over the
// nodes, rounded down, at least 1, per the same window.
func Share(p algorithms.Policy, nodes int) algorithms.Policy {
	return algorithms.Policy{Limit: max(p.Limit/int64(max(nodes, 1)), 1), Window: p.Window}
}

// LocalAnswer is what the local limiter decided: whether it admitted and,
// when not, after how long it admits again and the share it applied.
type LocalAnswer struct {
	Allowed    bool
	RetryAfter time.Duration
	Policy     algorithms.Policy

	failed bool // the local limiter failed too
}

// decide decides checks one after the other, each at its share, and stops
// at the first that denies (shadow ones are not asked): what the limits
// before it consumed stays consumed, so that alone, while Redis fails, the
// node may admit less than its share, never more.
func (l *LocalLimiter) decide(ctx context.Context, checks []algorithms.Check) (LocalAnswer, error) {
	for _, c := range checks {
		if c.Shadow {
			continue
		}
		p := Share(c.Policy, l.nodes)
		lim, err := l.limiter(c.Algorithm, p)
		if err != nil {
			return LocalAnswer{}, err
		}
		d, err := lim.Allow(ctx, c.Key)
		if err != nil {
			return LocalAnswer{}, err
		}
		if !d.Allowed {
			return LocalAnswer{RetryAfter: d.RetryAfter, Policy: p}, nil
		}
	}
	return LocalAnswer{Allowed: true}, nil
}

func (l *LocalLimiter) limiter(algorithm string, p algorithms.Policy) (algorithms.Limiter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := algorithm + " " + p.String()
	if lim, ok := l.shares[k]; ok {
		return lim, nil
	}
	lim, err := algorithms.New(algorithm, l.client, p, algorithms.WithClock(algorithms.ClockCaller))
	if err != nil {
		return nil, err
	}
	l.shares[k] = lim
	return lim, nil
}

// Close stops the embedded server.
func (l *LocalLimiter) Close() { l.stop() }
