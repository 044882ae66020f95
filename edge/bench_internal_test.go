package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

// admitAll admits every request without Redis: what the middleware costs
// around the decision.
type admitAll struct{}

func (admitAll) Decide(_ context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
	out := algorithms.Outcome{Allowed: true, Checks: make([]algorithms.Decision, len(checks)), Calls: 1}
	for i, c := range checks {
		out.Checks[i] = algorithms.Decision{Allowed: true, Limit: c.Policy.Limit, Remaining: c.Policy.Limit / 2}
	}
	return out, nil
}

// BenchmarkMiddleware is the middleware's own cost per request, Redis left
// out: one limit, and three.
func BenchmarkMiddleware(b *testing.B) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	middleware := func(limits ...string) http.Handler {
		set, err := rules.Shorthand{Limits: limits, KeyBy: "header:X-Consumer-Id"}.Set()
		if err != nil {
			b.Fatal(err)
		}
		return Middleware(Config{Rules: limiter.FixedRules(set), KeyBy: KeyBy{Header: "X-Consumer-Id"},
			Config: limiter.Config{Decider: admitAll{}}}, ok)
	}
	one, three := middleware("100/1m"), middleware("10/1s", "100/1m", "1000/1h")
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"one", one}, {"three", three}} {
		b.Run(tc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Consumer-Id", "alice")
			b.ReportAllocs()
			for b.Loop() {
				tc.h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}
