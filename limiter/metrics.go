package limiter

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Kinds of Redis error, as counted in metrics.
const (
	RedisErrorTimeout     = "timeout"     // the decision's deadline passed
	RedisErrorOOM         = "oom"         // Redis is over its maxmemory and refused the script
	RedisErrorUnreachable = "unreachable" // the connection was refused, reset or closed
	RedisErrorOther       = "other"       // anything else: a bad reply, an error of the script
)

// decisionBuckets are the bounds of ratelab_edge_decision_seconds, in seconds.
var decisionBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// Metrics counts what the middleware decided, for Prometheus, on a registry
// of its own that also holds the Go runtime and process collectors, so that
// two gateways in one process never share or collide. The zero value is not
// ready; use NewMetrics.
type Metrics struct {
	registry *prometheus.Registry
	// The children of every label value, resolved once: a decision counts
	// without a label lookup in the client library.
	decisions map[string]prometheus.Counter // by outcome
	redisErr  map[string]prometheus.Counter // by kind
	invalid   map[string]prometheus.Counter // by reason
	cacheHits prometheus.Counter
	latency   prometheus.Histogram
	redisUp   prometheus.Gauge
	circuit   prometheus.Gauge

	limits *limitCounts
	rules  ruleGauges
	trips  redisTrips

	releases releaseCounts
}

// NewMetrics returns metrics at zero, every outcome and kind included, on a
// new registry.
func NewMetrics() *Metrics {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelab_edge_decisions_total",
		Help: "Rate-limit decisions by outcome.",
	}, []string{"outcome"})
	redisErr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelab_edge_redis_errors_total",
		Help: "Redis calls that failed, by kind.",
	}, []string{"kind"})
	invalid := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelab_edge_invalid_requests_total",
		Help: "Requests refused before any decision because what the caller sent is out of bounds or malformed, by reason; they never reach Redis.",
	}, []string{"reason"})
	m := &Metrics{
		registry:  prometheus.NewRegistry(),
		decisions: map[string]prometheus.Counter{},
		redisErr:  map[string]prometheus.Counter{},
		invalid:   map[string]prometheus.Counter{},
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelab_edge_deny_cache_hits_total",
			Help: "Requests denied from memory, without Redis.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelab_edge_decision_seconds",
			Help:    "Time to decide, Redis included.",
			Buckets: decisionBuckets,
		}),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelab_edge_redis_up",
			Help: "1 while Redis answers decisions, 0 from its first failure until it answers again.",
		}),
		circuit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelab_edge_circuit_open",
			Help: "1 while decisions skip Redis after consecutive failures (the circuit breaker is open).",
		}),
	}
	m.redisUp.Set(1)
	for _, o := range []string{OutcomeAllowed, OutcomeDenied, OutcomeDenyCache, OutcomeShadowDenied,
		OutcomeErrorOpen, OutcomeErrorClosed, OutcomeErrorLocalAllowed, OutcomeErrorLocalDenied, OutcomeInvalid} {
		m.decisions[o] = decisions.WithLabelValues(o)
	}
	for _, r := range invalidReasons {
		m.invalid[r] = invalid.WithLabelValues(r)
	}
	for _, k := range []string{RedisErrorTimeout, RedisErrorOOM, RedisErrorUnreachable, RedisErrorOther} {
		m.redisErr[k] = redisErr.WithLabelValues(k)
	}
	// A new registry and collectors of fixed, distinct names: registration
	// cannot fail.
	m.limits = newLimitCounts()
	m.rules = newRuleGauges()
	m.trips = newRedisTrips()
	m.releases = newReleaseCounts()
	m.registry.MustRegister(decisions, redisErr, invalid, m.cacheHits, m.latency, m.redisUp, m.circuit,
		m.limits.vec, m.rules.info, m.rules.reloaded, m.rules.reloads, m.trips.roundTrips, m.trips.batch, m.releases.vec,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// decision counts one decision with outcome, one of the Outcome constants.
func (m *Metrics) decision(outcome string) { m.decisions[outcome].Inc() }

// Invalid counts one request refused for reason, one of the Invalid
// constants; any other reason counts as InvalidMalformed.
func (m *Metrics) Invalid(reason string) {
	c, ok := m.invalid[reason]
	if !ok {
		c = m.invalid[InvalidMalformed]
	}
	c.Inc()
}

// InvalidRequests returns the count of requests refused for reason.
func (m *Metrics) InvalidRequests(reason string) int64 { return counterValue(m.invalid[reason]) }

// redisError counts one failed Redis call of kind, one of the RedisError constants.
func (m *Metrics) redisError(kind string) { m.redisErr[kind].Inc() }

// setRedisUp sets ratelab_edge_redis_up.
func (m *Metrics) setRedisUp(up bool) { m.redisUp.Set(map[bool]float64{true: 1}[up]) }

// setCircuitOpen sets ratelab_edge_circuit_open.
func (m *Metrics) setCircuitOpen(open bool) { m.circuit.Set(map[bool]float64{true: 1}[open]) }

// denyCacheHit counts one request denied from the deny cache.
func (m *Metrics) denyCacheHit() { m.cacheHits.Inc() }

// observe records how long one decision took.
func (m *Metrics) observe(d time.Duration) { m.latency.Observe(d.Seconds()) }

// Decisions returns the count of decisions with outcome; 0 for an outcome
// that is not one of the Outcome constants.
func (m *Metrics) Decisions(outcome string) int64 { return counterValue(m.decisions[outcome]) }

// RedisErrors returns the count of Redis errors of kind, one of the
// RedisError constants; 0 for any other kind.
func (m *Metrics) RedisErrors(kind string) int64 { return counterValue(m.redisErr[kind]) }

// DenyCacheHits returns how many requests the deny cache answered.
func (m *Metrics) DenyCacheHits() int64 { return counterValue(m.cacheHits) }

// Registry is the registry the metrics are on, with the Go runtime and
// process collectors: gather from it, or register a program's own
// collectors beside them.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the registry in the Prometheus exposition format the
// scraper asks for (text by default).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// counterValue reads c through its own Write; 0 when c is nil.
func counterValue(c prometheus.Counter) int64 {
	if c == nil {
		return 0
	}
	var pb dto.Metric
	if err := c.Write(&pb); err != nil {
		return 0
	}
	return int64(pb.GetCounter().GetValue())
}
