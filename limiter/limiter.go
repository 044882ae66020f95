// Package limiter is the decision at the heart of ratelab's production
// limiter, shared by its two front doors: the HTTP gateway (package edge)
// and Envoy's rate limit service (package rls). A decision is three steps,
// each in one place:
//
//   - plan: the front door turns a request into a Plan, the limits it meets
//     in the rules serving (rules.Set.Match for an HTTP request,
//     rules.Set.LookupCall for Envoy's descriptors), each with its counter
//     and what the request takes of it;
//   - decide: Limiter.Decide decides the plan: from the deny cache when a
//     limit it meets is known to refuse it; else in Redis, every limit at
//     once (algorithms.Decider: one script call per Cluster hash tag, sent
//     with other requests' calls when the client batches them), behind a
//     circuit breaker; and by the fail mode when Redis fails;
//   - answer: the Answer says what was decided, for the request and for
//     each limit; Decide has counted it in the metrics, and the front door
//     renders it (a 429 with RateLimit fields, or OVER_LIMIT with the
//     descriptors' statuses).
//
// Caller input is checked by the front door against Bounds before it
// reaches a plan; the plan's checks are validated again before Redis, and a
// bad one is an Answer of OutcomeInvalid, never a Redis failure: nothing a
// caller sends can reach the circuit breaker's count.
package limiter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
)

// OnError is what a decision gets when Redis fails or the circuit is open.
type OnError string

const (
	// FailOpen admits the request, counted as a Redis error.
	FailOpen OnError = "open"
	// FailClosed refuses it.
	FailClosed OnError = "closed"
	// FailLocal decides with Config.Local, this node's share of each limit
	// in memory, so that a fleet of nodes admits at most about the limit
	// between them while Redis fails; without Local it fails open.
	FailLocal OnError = "local"
)

// Decider decides every limit of one request in one call: the request is
// admitted, and every limit consumed, only if every limit not in shadow
// mode admits it (algorithms.Decider).
type Decider interface {
	Decide(ctx context.Context, checks []algorithms.Check) (algorithms.Outcome, error)
}

var _ Decider = (*algorithms.Decider)(nil)

// Config configures a Limiter.
type Config struct {
	// Decider decides a plan's checks in Redis; required.
	Decider Decider
	// Timeout bounds one decision in Redis; 200ms when zero.
	Timeout time.Duration
	// OnError is what a decision gets when Redis fails; FailOpen when empty.
	OnError OnError
	// Local decides while Redis fails, with FailLocal.
	Local *LocalLimiter
	// BreakerFailures opens the circuit after this many Redis failures in a
	// row: decisions then skip Redis (at once, by OnError) while it is asked
	// in the background, every 100ms, until it answers. 0: never.
	BreakerFailures int
	// DenyCache answers a request that meets a limit known to refuse it
	// from memory, without Redis, until that limit admits again. A
	// limiter's retry-after is the earliest a request of the same cost can
	// be admitted, and a refused request consumes nothing, so the cache
	// never refuses what Redis would admit.
	DenyCache bool
	// Metrics count decisions, Redis errors and latency; NewMetrics() when nil.
	Metrics *Metrics
	// Log receives lines about Redis failing (at most one per kind of
	// failure per 10 s, with a count of the others), the circuit, and Redis
	// answering again; none when nil.
	Log io.Writer
	// Name starts every line written to Log ("ratelab edge", "ratelab rls");
	// "ratelab" when empty.
	Name string
	// Now is the clock of the deny cache; time.Now when nil.
	Now func() time.Time
}

// Limiter decides plans. It owns the goroutine that asks Redis while its
// circuit is open: Close it when it decides no more.
type Limiter struct {
	cfg    Config
	health *health
	denied denyCache
}

// New returns a Limiter deciding with cfg.
func New(cfg Config) *Limiter {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 200 * time.Millisecond
	}
	if cfg.OnError == "" {
		cfg.OnError = FailOpen
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Name == "" {
		cfg.Name = "ratelab"
	}
	probe := func(ctx context.Context) error {
		_, err := cfg.Decider.Decide(ctx, []algorithms.Check{probeCheck})
		return err
	}
	return &Limiter{cfg: cfg, health: newHealth(cfg.Log, cfg.Name, cfg.BreakerFailures, cfg.Timeout, cfg.Metrics, probe)}
}

