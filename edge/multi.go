package edge

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/rules"
)

// Decider decides every limit of one request in one call: the request is
// admitted, and every limit consumed, only if every limit not in shadow
// mode admits it (algorithms.Decider).
type Decider interface {
	Decide(ctx context.Context, checks []algorithms.Check) (algorithms.Outcome, error)
}

var _ Decider = (*algorithms.Decider)(nil)

// probeCheck is what an open circuit asks Redis with, under rules.
var probeCheck = algorithms.Check{Key: algorithms.Key("ratelab-probe", "sliding-log"), Algorithm: "sliding-log",
	Policy: algorithms.Policy{Limit: 1, Window: time.Second}, Cost: 1, Shadow: true}

// request is what the rules see of r.
func (l *Handler) request(r *http.Request) rules.Request {
	return rules.Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host,
		RemoteAddress: l.cfg.KeyBy.clientIP(r), Header: r.Header}
}

// serveRules decides r by the limits it meets in the rules serving: the
// unlimited ones at once, the others in one call of the Decider.
func (l *Handler) serveRules(w http.ResponseWriter, r *http.Request) {
	set := l.cfg.Rules.Current().Set // one set decides the whole request, whatever a reload does meanwhile
	hits := set.Match(l.request(r))
	checks := make([]algorithms.Check, 0, len(hits))
	met := make([]*rules.Limit, 0, len(hits))
	for _, h := range hits {
		if h.Limit.Unlimited {
			l.cfg.Metrics.limitDecision(h.Limit.ID, LimitAllowed)
			continue
		}
		checks = append(checks, algorithms.Check{Key: h.Key, Algorithm: h.Limit.Algorithm, Policy: h.Limit.Policy,
			Cost: h.Limit.Cost, Shadow: h.Limit.Shadow || l.cfg.Shadow})
		met = append(met, h.Limit)
	}
	if len(checks) == 0 {
		l.cfg.Metrics.decision(OutcomeAllowed)
		l.next.ServeHTTP(w, r)
		return
	}
	now := l.cfg.Now().Truncate(time.Millisecond)
	if states, ok := l.cachedDenials(checks, met, now); ok {
		l.cfg.Metrics.denyCacheHit()
		l.cfg.Metrics.decision(OutcomeDenyCache)
		retry := setLimitHeaders(w.Header(), l.cfg.Headers, states)
		l.tooManyRules(w, retry, states)
		return
	}
	if kind, open := l.health.circuitOpen(); open {
		l.fallback(w, r, kind, l.localChecks(checks))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.cfg.Timeout)
	start := time.Now()
	out, err := l.cfg.Decider.Decide(ctx, checks)
	cancel()
	l.cfg.Metrics.observe(time.Since(start))
	if err == nil && len(out.Checks) != len(checks) {
		err = fmt.Errorf("decide: %d decisions for %d limits", len(out.Checks), len(checks))
	}
	switch {
	case err != nil && r.Context().Err() != nil:
		return // the client went away: nothing to answer, and not Redis's fault
	case err != nil:
		kind := errorKind(err)
		l.cfg.Metrics.redisError(kind)
		l.health.failedWith(kind, err)
		l.fallback(w, r, kind, l.localChecks(checks))
		return
	}
	l.health.answered()

	states := make([]limitState, 0, len(checks))
	blocked, wouldBlock := false, false
	for i, c := range checks {
		d, lim := out.Checks[i], met[i]
		outcome := LimitAllowed
		switch {
		case d.Allowed:
		case c.Shadow:
			outcome, wouldBlock = LimitShadowDenied, true
		default:
			outcome, blocked = LimitDenied, true
			if l.cfg.DenyCache && d.RetryAfter > 0 {
				l.cacheDenial(c.Key, now.Add(d.RetryAfter), now)
			}
		}
		l.cfg.Metrics.limitDecision(lim.ID, outcome)
		if lim.Shadow {
			continue // a limit on trial is not the clients' business
		}
		states = append(states, limitState{Name: lim.ID, Policy: lim.Policy, Allowed: d.Allowed,
			Remaining: d.Remaining, RetryAfter: d.RetryAfter, Reset: d.Reset})
	}
	retry := setLimitHeaders(w.Header(), l.cfg.Headers, states)
	switch {
	case blocked:
		l.cfg.Metrics.decision(OutcomeDenied)
		l.tooManyRules(w, retry, states)
		return
	case wouldBlock:
		l.cfg.Metrics.decision(OutcomeShadowDenied)
	default:
		l.cfg.Metrics.decision(OutcomeAllowed)
	}
	l.next.ServeHTTP(w, r)
}

// cachedDenials reports whether a limit the request meets is in the deny
// cache, and returns the states the headers show: the cached limits denied
// until their entries pass, the others listed for RateLimit-Policy.
func (l *Handler) cachedDenials(checks []algorithms.Check, met []*rules.Limit, now time.Time) ([]limitState, bool) {
	if !l.cfg.DenyCache {
		return nil, false
	}
	var states []limitState
	hit := false
	for i, c := range checks {
		if c.Shadow || met[i].Shadow {
			continue
		}
		s := limitState{Name: met[i].ID, Policy: met[i].Policy, Allowed: true}
		if until, ok := l.cachedDenial(c.Key, now); ok {
			s.Allowed, s.RetryAfter, hit = false, until.Sub(now), true
		}
		states = append(states, s)
	}
	return states, hit
}

// tooManyRules answers 429, the headers set, naming the limit that admits
// again last.
func (l *Handler) tooManyRules(w http.ResponseWriter, retry time.Duration, states []limitState) {
	var names []string
	for _, s := range states {
		if !s.Allowed {
			names = append(names, fmt.Sprintf("%q (%d per %dms)", s.Name, s.Policy.Limit, s.Policy.Window.Milliseconds()))
		}
	}
	w.Header().Set("Retry-After", fmt.Sprint(ceilSeconds(retry)))
	problem(w, http.StatusTooManyRequests, "Too Many Requests",
		"rate limit exceeded: "+strings.Join(names, ", "), retry.Milliseconds())
}

// localChecks decides checks with the local limiter, each limit at this
// gateway's share; nil without one.
func (l *Handler) localChecks(checks []algorithms.Check) func(context.Context) (localAnswer, error) {
	if l.cfg.Local == nil {
		return nil
	}
	return func(ctx context.Context) (localAnswer, error) { return l.cfg.Local.decide(ctx, checks) }
}
