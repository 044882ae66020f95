package audit

import (
	"strconv"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// consumerName names consumer c as a run of consumer-N does.
func consumerName(c int32) string { return "consumer-" + strconv.Itoa(int(c)) }

// newExpectation makes the expectation of limit per window under
// algorithm ("" for the sliding-window rule).
func newExpectation(limit int64, window time.Duration, algorithm string) (Expectation, error) {
	return ExpectationOf(algorithms.Policy{Limit: limit, Window: window}, algorithm)
}

// auditAll judges the samples against each expectation, on each consumer's
// own counter (named by name), and makes the verdict of them all.
func auditAll(samples []Sample, exps []Expectation, consumers int, cov Coverage, name func(int32) string) Audit {
	return auditLimits(samples, nil, exps, EveryConsumer(samples, len(exps), consumers, name), cov)
}

// newSample is NewSample with the rate-limit fields of its response read.
func newSample(consumer int, sent, done time.Duration, status int, f *Fields) Sample {
	s := NewSample(consumer, sent, done, status)
	s.read(f)
	return s
}
