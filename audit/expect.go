package audit

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/rules"
)

// ExpectedLimit is one limit the audit holds each consumer to.
type ExpectedLimit struct {
	Limit  int64
	Window time.Duration
	// Algorithm is the algorithm whose guarantee it is held to; empty for
	// the sliding-window rule (at most Limit in any Window).
	Algorithm string
	// Burst is, for token-bucket and gcra, the most admitted at one
	// instant; zero means Limit. (Left out of the run's id when zero, so
	// that runs without one keep theirs.)
	Burst int64 `json:"Burst,omitempty"`
}

// String is the limit as --expect-limit takes it: 5/1s, 100/1m:gcra,
// 10/1s:gcra:burst=6.
func (e ExpectedLimit) String() string {
	s := fmt.Sprintf("%d/%s", e.Limit, rules.Window(e.Window))
	if e.Algorithm != "" {
		s += ":" + e.Algorithm
	}
	if e.Burst > 0 {
		s += fmt.Sprintf(":burst=%d", e.Burst)
	}
	return s
}

// Policy is the limit's policy.
func (e ExpectedLimit) Policy() algorithms.Policy {
	return algorithms.Policy{Limit: e.Limit, Window: e.Window, Burst: e.Burst}
}

// MaxLimits bounds the limits of one audit: a request's limits are a
// bit mask.
const MaxLimits = 64

// ParseExpectedLimits reads an --expect-limit value: a comma list of
// LIMIT/WINDOW, then optionally :ALGORITHM and, for token-bucket and
// gcra, :burst=N (5/1s,12/10s:gcra, 10/1s:gcra:burst=6), as
// algorithms.ParseLimit reads them; a limit that names no algorithm gets
// algorithm ("" for the sliding-window rule).
func ParseExpectedLimits(s, algorithm string) ([]ExpectedLimit, error) {
	var out []ExpectedLimit
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		l, err := algorithms.ParseLimit(item)
		if err != nil {
			// ParseLimit's error names the limit already: "0/1s": ...
			return nil, field.Errorf("ExpectLimits", "%v", err)
		}
		alg := l.Algorithm
		if alg == "" {
			if !KnownAlgorithm(algorithm) {
				return nil, field.Errorf("ExpectAlgorithm", "%q: want one of %s", algorithm, strings.Join(algorithms.Algorithms(), ", "))
			}
			alg = algorithm
		}
		if algorithms.CheckBurst(alg, l.Policy) != nil {
			// A named algorithm was checked: this one is {ExpectAlgorithm}'s, or none.
			why := "it names no algorithm"
			if alg != "" {
				why = "{ExpectAlgorithm} is " + alg
			}
			return nil, field.Errorf("ExpectLimits", "%q: a burst is for token-bucket and gcra, and %s: name one, as in %s", item, why,
				algorithms.Limit{Policy: l.Policy, Algorithm: "gcra"})
		}
		out = append(out, ExpectedLimit{Limit: l.Policy.Limit, Window: l.Policy.Window, Algorithm: alg, Burst: l.Policy.Burst})
	}
	return out, nil
}

// KnownAlgorithm says whether name is "" (the sliding-window rule) or an
// algorithm an endpoint can be held to.
func KnownAlgorithm(name string) bool {
	if name == "" {
		return true
	}
	info, ok := algorithms.Lookup(name)
	return ok && info.Algorithm
}

// Expectation is what the audit holds an endpoint to: one limit, of
// --expect-limit (ExpectationOf, Expected) or of a rules file
// (RulesExpectations).
type Expectation struct {
	policy algorithms.Policy
	// algorithm is the registry name of the algorithm the endpoint claims;
	// empty for the sliding-window rule.
	algorithm string
	guarantee algorithms.Guarantee
	// ID names the limit in reasons and reports: 5/1s, or a rules limit's
	// ID; names are the names a response's headers may give it (a rules
	// limit's ID and name); descriptor is the rule it is on, in words.
	ID         string
	names      []string
	descriptor string
	// quota is the limit as the gateway advertises it (before cost), and
	// burst its burst in the same units (0 when it has none); cost is what
	// one request takes (1 but in rules); shadow and unlimited as in
	// rules.Limit.
	quota             int64
	burst             int64
	cost              int64
	shadow, unlimited bool
	// refusedMaySpend says a request refused may still have spent this
	// limit (another limit refused it): the checks of remaining count
	// every request, not only those admitted. refusedAtZero says a request
	// this limit alone refused must have been told 0 remaining of it (a
	// rate limit service's OVER_LIMIT status).
	refusedMaySpend, refusedAtZero bool
	// Unmet says why no request met the limit, when what was sent shows
	// it: the engine's side, which knows what it sent, sets it.
	Unmet string
	// noPolicies says the responses speak of descriptors, not of policies
	// (a rate limit service's statuses): a limit none of them names is not
	// one the gateway left out.
	noPolicies bool
}

