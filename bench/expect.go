package bench

import (
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

// policy is the limit's policy.
func (e ExpectedLimit) policy() algorithms.Policy {
	return algorithms.Policy{Limit: e.Limit, Window: e.Window, Burst: e.Burst}
}

// maxExpected bounds the limits of one audit: a request's limits are a
// bit mask.
const maxExpected = 64

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
			if !knownAlgorithm(algorithm) {
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

// knownAlgorithm says whether name is "" (the sliding-window rule) or an
// algorithm an endpoint can be held to.
func knownAlgorithm(name string) bool {
	if name == "" {
		return true
	}
	info, ok := algorithms.Lookup(name)
	return ok && info.Algorithm
}

// expectPolicy is ExpectLimit per ExpectWindow, with ExpectBurst.
func (c HTTPConfig) expectPolicy() algorithms.Policy {
	return algorithms.Policy{Limit: c.ExpectLimit, Window: c.ExpectWindow, Burst: c.ExpectBurst}
}

// expected is every limit of ExpectLimit and ExpectLimits, in order.
func (c HTTPConfig) expected() []ExpectedLimit {
	var all []ExpectedLimit
	if c.ExpectLimit > 0 {
		all = append(all, ExpectedLimit{Limit: c.ExpectLimit, Window: c.ExpectWindow, Algorithm: c.ExpectAlgorithm, Burst: c.ExpectBurst})
	}
	return append(all, c.ExpectLimits...)
}

// auditing says whether the run is audited.
func (c HTTPConfig) auditing() bool {
	return c.ExpectLimit > 0 || len(c.ExpectLimits) > 0 || c.ExpectRules != nil
}

// validateExpect checks ExpectLimits and ExpectRules.
func (c HTTPConfig) validateExpect() error {
	all := c.expected()
	switch {
	case c.ExpectRules != nil && len(all) > 0:
		return field.Errorf("ExpectRules", "and {ExpectLimits} are two audits: give one")
	case c.ExpectRules != nil && !c.ExpectRules.Gateway():
		return field.Errorf("ExpectRules", "%s: rules not checked for the gateway", c.ExpectRules.File)
	case c.ExpectRules != nil && len(c.ExpectRules.Limits()) > maxExpected:
		return field.Errorf("ExpectRules", "%s: at most %d limits (got %d)", c.ExpectRules.File, maxExpected, len(c.ExpectRules.Limits()))
	case len(all) > maxExpected:
		return field.Errorf("ExpectLimits", "at most %d limits (got %d)", maxExpected, len(all))
	case len(c.ExpectLimits) > 0 && c.Consumers == 0:
		return field.Errorf("ExpectLimits", "audit per consumer: they need {ConsumerHeader}")
	}
	for i, e := range all {
		if err := e.policy().Validate(); err != nil {
			return field.Errorf("ExpectLimits", "%s: %v", e, err)
		}
		if !knownAlgorithm(e.Algorithm) {
			return field.Errorf("ExpectLimits", "%s: %q is not an algorithm (want %s)", e, e.Algorithm, strings.Join(algorithms.Algorithms(), ", "))
		}
		if err := algorithms.CheckBurst(e.Algorithm, e.policy()); err != nil {
			return field.Errorf("ExpectLimits", "%s: %v", e, err)
		}
		if j := slices.IndexFunc(all[:i], func(o ExpectedLimit) bool { return o.Window == e.Window }); j >= 0 {
			return field.Errorf("ExpectLimits", "%s and %s are two limits on one window (%s): keep one", all[j], e, rules.Window(e.Window))
		}
	}
	return nil
}

// expectations are what the audit holds the endpoint to, one per limit.
func (c HTTPConfig) expectations() []expectation {
	if c.ExpectRules != nil {
		return rulesExpectations(c.ExpectRules)
	}
	var exps []expectation
	for _, e := range c.expected() {
		exp, _ := expectationOf(e.policy(), e.Algorithm) // validated
		exp.id = e.String()
		exps = append(exps, exp)
	}
	return exps
}

// LimitIDs are the IDs of the limits the audit may judge, as it labels
// them (LimitAudit.Label): each --expect-limit's (5/1s), or each limit's
// of the rules file.
func (c HTTPConfig) LimitIDs() []string {
	var ids []string
	for _, e := range c.expectations() {
		ids = append(ids, e.id)
	}
	return ids
}

// rulesExpectations are the limits of a rules file, in file order.
func rulesExpectations(set *rules.Set) []expectation {
	var exps []expectation
	for _, l := range set.Limits() {
		exp := expectation{policy: l.Policy, algorithm: l.Algorithm, guarantee: algorithms.SlidingWindow, id: l.ID,
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
func (e expectation) units() (algorithms.Policy, int64) {
	if e.cost > 1 && e.quota > 0 && !e.unlimited {
		return algorithms.Policy{Limit: e.quota, Window: e.policy.Window, Burst: e.burst}, e.cost
	}
	return e.policy, 1
}

// rule says in words what the limit allows.
func (e expectation) rule() string {
	switch p, cost := e.units(); {
	case cost > 1 && (e.guarantee == algorithms.BurstRefill || e.guarantee == algorithms.WeightedWindows):
		return fmt.Sprintf("%s, in units, of which a request takes %d", e.guarantee.Rule(p), cost)
	}
	return e.guarantee.Rule(e.policy)
}

// judged reports whether the audit judges the limit: a shadow limit never
// blocks, an unlimited one always admits, and one of cost 0 (or more than
// its limit) takes nothing a request could be judged by.
func (e expectation) judged() bool {
	return !e.shadow && !e.unlimited && e.cost != 0 && e.policy.Limit > 0
}

// unjudgedReason says why the audit does not judge the limit.
func (e expectation) unjudgedReason() string {
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
