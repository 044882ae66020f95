package algorithms_test

import (
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

func TestParsePolicy(t *testing.T) {
	if p, err := algorithms.ParsePolicy("100/1m"); err != nil || p != (algorithms.Policy{Limit: 100, Window: time.Minute}) {
		t.Fatalf("algorithms.ParsePolicy(100/1m) = %v, %v", p, err)
	}
	for in, want := range map[string]string{
		"100":    `"100": want requests/window, such as 100/1m`,
		"x/1s":   `"x/1s": "x" is not a whole number`,
		"5/soon": `"5/soon": window: time: invalid duration "soon"`,
		"0/1s":   `"0/1s": limit must be at least 1 (got 0)`,
		"5/1us":  `"5/1us": window must be a whole number of milliseconds (got 1µs)`,
	} {
		if _, err := algorithms.ParsePolicy(in); err == nil || err.Error() != want {
			t.Errorf("algorithms.ParsePolicy(%q) = %v, want %q", in, err, want)
		}
	}
}
