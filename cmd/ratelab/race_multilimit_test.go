package main

import (
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestRaceMultiLimitPair: `race --limiters multi-limit-sequential,multi-limit-atomic`
// accuses neither (exit 0 with --fail-on-leak: neither admits beyond a
// limit), and its JSON judges each on both limits, the sequential one's
// first limit holding slots for denied requests, the atomic one's none.
func TestRaceMultiLimitPair(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	code, stdout, stderr := ratelab(t, "race", "--redis", srv.URL(), "--trials", "3", "--output", "json", "--fail-on-leak",
		"--window", "1h", "--limiters", "multi-limit-sequential,multi-limit-atomic")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep map[string]any
	decodeJSON(t, stdout, &rep)
	results := jsonField[[]any](t, rep, "results")
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	for i, want := range []float64{15, 0} { // 3 trials of 100 at 10/10h then 5/1h: 5 slots each
		r, ok := results[i].(map[string]any)
		if !ok {
			t.Fatalf("a result is %T, want an object", results[i])
		}
		limits := jsonField[[]any](t, r, "limits")
		if len(limits) != 2 {
			t.Fatalf("%v: %d limits, want 2", r["limiter"], len(limits))
		}
		first, ok := limits[0].(map[string]any)
		if !ok || first["policy"] != "10/10h0m0s" || first["wrongly_consumed"] != want || first["over_admitted"] != 0.0 {
			t.Errorf("%v: first limit %v, want 10/10h0m0s with %v wrongly consumed and nothing over", r["limiter"], limits[0], want)
		}
	}
}
