package audit

import (
	"strconv"
	"testing"
	"time"
)

// A policy's name is a quoted string, and may hold what separates
// parameters and members: the limit is still the parameter after it.
func TestQuotedPolicyName(t *testing.T) {
	for _, tc := range []struct {
		policy, rateLimit string
		limit, remaining  int64
	}{
		{`"default";q=100;w=60`, `"default";r=42;t=30`, 100, 42},
		{`"per-user;q=1";q=10;w=60`, `"per-user;q=1";r=9;t=60`, 10, 9},
		{`"a,b";q=10;w=60, "c";q=5`, `"a,b";r=3;t=1`, 10, 3},
		{`"say \"q=1;\"";q=7;w=1`, `"say \"q=1;\"";r=6;t=1`, 7, 6},
	} {
		s := newSample(0, 0, 1, 200, &Fields{policy: tc.policy, rateLimit: tc.rateLimit})
		if s.limit != tc.limit || s.remaining != tc.remaining {
			t.Errorf("%s / %s: limit %d, remaining %d: want %d and %d", tc.policy, tc.rateLimit, s.limit, s.remaining, tc.limit, tc.remaining)
		}
	}
}

// A reset too far to hold in a time.Duration is read as absent, never
// wrapped around into a near one.
func TestFarReset(t *testing.T) {
	for _, f := range []Fields{
		{rateLimit: `"default";r=0;t=18446744074`},                                      // 2^64 ns and a bit: 0.29 s once wrapped
		{rateLimit: `"default";r=0;t=999999999999999`},                                  // the largest structured-field integer
		{xRemaining: "0", xReset: "9223372036854775807"},                                // an "epoch time" past any clock
		{xRemaining: "0", xReset: strconv.FormatInt(time.Now().Unix()+18446744079, 10)}, // 5.29 s once wrapped
	} {
		if s := newSample(0, 0, 1, 200, &f); s.Reset >= 0 {
			t.Errorf("%+v: reset read as %s: want absent", f, s.Reset)
		}
	}
}