// probeCheck is what an open circuit asks Redis with: a shadow limit of
// its own key, which never denies anything.
var probeCheck = algorithms.Check{Key: algorithms.Key("ratelab-probe", "sliding-log"), Algorithm: "sliding-log",
	Policy: algorithms.Policy{Limit: 1, Window: time.Second}, Cost: 1, Shadow: true}

// Close stops the goroutine that asks Redis while the circuit is open and
// waits for it (for a probe in flight, at most Config.Timeout), then closes
// the circuit for good: a Limiter used after Close still decides, in
// Redis, as with no circuit breaker. A second call does nothing.
func (l *Limiter) Close() { l.health.close() }

// Metrics are the Limiter's counters.
func (l *Limiter) Metrics() *Metrics { return l.cfg.Metrics }

// OnError is the fail mode the Limiter decides by while Redis fails.
func (l *Limiter) OnError() OnError { return l.cfg.OnError }

// Limit is one limit of a Plan.
type Limit struct {
	// ID names the limit in the metrics and the RateLimit fields: the
	// rules limit's ID, or OverrideID for an Envoy descriptor's own limit.
	ID string
	// Check is what Redis is asked: the counter's key, its algorithm and
	// policy, what the request takes of it (Cost; 0 asks whether one more
	// would be admitted, consuming nothing), and shadow mode (counted and
	// reported, never denies).
	Check algorithms.Check
	// Unlimited limits admit every request, without Redis; Check is unused.
	Unlimited bool
	// Blocks is a limit of 0 requests (Envoy's requests_per_unit 0): it
	// refuses every request, without Redis. Check holds its window.
	Blocks bool
	// Hidden limits are not the clients' business: States leaves them out
	// (a limit on trial in shadow mode).
	Hidden bool
	// Group is the part of the request the limit belongs to: an Envoy
	// descriptor's index; 0 for an HTTP request.
	Group int
}

// OverrideID names an Envoy descriptor's own limit (its limit field) in
// the metrics and the RateLimit fields.
const OverrideID = "override"

// Plan is what one request is decided by: the limits it meets, all looked
// up in one version of the rules.
type Plan struct {
	// Domain is the rules' domain, for the metrics.
	Domain string
	// Limits are the limits the request meets.
	Limits []Limit
}

// Result is one limit's part in an Answer.
type Result struct {
	// Decided says whether the limit was decided for this request. It is
	// false for a limit never put to Redis: a later Cluster call's once an
	// earlier one denied, the other limits of a request the deny cache
	// answered, every limit of a request decided by the fail mode; its
	// other fields then say nothing.
	Decided bool
	// Allowed reports whether this limit admits the request (one in shadow
	// mode may not, and still let it through).
	Allowed bool
	// Remaining is what the limit admits more: after this request when it
	// was consumed, else now; 0 when it refused.
	Remaining int64
	// RetryAfter is, when it refused, how long until it admits the request
	// again.
	RetryAfter time.Duration
	// Reset is how long until the limit is whole again; zero when unknown.
	Reset time.Duration
	// Lease is the lease an admitted request holds of an in-flight limit.
	Lease string
}

// Outcomes of a decision, as the Answer and the metrics give them.
const (
	OutcomeAllowed      = "allowed"
	OutcomeDenied       = "denied"
	OutcomeDenyCache    = "denied_from_cache"
	OutcomeShadowDenied = "shadow_denied" // a limit in shadow mode would have denied; let through
	OutcomeErrorOpen    = "redis_error_open"
	OutcomeErrorClosed  = "redis_error_closed"
	// OutcomeErrorLocalAllowed and OutcomeErrorLocalDenied are decisions of
	// the local limiter (FailLocal) while Redis failed.
	OutcomeErrorLocalAllowed = "redis_error_local_allowed"
	OutcomeErrorLocalDenied  = "redis_error_local_denied"
	// OutcomeInvalid is a plan that could not be decided: a check out of
	// bounds. It reaches neither Redis nor the circuit breaker.
	OutcomeInvalid = "invalid"
	// OutcomeCanceled is a request whose caller went away before it was
	// decided: there is nothing to answer, and it is not Redis's failure.
	OutcomeCanceled = "canceled"
)

