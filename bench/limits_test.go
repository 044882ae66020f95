package bench

import "testing"

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
		s := newSample(0, 0, 1, 200, &limitFields{policy: tc.policy, rateLimit: tc.rateLimit})
		if s.limit != tc.limit || s.remaining != tc.remaining {
			t.Errorf("%s / %s: limit %d, remaining %d: want %d and %d", tc.policy, tc.rateLimit, s.limit, s.remaining, tc.limit, tc.remaining)
		}
	}
}
