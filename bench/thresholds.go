package bench

import (
	"cmp"
	"strings"
	"time"

	"github.com/ratelab/ratelab/internal/field"
)

// Thresholds are the limits a run must stay within; each is off at its
// zero value.
type Thresholds struct {
	// MaxP99 is the highest acceptable p99 latency; 0 for none.
	MaxP99 time.Duration
	// MaxErrorRate, when not nil, is the highest acceptable share (0 to 1)
	// of transport errors and 5xx among the measured requests: new(0.0)
	// fails a run with any; nil for none.
	MaxErrorRate *float64
	// FailOnLeak fails a run whose audit found a consumer over its limit, a
	// false Retry-After or wrong rate-limit headers.
	FailOnLeak bool
}

// Validate checks t. Errors are *field.Error.
func (t Thresholds) Validate() error {
	switch {
	case t.MaxP99 < 0:
		return field.Errorf("MaxP99", "must not be negative (got %s)", t.MaxP99)
	case t.MaxErrorRate != nil && (*t.MaxErrorRate < 0 || *t.MaxErrorRate > 1):
		return field.Errorf("MaxErrorRate", "must be between 0 and 1 (got %g)", *t.MaxErrorRate)
	}
	return nil
}

// Crossed says which thresholds r crossed, one error each naming its field
// of Thresholds; none when it held them all. With FailOnLeak and no audit
// (a merge that could not audit), it says that.
func (t Thresholds) Crossed(r Result) []*field.Error {
	var crossed []*field.Error
	if p99 := time.Duration(r.LatencyMicros.P99) * time.Microsecond; t.MaxP99 > 0 && p99 > t.MaxP99 {
		crossed = append(crossed, field.Errorf("MaxP99", ": p99 %s is above %s", p99, t.MaxP99))
	}
	if t.MaxErrorRate != nil && r.Requests > 0 {
		bad := r.Errors
		for code, n := range r.StatusCounts {
			if strings.HasPrefix(code, "5") {
				bad += n
			}
		}
		if rate := float64(bad) / float64(r.Requests); rate > *t.MaxErrorRate {
			crossed = append(crossed, field.Errorf("MaxErrorRate", ": %.4f of requests failed, above %g", rate, *t.MaxErrorRate))
		}
	}
	if !t.FailOnLeak {
		return crossed
	}
	a := r.Audit
	if a == nil {
		return append(crossed, field.Errorf("FailOnLeak", ": there is no audit (%s)", cmp.Or(r.AuditNote, "the run audited nothing")))
	}
	if a.OverAdmitted > 0 {
		crossed = append(crossed, field.Errorf("FailOnLeak", ": %s got %d through in %s, over the %d allowed (%s)",
			a.WorstConsumer, a.WorstWindowAdmitted, time.Duration(a.WorstSpanMillis)*time.Millisecond, a.WorstSpanAllowed, a.Rule))
	}
	if h := a.RetryAfter.Honest; h != nil && !*h {
		crossed = append(crossed, field.Errorf("FailOnLeak", ": Retry-After was off by up to %d ms", a.RetryAfter.MaxErrorMillis))
	}
	if a.Headers.Violations > 0 {
		crossed = append(crossed, field.Errorf("FailOnLeak", ": %d responses with wrong rate-limit headers (%s)",
			a.Headers.Violations, a.Headers.Example))
	}
	return crossed
}