// Answer is a decided Plan.
type Answer struct {
	// Outcome is the request's: one of the Outcome constants.
	Outcome string
	// Limits has one Result per limit of the plan, in order.
	Limits []Result
	// Cause is, for an outcome decided without Redis because it failed, the
	// kind of failure: one of the RedisError constants.
	Cause string
	// Local is what the local limiter decided, with the FailLocal outcomes.
	Local LocalAnswer
	// Err is what went wrong: Redis's error (also for a request refused
	// without Redis while it failed, being over a limit whatever Redis
	// holds), the local limiter's, or the invalid check's; nil when Redis
	// decided.
	Err error
}

// Allowed reports whether the request goes through.
func (a Answer) Allowed() bool {
	switch a.Outcome {
	case OutcomeAllowed, OutcomeShadowDenied, OutcomeErrorOpen, OutcomeErrorLocalAllowed:
		return true
	}
	return false
}

// FromRedis reports whether Redis (or the deny cache, from what Redis said
// before) decided the request, so that its limits' Results say something.
func (a Answer) FromRedis() bool {
	switch a.Outcome {
	case OutcomeAllowed, OutcomeDenied, OutcomeDenyCache, OutcomeShadowDenied:
		return true
	}
	return false
}

// CauseText says what the failure the answer was decided without means,
// for a 503's body or a log line.
func (a Answer) CauseText() string {
	c := causes[a.Cause]
	if a.Outcome == OutcomeErrorClosed && a.Local.failed {
		c += ", and the local limiter failed"
	}
	return c
}

// States are the limits of p the clients are told of (not Hidden, not
// unlimited), as the RateLimit fields show them: what a decided limit
// said, and the others admitting.
func (a Answer) States(p Plan) []State {
	states := make([]State, 0, len(p.Limits))
	for i, lim := range p.Limits {
		if lim.Hidden || lim.Unlimited {
			continue
		}
		s := State{Name: lim.ID, Policy: lim.Check.Policy, Allowed: true, InFlight: lim.Check.Algorithm == algorithms.InFlight}
		if r := a.Limits[i]; r.Decided {
			s.Allowed, s.Remaining, s.RetryAfter, s.Reset = r.Allowed, r.Remaining, r.RetryAfter, r.Reset
		}
		states = append(states, s)
	}
	return states
}

// checks are what Redis is asked for a plan: one check per counter (Envoy
// sends the same descriptor twice when two actions build it: their takes
// add up, as envoyproxy/ratelimit adds them to one counter), and for each
// limit of the plan the index of its check (none for one decided without
// Redis). A request over a limit whatever Redis holds (a limit of 0, or
// more taken than the limit) consumes nothing: then every check only asks.
type checks struct {
	list []algorithms.Check
	at   []int  // per plan limit: its check, or -1
	over []bool // per plan limit: over it whatever Redis holds
	// overAny is a limit not in shadow mode that the request is over.
	overAny bool
}

func planChecks(p Plan) checks {
	cs := checks{at: make([]int, len(p.Limits)), over: make([]bool, len(p.Limits)), list: make([]algorithms.Check, 0, len(p.Limits))}
	// A request meets a few limits: a linear search finds a shared counter
	// sooner than a map is built; a call of many descriptors gets one.
	var byKey map[string]int
	if len(p.Limits) > 8 {
		byKey = make(map[string]int, len(p.Limits))
	}
	for i, lim := range p.Limits {
		cs.at[i] = -1
		switch {
		case lim.Unlimited:
			continue
		case lim.Blocks:
			cs.over[i] = true
			cs.overAny = cs.overAny || !lim.Check.Shadow
			continue
		}
		if j, ok := cs.find(byKey, lim.Check.Key); ok {
			cs.list[j].Cost += lim.Check.Cost
			cs.at[i] = j
			continue
		}
		if byKey != nil {
			byKey[lim.Check.Key] = len(cs.list)
		}
		cs.at[i] = len(cs.list)
		cs.list = append(cs.list, lim.Check)
	}
	for j, c := range cs.list {
		if c.Cost <= c.Policy.Capacity() {
			continue
		}
		// More than the limit, one limit or several descriptors together:
		// the request is over it, and only asks.
		cs.list[j].Cost = 0
		for i := range p.Limits {
			if cs.at[i] == j {
				cs.over[i] = true
			}
		}
		cs.overAny = cs.overAny || !c.Shadow
	}
	if cs.overAny {
		for j := range cs.list {
			cs.list[j].Cost = 0
		}
	}
	return cs
}