// ExpectationOf makes the expectation of policy p under algorithm (""
// for the sliding-window rule, which has no burst).
func ExpectationOf(p algorithms.Policy, algorithm string) (Expectation, error) {
	e := Expectation{policy: p, algorithm: algorithm, guarantee: algorithms.SlidingWindow, quota: p.Limit, burst: p.Burst, cost: 1}
	if algorithm != "" {
		info, ok := algorithms.Lookup(algorithm)
		if !ok || !info.Algorithm {
			return e, field.Errorf("ExpectAlgorithm", "%q: want one of %s", algorithm, strings.Join(algorithms.Algorithms(), ", "))
		}
		e.guarantee = info.Guarantee
	}
	if err := algorithms.CheckBurst(algorithm, p); err != nil {
		return e, field.Errorf("ExpectBurst", "%d: a burst is for token-bucket and gcra, not %s", p.Burst, cmp.Or(algorithm, "the sliding-window rule"))
	}
	return e, nil
}

// Expected are the expectations of limits, each named by its text
// (5/1s, 10/1s:gcra:burst=6), from validated limits.
func Expected(limits []ExpectedLimit) []Expectation {
	var exps []Expectation
	for _, e := range limits {
		exp, _ := ExpectationOf(e.Policy(), e.Algorithm) // validated
		exp.ID = e.String()
		exps = append(exps, exp)
	}
	return exps
}

// Names are the limits of exps by the names a response may give them (a
// rules limit's ID and name), for the adverts of a response
// (Record.AddResponse).
func Names(exps []Expectation) map[string]int16 {
	names := map[string]int16{}
	for k, exp := range exps {
		for _, name := range exp.names {
			names[name] = int16(k)
		}
	}
	return names
}

// MaxIn is the most that e's guarantee allows in a span of d.
func (e Expectation) MaxIn(d time.Duration) int64 { return e.guarantee.MaxIn(e.policy, d) }

// RulesExpectations are the limits of a rules file, in file order.
func RulesExpectations(set *rules.Set) []Expectation {
	var exps []Expectation
	for _, l := range set.Limits() {
		exp := Expectation{policy: l.Policy, algorithm: l.Algorithm, guarantee: algorithms.SlidingWindow, ID: l.ID,
			names: []string{l.ID}, descriptor: descriptorText(l.Descriptor), shadow: l.Shadow, unlimited: l.Unlimited, cost: l.Cost, quota: l.Policy.Limit,
			burst: l.Policy.Burst}
		if l.Name != "" && l.Name != l.ID {
			exp.names = append(exp.names, l.Name)
		}
		if info, ok := algorithms.Lookup(l.Algorithm); ok && info.Algorithm {
			exp.guarantee = info.Guarantee
		}
		if l.Cost > 1 && !l.Unlimited {
			// What one request takes: the limit admits whole requests.
			exp.policy.Limit = l.Policy.Limit / l.Cost
			exp.policy.Burst = l.Policy.Burst / l.Cost
		}
		exps = append(exps, exp)
	}
	return exps
}

// descriptorText is the rule a limit is on, its descriptors from the top:
// header:X-Consumer-Id > path=/search.
func descriptorText(d *rules.Descriptor) string {
	var parts []string
	for ; d != nil; d = d.Parent {
		p := d.Key
		if d.Value != "" {
			p += "=" + d.Value
		}
		parts = append(parts, p)
	}
	slices.Reverse(parts)
	return strings.Join(parts, " > ")
}

// units is the policy in the units the limit counts (its quota per
// window) and what one request takes of them. A bucket refills, and a
// sliding counter weighs, units, not whole requests: requests of several
// units are admitted at quota / cost a window, which policy.Limit (the
// quota in whole requests, rounded down) falls short of when the cost
// does not divide the quota. Windows and logs admit whole requests in
// each window, which policy.Limit counts exactly.
func (e Expectation) units() (algorithms.Policy, int64) {
	if e.cost > 1 && e.quota > 0 && !e.unlimited {
		return algorithms.Policy{Limit: e.quota, Window: e.policy.Window, Burst: e.burst}, e.cost
	}
	return e.policy, 1
}

// rule says in words what the limit allows.
func (e Expectation) rule() string {
	switch p, cost := e.units(); {
	case cost > 1 && (e.guarantee == algorithms.BurstRefill || e.guarantee == algorithms.WeightedWindows):
		return fmt.Sprintf("%s, in units, of which a request takes %d", e.guarantee.Rule(p), cost)
	}
	return e.guarantee.Rule(e.policy)
}

// judged reports whether the audit judges the limit: a shadow limit never
// blocks, an unlimited one always admits, and one of cost 0 (or more than
// its limit) takes nothing a request could be judged by.
func (e Expectation) judged() bool {
	return !e.shadow && !e.unlimited && e.cost != 0 && e.policy.Limit > 0
}

// unjudgedReason says why the audit does not judge the limit.
func (e Expectation) unjudgedReason() string {
	switch {
	case e.unlimited:
		return "unlimited: always admitted, never judged"
	case e.shadow:
		return "shadow: counted by the gateway and never enforced, so never judged as a leak of it"
	case e.cost == 0:
		return "cost 0: checks without consuming, so nothing it admits counts"
	}
	return fmt.Sprintf("cost %d is above its limit of %d: no request fits", e.cost, e.policy.Limit)
}
