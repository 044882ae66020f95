package edge

import (
	"strconv"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// rlsCacheKey names a limit in the deny cache: its counter and its policy,
// so that a reload that changes the limit never meets the old one's
// denials.
func rlsCacheKey(c algorithms.Check) string {
	return c.Key + "|" + strconv.FormatInt(c.Policy.Limit, 10) + "/" + strconv.FormatInt(c.Policy.Window.Milliseconds(), 10)
}

// cachedDenials reports whether a limit the call meets is in the deny cache
// for at least the hits the call would take of it, and returns the
// decisions its statuses show: the cached limits denied until their entries
// pass, the others admitted, with what remains of them unknown (0).
func (s *RLS) cachedDenials(met []rlsLimit, now time.Time) ([]algorithms.Decision, bool) {
	if !s.cfg.DenyCache {
		return nil, false
	}
	// Descriptors of one call that meet one counter add their hits, as
	// callChecks adds them.
	hits := map[string]int64{}
	for _, m := range met {
		if !m.blocks && !m.check.Shadow {
			hits[rlsCacheKey(m.check)] += m.check.Cost
		}
	}
	decisions := make([]algorithms.Decision, len(met))
	found := false
	for i, m := range met {
		if m.blocks || m.check.Shadow {
			continue
		}
		decisions[i].Allowed = true
		key := rlsCacheKey(m.check)
		// A cost of 0 asks whether one more would be admitted: it is
		// refused exactly when a cost of 1 is.
		if d, ok := s.denied.get(key, now); ok && max(hits[key], 1) >= d.cost {
			decisions[i] = algorithms.Decision{Limit: m.check.Policy.Limit, RetryAfter: d.until.Sub(now), Reset: d.reset.Sub(now)}
			found = true
		}
	}
	return decisions, found
}

// cacheDenials remembers the limits Redis refused (not those in shadow
// mode), decided at now: until they admit again the hits asked.
func (s *RLS) cacheDenials(checks []algorithms.Check, out algorithms.Outcome, now time.Time) {
	if !s.cfg.DenyCache {
		return
	}
	for j, c := range checks {
		d := out.Checks[j]
		if d.Allowed || c.Shadow || d.RetryAfter <= 0 {
			continue
		}
		until := now.Add(d.RetryAfter)
		s.denied.put(rlsCacheKey(c), denial{until: until, reset: now.Add(max(d.RetryAfter, d.Reset)), cost: max(c.Cost, 1)}, now)
	}
}
