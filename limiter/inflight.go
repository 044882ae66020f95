package limiter

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelab/ratelab/algorithms"
)

// Releaser is a Decider that gives back the slot of an in-flight limit
// (algorithms.InFlight) when the request that took it ends:
// algorithms.Decider.
type Releaser interface {
	Release(ctx context.Context, key, member string) error
}

var _ Releaser = (*algorithms.Decider)(nil)

// Lease is an in-flight slot a request holds: the limit's key and the
// request's lease in it.
type Lease struct {
	Key, Member string
}

// Leases are the in-flight slots a's request took: one per in-flight limit
// that admitted it, when the request was admitted (a request denied takes
// none, and one refused a slot takes no rate: the Decider decides all its
// limits in one call).
func (a Answer) Leases(p Plan) []Lease {
	var ls []Lease
	for i, lim := range p.Limits {
		if r := a.Limits[i]; r.Lease != "" {
			ls = append(ls, Lease{Key: lim.Check.Key, Member: r.Lease})
		}
	}
	return ls
}

// Release gives back the in-flight slots a's request took, once it has
// ended: call it exactly once per Answer, when the response is complete or
// the client went away. Each release has its own deadline, Config.Timeout,
// whatever ctx's (a client gone away has canceled it): a release that
// fails is counted (ratelab_edge_in_flight_releases_total{result="failed"})
// and left to the lease, which frees the slot when it runs out.
func (l *Limiter) Release(ctx context.Context, p Plan, a Answer) {
	ls := a.Leases(p)
	if len(ls) == 0 {
		return
	}
	rel, ok := l.cfg.Decider.(Releaser)
	if !ok {
		for range ls {
			l.cfg.Metrics.releases.failed.Inc()
		}
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, lease := range ls {
		rctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
		err := rel.Release(rctx, lease.Key, lease.Member)
		cancel()
		if err != nil {
			l.cfg.Metrics.releases.failed.Inc()
			continue
		}
		l.cfg.Metrics.releases.released.Inc()
	}
}

// releaseCounts counts the releases of in-flight slots.
type releaseCounts struct {
	vec              *prometheus.CounterVec
	released, failed prometheus.Counter
}

func newReleaseCounts() releaseCounts {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelab_edge_in_flight_releases_total",
		Help: "Releases of in-flight slots when a request ends, by result: released, or failed (the slot is then freed when its lease runs out).",
	}, []string{"result"})
	return releaseCounts{vec: vec, released: vec.WithLabelValues("released"), failed: vec.WithLabelValues("failed")}
}

// Releases returns the count of in-flight releases with result, released
// or failed.
func (m *Metrics) Releases(result string) int64 {
	switch result {
	case "released":
		return counterValue(m.releases.released)
	case "failed":
		return counterValue(m.releases.failed)
	}
	return 0
}

// leaseOf is the lease a decision took: its member, when the check is an
// in-flight limit's and the request was admitted and consumed it.
func leaseOf(c algorithms.Check, allowed bool, d algorithms.Decision) string {
	if c.Algorithm != algorithms.InFlight || !allowed || !d.Allowed {
		return ""
	}
	return d.Member
}
