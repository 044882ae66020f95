package algorithms

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Check is one limit of a multi-limit decision: the counter's base key, the
// algorithm and policy that decide it, what one request costs, and whether
// it is in shadow mode (counted, never blocking).
type Check struct {
	Key, Algorithm string
	Policy         Policy
	Cost           int64
	Shadow         bool
}

// Outcome is a multi-limit decision: Allowed when every check that is not
// in shadow mode admitted; Checks holds each check's own decision, in the
// order given; Calls is the number of Redis calls it took.
type Outcome struct {
	Allowed bool
	Checks  []Decision
	Calls   int
}

// DeciderOption tunes a Decider.
type DeciderOption func(*deciderOptions)

type deciderOptions struct{ clock Clock }

// WithDeciderClock sets where the Decider takes the time from.
func WithDeciderClock(c Clock) DeciderOption { return func(o *deciderOptions) { o.clock = c } }

// Decider decides several checks for one request.
//
// This is a stand-in with the contract of the atomic decider: it decides
// the checks one after the other, one call each.
type Decider struct {
	client redis.UniversalClient
	o      deciderOptions

	mu   sync.Mutex
	lims map[string]Limiter
}

// NewDecider returns a Decider on client.
func NewDecider(client redis.UniversalClient, opts ...DeciderOption) *Decider {
	d := &Decider{client: client, lims: map[string]Limiter{}}
	for _, opt := range opts {
		opt(&d.o)
	}
	return d
}

// Load loads the scripts into Redis.
func (d *Decider) Load(ctx context.Context) error { return nil }

// Decide decides checks.
func (d *Decider) Decide(ctx context.Context, checks []Check) (Outcome, error) {
	out := Outcome{Allowed: true, Checks: make([]Decision, len(checks))}
	for i, c := range checks {
		lim, err := d.limiter(c)
		if err != nil {
			return out, err
		}
		dec, err := lim.Allow(ctx, c.Key)
		out.Calls += dec.Attempts
		if err != nil {
			return out, fmt.Errorf("decide: %w", err)
		}
		out.Checks[i] = dec
		if !dec.Allowed && !c.Shadow {
			out.Allowed = false
		}
	}
	return out, nil
}

func (d *Decider) limiter(c Check) (Limiter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := c.Algorithm + "/" + c.Policy.String()
	if l, ok := d.lims[k]; ok {
		return l, nil
	}
	l, err := New(c.Algorithm, d.client, c.Policy, WithClock(d.o.clock))
	if err != nil {
		return nil, err
	}
	d.lims[k] = l
	return l, nil
}
