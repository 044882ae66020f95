package algorithms

import (
	"context"
	"fmt"
)

// InFlight is the in-flight limit, decided beside the rate limits: a Check
// of Algorithm InFlight holds Policy.Limit requests in flight at once, each
// holding its slot until it is released or its lease, Policy.Window, runs
// out. Its state is a sorted set of leases (algorithms/lua/in-flight.lua).
// It is decided in the same call as the request's other limits: a request
// another limit denies takes no slot, and one refused a slot consumes no
// rate. Its Decision's Member names the lease that Release gives back.
const InFlight = "in-flight"

// Release gives back the slot of an admitted in-flight check: the lease
// member (Decision.Member) at key (Check.Key). It is idempotent: a lease
// released twice, or already expired, frees nothing more. One key, so it
// is Cluster-safe.
func (d *Decider) Release(ctx context.Context, key, member string) error {
	if member == "" {
		return nil
	}
	if err := d.client.ZRem(ctx, key, member).Err(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}
