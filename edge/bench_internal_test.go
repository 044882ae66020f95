package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/rules"
)

// admitAll admits every request without Redis: what the middleware costs
// around the decision.
type admitAll struct{}

func (admitAll) Allow(context.Context, string) (algorithms.Decision, error) {
	return algorithms.Decision{Allowed: true, Limit: 100, Remaining: 50, Attempts: 1}, nil
}

func (admitAll) Decide(_ context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
	out := algorithms.Outcome{Allowed: true, Checks: make([]algorithms.Decision, len(checks)), Calls: 1}
	for i, c := range checks {
		out.Checks[i] = algorithms.Decision{Allowed: true, Limit: c.Policy.Limit, Remaining: c.Policy.Limit / 2}
	}
	return out, nil
}

// BenchmarkMiddleware is the middleware's own cost per request, Redis left
// out: one limit, and three limits through rules.
func BenchmarkMiddleware(b *testing.B) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	one := Middleware(Config{Limiter: admitAll{}, Algorithm: "sliding-log", Policy: algorithms.Policy{Limit: 100, Window: 60e9},
		KeyBy: KeyBy{Header: "X-Consumer-Id"}}, ok)
	set, err := rules.Shorthand{Limits: []string{"10/1s", "100/1m", "1000/1h"}, KeyBy: "header:X-Consumer-Id"}.Set()
	if err != nil {
		b.Fatal(err)
	}
	three := Middleware(Config{Rules: NewRules(set, RulesConfig{}), Decider: admitAll{}, KeyBy: KeyBy{Header: "X-Consumer-Id"}}, ok)
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
