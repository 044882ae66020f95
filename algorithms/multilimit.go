package algorithms

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// MultiLimits are the two limits the multi-limit limiters enforce on one
// client when raced with p, in the order the sequential one checks them: a
// looser limit over a longer window (twice p's limit per ten of its
// windows), then p itself. A burst at one instant is held to p, and every
// request the second denies has taken a slot of the first.
func MultiLimits(p Policy) []Policy {
	return []Policy{{Limit: 2 * p.Limit, Window: 10 * p.Window}, p}
}

// LimitSet is implemented by limiters that enforce several limits on one
// client: Checks says, for the client behind key, each limit's key, policy
// and algorithm, so that each can be judged by its own guarantee.
type LimitSet interface {
	Checks(key string) []Check
}

// multiChecks are the checks of MultiLimits(p) for the client behind key:
// sliding logs, each on a key of its own that keeps key's hash tag.
func multiChecks(p Policy, key string) []Check {
	ps := MultiLimits(p)
	checks := make([]Check, len(ps))
	for i, q := range ps {
		checks[i] = Check{Key: key + ":" + q.String(), Algorithm: "sliding-log", Policy: q, Cost: 1}
	}
	return checks
}

// Sequential decides MultiLimits with one sliding-log call per limit, in
// turn, as a gateway that loops over a request's limits does: a limit that
// admits has consumed its slot before the next is asked, so a request
// denied by the second limit still holds a slot of the first, and later
// requests are wrongly denied for it. It never over-admits.
type Sequential struct {
	policy   Policy
	limiters []Limiter
}

// Atomic decides MultiLimits in one Decide call: both limits are checked,
// and consumed only when both admit.
type Atomic struct {
	policy  Policy
	decider *Decider
}

var (
	_ Limiter  = (*Sequential)(nil)
	_ LimitSet = (*Sequential)(nil)
	_ Loader   = (*Sequential)(nil)
	_ Limiter  = (*Atomic)(nil)
	_ LimitSet = (*Atomic)(nil)
	_ Loader   = (*Atomic)(nil)
)

func newSequential(c redis.UniversalClient, p Policy, o Options) *Sequential {
	s := &Sequential{policy: p}
	for _, q := range MultiLimits(p) {
		s.limiters = append(s.limiters, decided("sliding-log", 1)(c, q, o))
	}
	return s
}

func newAtomic(c redis.UniversalClient, p Policy, o Options) *Atomic {
	return &Atomic{policy: p, decider: NewDecider(c, DecideClock(o.Clock), DecideNow(o.Now), DecideOnCluster(o.Cluster))}
}

// Checks says each limit's key and policy for the client behind key.
func (s *Sequential) Checks(key string) []Check { return multiChecks(s.policy, key) }

// Keys lists the Redis keys of the client behind key.
func (s *Sequential) Keys(key string) []string { return keysOfChecks(s.Checks(key)) }

// Load loads the sliding log's script.
func (s *Sequential) Load(ctx context.Context) error {
	return s.limiters[0].(Loader).Load(ctx)
}

// Allow asks each limit in turn, and stops at the first that denies.
func (s *Sequential) Allow(ctx context.Context, key string) (Decision, error) {
	var out Decision
	for i, c := range s.Checks(key) {
		d, err := s.limiters[i].Allow(ctx, c.Key)
		out.Attempts += d.Attempts
		if err != nil {
			return out, fmt.Errorf("multi-limit-sequential: %s: %w", c.Policy, err)
		}
		if !d.Allowed {
			out.Allowed, out.Limit, out.Remaining, out.RetryAfter = false, d.Limit, 0, d.RetryAfter
			return out, nil
		}
		if i == 0 || d.Remaining < out.Remaining {
			out.Limit, out.Remaining = d.Limit, d.Remaining
		}
	}
	out.Allowed = true
	return out, nil
}

// Checks says each limit's key and policy for the client behind key.
func (a *Atomic) Checks(key string) []Check { return multiChecks(a.policy, key) }

// Keys lists the Redis keys of the client behind key.
func (a *Atomic) Keys(key string) []string { return keysOfChecks(a.Checks(key)) }

// Load loads the Decider's script.
func (a *Atomic) Load(ctx context.Context) error { return a.decider.Load(ctx) }

// Allow decides both limits in one call. A denial's Retry-After is the
// longest of the limits that denied; Remaining is the least of the limits'
// asked.
func (a *Atomic) Allow(ctx context.Context, key string) (Decision, error) {
	out, err := a.decider.Decide(ctx, a.Checks(key))
	d := Decision{Allowed: out.Allowed, Attempts: out.Calls}
	if err != nil {
		return d, fmt.Errorf("multi-limit-atomic: %w", err)
	}
	first := true
	for _, c := range out.Checks {
		if c.Skipped {
			continue
		}
		if first || c.Remaining < d.Remaining {
			d.Limit, d.Remaining = c.Limit, c.Remaining
		}
		first = false
		if !c.Allowed {
			d.RetryAfter = max(d.RetryAfter, c.RetryAfter)
		}
	}
	return d, nil
}

func keysOfChecks(checks []Check) []string {
	var keys []string
	for _, c := range checks {
		keys = append(keys, checkKeys(c)...)
	}
	return keys
}
