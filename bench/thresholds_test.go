package bench_test

import (
	"testing"

	"github.com/ratelab/ratelab/bench"
)

// TestZeroThresholdsPass: every threshold is off at its zero value, so a
// run with errors and 5xx crosses none of them.
func TestZeroThresholdsPass(t *testing.T) {
	r := bench.Result{Requests: 100, Errors: 10, StatusCounts: map[string]int64{"200": 80, "503": 10}}
	if crossed := (bench.Thresholds{}).Crossed(r); len(crossed) != 0 {
		t.Fatalf("the zero Thresholds crossed %v", crossed)
	}
}

// TestMaxErrorRate: a MaxErrorRate set to 0 fails a run with any error or
// 5xx, and passes one without; one set to 0.25 passes a fifth; a set rate
// outside 0 to 1 is refused.
func TestMaxErrorRate(t *testing.T) {
	clean := bench.Result{Requests: 100, StatusCounts: map[string]int64{"200": 90, "429": 10}}
	oneError := bench.Result{Requests: 100, Errors: 1, StatusCounts: map[string]int64{"200": 99}}
	one5xx := bench.Result{Requests: 100, StatusCounts: map[string]int64{"200": 99, "500": 1}}
	fifth := bench.Result{Requests: 100, Errors: 10, StatusCounts: map[string]int64{"200": 80, "503": 10}}
	for _, tc := range []struct {
		name    string
		rate    float64
		r       bench.Result
		crosses bool
	}{
		{"0, clean", 0, clean, false},
		{"0, one error", 0, oneError, true},
		{"0, one 5xx", 0, one5xx, true},
		{"0.25, a fifth", 0.25, fifth, false},
		{"0.1, a fifth", 0.1, fifth, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := bench.Thresholds{MaxErrorRate: new(tc.rate)}
			if err := th.Validate(); err != nil {
				t.Fatal(err)
			}
			crossed := th.Crossed(tc.r)
			if (len(crossed) > 0) != tc.crosses || (tc.crosses && (len(crossed) != 1 || crossed[0].Field != "MaxErrorRate")) {
				t.Fatalf("crossed %v, want crossed %v", crossed, tc.crosses)
			}
		})
	}
	for _, rate := range []float64{-0.1, 1.5} {
		if err := (bench.Thresholds{MaxErrorRate: new(rate)}).Validate(); err == nil {
			t.Errorf("MaxErrorRate %g passed Validate", rate)
		}
	}
}