// find is the check of key: in byKey when there is one, else by searching.
func (cs checks) find(byKey map[string]int, key string) (int, bool) {
	if byKey != nil {
		j, ok := byKey[key]
		return j, ok
	}
	for j, c := range cs.list {
		if c.Key == key {
			return j, true
		}
	}
	return 0, false
}

// Decide decides p: see the package comment. It never returns without an
// Answer; an outcome decided without Redis says why in Cause and Err.
func (l *Limiter) Decide(ctx context.Context, p Plan) Answer {
	a := Answer{Limits: make([]Result, len(p.Limits))}
	cs := planChecks(p)
	for j, c := range cs.list {
		if err := c.Validate(); err != nil {
			a.Outcome, a.Err = OutcomeInvalid, fmt.Errorf("check %d: %w", j+1, err)
			l.cfg.Metrics.decision(OutcomeInvalid)
			return a
		}
	}
	// The scripts keep time in whole milliseconds: so does the cache, so
	// that it never holds a denial longer than Redis would.
	now := l.cfg.Now().Truncate(time.Millisecond)
	if l.cached(p, cs, now, &a) {
		l.cfg.Metrics.denyCacheHit()
		l.count(p, cs, a)
		return a
	}
	var out algorithms.Outcome
	if len(cs.list) > 0 {
		var err error
		if out, err = l.redis(ctx, cs.list); err != nil {
			if ctx.Err() != nil {
				a.Outcome, a.Err = OutcomeCanceled, ctx.Err()
				return a
			}
			if cs.overAny {
				// Over a limit whatever Redis holds: Redis was only asked
				// what the others hold, and the request is refused without
				// it, whatever the fail mode.
				a.Err = err
				known(p, cs, &a)
				a.Outcome = outcome(p, a)
				l.count(p, cs, a)
				return a
			}
			l.fallback(ctx, cs.list, err, &a)
			l.count(p, cs, a)
			return a
		}
		l.cacheDenials(cs.list, out, now)
	}
	l.results(p, cs, out, &a)
	l.count(p, cs, a)
	return a
}

// known fills the Results of a's limits that are decided without Redis and
// that a does not hold yet: an unlimited limit admits; a limit the request
// is over whatever Redis holds refuses.
func known(p Plan, cs checks, a *Answer) {
	for i, lim := range p.Limits {
		switch r := &a.Limits[i]; {
		case r.Decided:
		case lim.Unlimited:
			*r = Result{Decided: true, Allowed: true}
		case cs.over[i]:
			*r = Result{Decided: true}
		}
	}
}

// outcome is the Outcome of a request whose limits a's Results decided:
// denied by a decided limit not in shadow mode that refused, else shadow
// denied by one in shadow mode, else allowed.
func outcome(p Plan, a Answer) string {
	denied, shadowDenied := false, false
	for i, lim := range p.Limits {
		if r := a.Limits[i]; r.Decided && !r.Allowed {
			if lim.Check.Shadow {
				shadowDenied = true
			} else {
				denied = true
			}
		}
	}
	switch {
	case denied:
		return OutcomeDenied
	case shadowDenied:
		return OutcomeShadowDenied
	}
	return OutcomeAllowed
}

// redis decides checks in Redis, unless the circuit is open.
func (l *Limiter) redis(ctx context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
	if kind, open := l.health.circuitOpen(); open {
		return algorithms.Outcome{}, &circuitError{kind: kind}
	}
	dctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	start := time.Now()
	out, err := l.cfg.Decider.Decide(dctx, checks)
	l.cfg.Metrics.observe(time.Since(start))
	if err == nil && len(out.Checks) != len(checks) {
		err = fmt.Errorf("decide: %d decisions for %d limits", len(out.Checks), len(checks))
	}
	var refund *algorithms.RefundError
	switch {
	case err == nil:
		l.health.answered()
	case ctx.Err() != nil:
		// The caller went away: not Redis's failure.
	case errors.As(err, &refund):
		// Redis decided: a denial, which stands. Giving back what an earlier
		// Cluster call consumed failed: Redis's failure, counted as one,
		// though it admits nothing more.
		kind := errorKind(refund.Err)
		l.cfg.Metrics.redisError(kind)
		l.health.failedWith(kind, err)
		return out, nil
	default:
		kind := errorKind(err)
		l.cfg.Metrics.redisError(kind)
		l.health.failedWith(kind, err)
	}
	return out, err
}

