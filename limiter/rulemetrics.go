package limiter

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of one limit in a decision, as counted per limit.
const (
	LimitAllowed         = "allowed"
	LimitDenied          = "denied"
	LimitDeniedFromCache = "denied_from_cache"
	LimitShadowDenied    = "shadow_denied" // a shadow limit that would have denied
	// LimitNotDecided is a limit the decision never put to Redis: the other
	// limits of a request the deny cache answered, a later Cluster call's
	// once an earlier one denied, every limit of a decision made by the
	// fail mode.
	LimitNotDecided = "not_decided"
)

// maxLimitLabels bounds the domain and limit labels of
// ratelab_edge_limit_decisions_total across reloads: domains and limit IDs
// come from the rules (a caller's domain that the rules do not have meets
// no limit), so the set is bounded by the files loaded; past this many
// pairs, further ones count as "(other)".
const maxLimitLabels = 1000

// limitCounts counts decisions per domain, limit ID and outcome. Its
// children are looked up without a lock: every request counts each of its
// limits.
type limitCounts struct {
	vec      *prometheus.CounterVec
	children sync.Map // [3]string{domain, id, outcome} -> prometheus.Counter

	mu sync.Mutex // adding a child
	n  int
}

func newLimitCounts() *limitCounts {
	return &limitCounts{
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelab_edge_limit_decisions_total",
			Help: "Decisions per limit of the rules (its domain and ID) and outcome: allowed, denied, denied_from_cache, shadow_denied, not_decided.",
		}, []string{"domain", "limit", "outcome"}),
	}
}

func (c *limitCounts) counter(domain, id, outcome string) prometheus.Counter {
	k := [3]string{domain, id, outcome}
	if ch, ok := c.children.Load(k); ok {
		return ch.(prometheus.Counter)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.children.Load(k); ok {
		return ch.(prometheus.Counter)
	}
	if c.n >= maxLimitLabels*5 {
		return c.vec.WithLabelValues("(other)", "(other)", outcome) // not kept: the map stays bounded too
	}
	ch := c.vec.WithLabelValues(domain, id, outcome)
	c.children.Store(k, ch)
	c.n++
	return ch
}

// ruleGauges say which rules serve and since when.
type ruleGauges struct {
	info     *prometheus.GaugeVec
	reloaded prometheus.Gauge
	reloads  *prometheus.CounterVec
}

func newRuleGauges() ruleGauges {
	return ruleGauges{
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratelab_edge_rules_info",
			Help: "1 for the version (a hash of the file) of the rules serving; one series at a time.",
		}, []string{"version"}),
		reloaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelab_edge_rules_loaded_timestamp_seconds",
			Help: "When the rules serving were loaded, in Unix seconds.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelab_edge_rules_reloads_total",
			Help: "Reloads of the rules file by result: applied, refused (it did not validate, or could not be read whole; the old rules kept serving), or unchanged (the rules serving already).",
		}, []string{"result"}),
	}
}

// limitDecision counts one decision of the limit id of domain with
// outcome, one of the Limit constants.
func (m *Metrics) limitDecision(domain, id, outcome string) {
	m.limits.counter(domain, id, outcome).Inc()
}

// LimitDecisions returns the count of decisions of the limit id of domain
// with outcome.
func (m *Metrics) LimitDecisions(domain, id, outcome string) int64 {
	return counterValue(m.limits.counter(domain, id, outcome))
}

// RulesLoaded records the version serving and when it was loaded.
func (m *Metrics) RulesLoaded(version string, at time.Time) {
	m.rules.info.Reset()
	m.rules.info.WithLabelValues(version).Set(1)
	m.rules.reloaded.Set(float64(at.UnixNano()) / 1e9)
}

// CountReload counts one reload with result "applied", "refused" or "unchanged".
func (m *Metrics) CountReload(result string) { m.rules.reloads.WithLabelValues(result).Inc() }

// RulesReloads returns the count of reloads with result "applied", "refused" or "unchanged".
func (m *Metrics) RulesReloads(result string) int64 {
	return counterValue(m.rules.reloads.WithLabelValues(result))
}
