package audit

import "testing"

// TestRetryAfterFault: a false Retry-After is reported with what the probes
// found wrong, never as an error of 0 ms.
func TestRetryAfterFault(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		ra   RetryAfterAudit
		want string
	}{
		{RetryAfterAudit{Probes: 2, Honest: &yes}, ""},
		{RetryAfterAudit{}, ""},
		{RetryAfterAudit{Probes: 2, Early: 2, Honest: &no}, "2 of 2 probes were admitted a second or more before it"},
		{RetryAfterAudit{Probes: 3, MaxErrorMillis: 1201, Honest: &no}, "a probe was still denied 1201 ms after it"},
		{RetryAfterAudit{Probes: 3, Early: 1, MaxErrorMillis: 10_000, Honest: &no},
			"1 of 3 probes were admitted a second or more before it, and a probe was still denied 10000 ms after it"},
	} {
		if got := tc.ra.Fault(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.ra, got, tc.want)
		}
	}
}