// circuitError is a decision the open circuit kept from Redis.
type circuitError struct{ kind string }

func (e *circuitError) Error() string { return "circuit open: " + e.kind }

// fallback decides without Redis, which failed with err, as OnError says:
// with the local limiter under FailLocal (refusing when it fails too:
// letting the request through would admit more than this node's share).
func (l *Limiter) fallback(ctx context.Context, checks []algorithms.Check, err error, a *Answer) {
	a.Err = err
	a.Cause = errorKind(err)
	var ce *circuitError
	if errors.As(err, &ce) {
		a.Cause = ce.kind
	}
	switch {
	case l.cfg.OnError == FailLocal && l.cfg.Local != nil:
		lctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
		la, lerr := l.cfg.Local.decide(lctx, checks)
		cancel()
		switch {
		case lerr != nil:
			a.Outcome, a.Err, a.Local.failed = OutcomeErrorClosed, errors.Join(err, lerr), true
		case la.Allowed:
			a.Outcome, a.Local = OutcomeErrorLocalAllowed, la
		default:
			a.Outcome, a.Local = OutcomeErrorLocalDenied, la
		}
	case l.cfg.OnError == FailClosed:
		a.Outcome = OutcomeErrorClosed
	default:
		a.Outcome = OutcomeErrorOpen
	}
}

// results reads Redis's outcome into a's Results and decides its Outcome.
// A counter shared by several limits of the plan reports to each what
// remained after its own take, as envoyproxy/ratelimit's counter, which
// adds the descriptors' hits one after another.
func (l *Limiter) results(p Plan, cs checks, out algorithms.Outcome, a *Answer) {
	later := make([]int64, len(cs.list))
	for i := len(p.Limits) - 1; i >= 0; i-- {
		lim, r := p.Limits[i], &a.Limits[i]
		switch j := cs.at[i]; {
		case lim.Unlimited:
			r.Decided, r.Allowed = true, true
		case lim.Blocks:
			r.Decided = true
		case out.Checks[j].Skipped:
		default:
			d := out.Checks[j]
			r.Decided, r.Allowed, r.Remaining, r.RetryAfter, r.Reset = true, d.Allowed, d.Remaining, d.RetryAfter, d.Reset
			r.Lease = leaseOf(cs.list[j], out.Allowed, d)
			if out.Allowed && cs.list[j].Cost > 0 {
				r.Remaining += later[j]
				later[j] += lim.Check.Cost
			}
		}
		if cs.over[i] {
			// Refused whatever Redis holds, also when a Cluster call
			// before its own denied and it was never asked.
			r.Decided, r.Allowed, r.Remaining = true, false, 0
		}
	}
	a.Outcome = outcome(p, *a)
}

// count counts a decided answer: the request's outcome, and each limit's
// (not decided, for every limit of an answer of the fail mode).
func (l *Limiter) count(p Plan, cs checks, a Answer) {
	l.cfg.Metrics.decision(a.Outcome)
	for i, lim := range p.Limits {
		r := a.Limits[i]
		outcome := LimitNotDecided
		switch {
		case !r.Decided:
		case r.Allowed:
			outcome = LimitAllowed
		case a.Outcome == OutcomeDenyCache && !cs.over[i]:
			outcome = LimitDeniedFromCache
		case lim.Check.Shadow:
			outcome = LimitShadowDenied
		default:
			outcome = LimitDenied
		}
		l.cfg.Metrics.limitDecision(p.Domain, lim.ID, outcome)
	}
}

// Validate checks cfg; errors are *field.Error.
func (cfg Config) Validate() error {
	switch {
	case cfg.Decider == nil:
		return field.Errorf("Decider", "is required")
	case cfg.Timeout < 0:
		return field.Errorf("Timeout", "must be positive (got %s)", cfg.Timeout)
	case cfg.OnError != "" && cfg.OnError != FailOpen && cfg.OnError != FailClosed && cfg.OnError != FailLocal:
		return field.Errorf("OnError", "%q: want open, closed or local", cfg.OnError)
	case cfg.BreakerFailures < 0:
		return field.Errorf("BreakerFailures", "must be 0 or more (got %d)", cfg.BreakerFailures)
	}
	return nil
}
