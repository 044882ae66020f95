package limiter

import (
	"testing"
	"time"
)

// TestMetricsHotPathAllocates: counting a decision, a limit's decision, a
// Redis error, a deny cache hit and a latency allocates nothing; the label
// children are resolved once, in NewMetrics, and a limit's at its first
// count.
func TestMetricsHotPathAllocates(t *testing.T) {
	m := NewMetrics()
	m.limitDecision("edge", "search", OutcomeAllowed)
	var runs int64
	allocs := testing.AllocsPerRun(1000, func() {
		runs++
		m.decision(OutcomeAllowed)
		m.limitDecision("edge", "search", OutcomeAllowed)
		m.redisError(RedisErrorTimeout)
		m.denyCacheHit()
		m.observe(3 * time.Millisecond)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per decision counted, want 0", allocs)
	}
	if got := m.Decisions(OutcomeAllowed); got != runs {
		t.Fatalf("allowed %d after %d runs", got, runs)
	}
}
