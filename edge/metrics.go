package edge

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Outcomes of a decision, as counted in metrics.
const (
	OutcomeAllowed      = "allowed"
	OutcomeDenied       = "denied"
	OutcomeDenyCache    = "denied_from_cache"
	OutcomeShadowDenied = "shadow_denied" // would have been denied; let through
	OutcomeErrorOpen    = "redis_error_open"
	OutcomeErrorClosed  = "redis_error_closed"
	OutcomeContended    = "contended" // a limiter gave up under contention
)

// Metrics counts what the middleware decided, for Prometheus. The zero
// value is not ready; use NewMetrics.
type Metrics struct {
	mu        sync.Mutex
	decisions map[string]*atomic.Int64
	redisErr  map[string]*atomic.Int64
	cacheHits atomic.Int64
	latency   histogram
}

// NewMetrics returns empty metrics.
func NewMetrics() *Metrics {
	m := &Metrics{decisions: map[string]*atomic.Int64{}, redisErr: map[string]*atomic.Int64{}}
	for _, o := range []string{OutcomeAllowed, OutcomeDenied, OutcomeDenyCache, OutcomeShadowDenied,
		OutcomeErrorOpen, OutcomeErrorClosed, OutcomeContended} {
		m.decisions[o] = &atomic.Int64{}
	}
	for _, k := range []string{"timeout", "other"} {
		m.redisErr[k] = &atomic.Int64{}
	}
	m.latency.bounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	m.latency.counts = make([]atomic.Int64, len(m.latency.bounds)+1)
	return m
}

func (m *Metrics) decision(outcome string) { m.decisions[outcome].Add(1) }

// Decisions returns the count of decisions with outcome.
func (m *Metrics) Decisions(outcome string) int64 { return m.decisions[outcome].Load() }

// RedisErrors returns the count of Redis errors of kind "timeout" or "other".
func (m *Metrics) RedisErrors(kind string) int64 { return m.redisErr[kind].Load() }

// DenyCacheHits returns how many requests the deny cache answered.
func (m *Metrics) DenyCacheHits() int64 { return m.cacheHits.Load() }

// histogram is a Prometheus histogram of seconds with fixed bounds.
type histogram struct {
	bounds []float64
	counts []atomic.Int64 // one per bound, then +Inf; not cumulative
	sumNs  atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	i := sort.SearchFloat64s(h.bounds, s)
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// WriteTo writes the metrics in Prometheus's text exposition format.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cw := &countingWriter{w: w}
	p := func(format string, a ...any) { fmt.Fprintf(cw, format, a...) }
	p("# HELP ratelab_edge_decisions_total Rate-limit decisions by outcome.\n# TYPE ratelab_edge_decisions_total counter\n")
	for _, o := range sortedKeys(m.decisions) {
		p("ratelab_edge_decisions_total{outcome=%q} %d\n", o, m.decisions[o].Load())
	}
	p("# HELP ratelab_edge_redis_errors_total Redis calls that failed, by kind.\n# TYPE ratelab_edge_redis_errors_total counter\n")
	for _, k := range sortedKeys(m.redisErr) {
		p("ratelab_edge_redis_errors_total{kind=%q} %d\n", k, m.redisErr[k].Load())
	}
	p("# HELP ratelab_edge_deny_cache_hits_total Requests denied from memory, without Redis.\n# TYPE ratelab_edge_deny_cache_hits_total counter\n")
	p("ratelab_edge_deny_cache_hits_total %d\n", m.cacheHits.Load())
	p("# HELP ratelab_edge_decision_seconds Time to decide, Redis included.\n# TYPE ratelab_edge_decision_seconds histogram\n")
	var cum int64
	for i, b := range m.latency.bounds {
		cum += m.latency.counts[i].Load()
		p("ratelab_edge_decision_seconds_bucket{le=\"%g\"} %d\n", b, cum)
	}
	cum += m.latency.counts[len(m.latency.bounds)].Load()
	p("ratelab_edge_decision_seconds_bucket{le=\"+Inf\"} %d\n", cum)
	p("ratelab_edge_decision_seconds_sum %g\n", time.Duration(m.latency.sumNs.Load()).Seconds())
	p("ratelab_edge_decision_seconds_count %d\n", cum)
	return cw.n, cw.err
}

func sortedKeys(m map[string]*atomic.Int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
	return n, err
}
