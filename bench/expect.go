package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/rules"
)

// What the audit expects of a run, as its configuration says it: the
// engine's side of the audit's expectations (package audit judges them).

// expectPolicy is ExpectLimit per ExpectWindow, with ExpectBurst.
func (c HTTPConfig) expectPolicy() algorithms.Policy {
	return algorithms.Policy{Limit: c.ExpectLimit, Window: c.ExpectWindow, Burst: c.ExpectBurst}
}

// expected is every limit of ExpectLimit and ExpectLimits, in order.
func (c HTTPConfig) expected() []audit.ExpectedLimit {
	var all []audit.ExpectedLimit
	if c.ExpectLimit > 0 {
		all = append(all, audit.ExpectedLimit{Limit: c.ExpectLimit, Window: c.ExpectWindow, Algorithm: c.ExpectAlgorithm, Burst: c.ExpectBurst})
	}
	return append(all, c.ExpectLimits...)
}

// auditing says whether the run is audited: its rate limits, or its
// limit in flight.
func (c HTTPConfig) auditing() bool { return c.rateAuditing() || c.ExpectInFlight > 0 }

// rateAuditing says whether the run's rate limits are audited.
func (c HTTPConfig) rateAuditing() bool {
	return c.ExpectLimit > 0 || len(c.ExpectLimits) > 0 || c.ExpectRules != nil
}

// inFlightHint says, for an in-flight audit in the open model, when the
// rate cannot keep more than ExpectInFlight of a consumer in flight at
// once: each consumer sends Rate/Consumers a second, each held Hold (with
// its defaults: Connections, a multiple of Consumers, keeps each
// connection on one consumer).
func (c HTTPConfig) inFlightHint() string {
	if c.Rate == 0 || c.Consumers == 0 {
		return ""
	}
	outstanding := c.Rate / float64(c.Consumers) * c.Hold.Seconds()
	perConn := float64(c.Connections) / float64(c.Consumers)
	if most := min(outstanding, perConn); most <= float64(c.ExpectInFlight) {
		return fmt.Sprintf("at --rate %g over %d consumers, each held %s, a consumer has about %.1f requests in flight at once "+
			"(with %.0f connections each), not more than the %d allowed: the in-flight limit is barely tried; "+
			"--rate 0 with --in-flight-per-consumer above the limit keeps more in flight", c.Rate, c.Consumers, c.Hold, most, perConn, c.ExpectInFlight)
	}
	return ""
}

// validateExpect checks ExpectLimits and ExpectRules.
func (c HTTPConfig) validateExpect() error {
	all := c.expected()
	switch {
	case c.ExpectRules != nil && len(all) > 0:
		return field.Errorf("ExpectRules", "and {ExpectLimits} are two audits: give one")
	case c.ExpectRules != nil && !c.ExpectRules.Gateway():
		return field.Errorf("ExpectRules", "%s: rules not checked for the gateway", c.ExpectRules.File)
	case c.ExpectRules != nil && len(c.ExpectRules.Limits()) > audit.MaxLimits:
		return field.Errorf("ExpectRules", "%s: at most %d limits (got %d)", c.ExpectRules.File, audit.MaxLimits, len(c.ExpectRules.Limits()))
	case len(all) > audit.MaxLimits:
		return field.Errorf("ExpectLimits", "at most %d limits (got %d)", audit.MaxLimits, len(all))
	case len(c.ExpectLimits) > 0 && c.Consumers == 0:
		return field.Errorf("ExpectLimits", "audit per consumer: they need {ConsumerHeader}")
	}
	for i, e := range all {
		if err := e.Policy().Validate(); err != nil {
			return field.Errorf("ExpectLimits", "%s: %v", e, err)
		}
		if !audit.KnownAlgorithm(e.Algorithm) {
			return field.Errorf("ExpectLimits", "%s: %q is not an algorithm (want %s)", e, e.Algorithm, strings.Join(algorithms.Algorithms(), ", "))
		}
		if err := algorithms.CheckBurst(e.Algorithm, e.Policy()); err != nil {
			return field.Errorf("ExpectLimits", "%s: %v", e, err)
		}
		if j := slices.IndexFunc(all[:i], func(o audit.ExpectedLimit) bool { return o.Window == e.Window }); j >= 0 {
			return field.Errorf("ExpectLimits", "%s and %s are two limits on one window (%s): keep one", all[j], e, rules.Window(e.Window))
		}
	}
	return nil
}

// expectations are what the audit holds the endpoint to, one per limit.
func (c HTTPConfig) expectations() []audit.Expectation {
	if c.ExpectRules != nil {
		return audit.RulesExpectations(c.ExpectRules)
	}
	return audit.Expected(c.expected())
}

// LimitIDs are the IDs of the limits the audit may judge, as it labels
// them (LimitAudit.Label): each --expect-limit's (5/1s), or each limit's
// of the rules file.
func (c HTTPConfig) LimitIDs() []string {
	var ids []string
	for _, e := range c.expectations() {
		ids = append(ids, e.ID)
	}
	return ids
}

// validateExpect checks what the audit expects.
func (c RLSConfig) validateExpect() error {
	switch {
	case c.ExpectLimit < 0 || (c.ExpectLimit > 0) != (c.ExpectWindow > 0):
		return field.Errorf("ExpectLimit", "needs a positive limit and window (got %d per %s)", c.ExpectLimit, c.ExpectWindow)
	case c.ExpectAlgorithm != "" && c.ExpectLimit == 0:
		return field.Errorf("ExpectAlgorithm", "needs {ExpectLimit}")
	case c.ExpectConfig != nil && c.ExpectLimit > 0:
		return field.Errorf("ExpectConfig", "and {ExpectLimit} are two audits: give one")
	case c.ExpectConfig != nil && c.ExpectConfig.Domain != c.Domain:
		return field.Errorf("ExpectConfig", "%s: its domain is %q, not the calls' %q", c.ExpectConfig.File, c.ExpectConfig.Domain, c.Domain)
	case c.ExpectConfig != nil && len(c.ExpectConfig.Limits()) > audit.MaxLimits:
		return field.Errorf("ExpectConfig", "%s: at most %d limits (got %d)", c.ExpectConfig.File, audit.MaxLimits, len(c.ExpectConfig.Limits()))
	}
	if c.ExpectLimit > 0 {
		p := algorithms.Policy{Limit: c.ExpectLimit, Window: c.ExpectWindow, Burst: c.ExpectBurst}
		if err := p.Validate(); err != nil {
			return field.Errorf("ExpectLimit", ": %v", err)
		}
		if _, err := audit.ExpectationOf(p, c.ExpectAlgorithm); err != nil {
			return err
		}
	}
	return nil
}

// LimitIDs are the IDs of the limits the audit may judge, as it labels
// them (LimitAudit.Label): each descriptor's with ExpectLimit
// (user={consumer}), or each limit's of ExpectConfig.
func (c RLSConfig) LimitIDs() []string {
	var ids []string
	switch {
	case c.ExpectConfig != nil:
		for _, e := range audit.RulesExpectations(c.ExpectConfig) {
			ids = append(ids, e.ID)
		}
	case c.ExpectLimit > 0:
		for _, d := range c.Descriptors {
			ids = append(ids, d.String())
		}
	}
	return ids
}

// auditing says whether the run is audited.
func (c RLSConfig) auditing() bool { return c.ExpectLimit > 0 || c.ExpectConfig != nil }

// cost is what one call takes of each descriptor's limit: its hits_addend,
// which the service reads as 1 when unset.
func (c RLSConfig) cost() int64 { return max(int64(c.HitsAddend), 1) }
