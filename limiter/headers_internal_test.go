package limiter

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// TestLimitHeaders: RateLimit-Policy lists every limit; RateLimit and the
// legacy fields describe the one closest to exhaustion, or on a denial the
// one that admits again last, whose retry-after is the Retry-After, never
// earlier than the t given.
func TestLimitHeaders(t *testing.T) {
	sec := algorithms.Policy{Limit: 5, Window: time.Second}
	ten := algorithms.Policy{Limit: 12, Window: 10 * time.Second}
	nginx := algorithms.Policy{Limit: 10, Window: time.Second, Burst: 6} // rate=10r/s burst=5
	deep := algorithms.Policy{Limit: 10, Window: time.Second, Burst: 40}
	for _, tc := range []struct {
		name              string
		states            []State
		rateLimit, legacy string // RateLimit; Limit/Remaining/Reset
		retry             time.Duration
	}{
		{"both admit, the second closer", []State{
			{Name: "per-second", Policy: sec, Allowed: true, Remaining: 4},
			{Name: "per-10s", Policy: ten, Allowed: true, Remaining: 2},
		}, `"per-10s";r=2;t=10`, "12/2/10", 0},
		{"both admit, the first closer", []State{
			{Name: "per-second", Policy: sec, Allowed: true, Remaining: 1},
			{Name: "per-10s", Policy: ten, Allowed: true, Remaining: 11},
		}, `"per-second";r=1;t=1`, "5/1/1", 0},
		{"equal shares: the fewer remaining", []State{
			{Name: "per-10s", Policy: ten, Allowed: true, Remaining: 12},
			{Name: "per-second", Policy: sec, Allowed: true, Remaining: 5},
		}, `"per-second";r=5;t=1`, "5/5/1", 0},
		{"the second denies", []State{
			{Name: "per-second", Policy: sec, Allowed: true, Remaining: 0},
			{Name: "per-10s", Policy: ten, Allowed: false, RetryAfter: 7200 * time.Millisecond},
		}, `"per-10s";r=0;t=8`, "12/0/8", 7200 * time.Millisecond},
		{"both deny: the later", []State{
			{Name: "per-second", Policy: sec, Allowed: false, RetryAfter: 300 * time.Millisecond},
			{Name: "per-10s", Policy: ten, Allowed: false, RetryAfter: 4 * time.Second},
		}, `"per-10s";r=0;t=4`, "12/0/4", 4 * time.Second},
		{"a burst above the limit: remaining above q", []State{
			{Name: "deep", Policy: deep, Allowed: true, Remaining: 30, Reset: time.Second},
		}, `"deep";r=30;t=1`, "10/30/1", 0},
		{"closest to exhaustion as a share of the burst", []State{
			{Name: "deep", Policy: deep, Allowed: true, Remaining: 8}, // 8/40 beside 2/6
			{Name: "nginx", Policy: nginx, Allowed: true, Remaining: 2},
		}, `"deep";r=8;t=1`, "10/8/1", 0},
		{"a reset the decider knows", []State{
			{Name: "per-10s", Policy: ten, Allowed: true, Remaining: 3, Reset: 2500 * time.Millisecond},
		}, `"per-10s";r=3;t=3`, "12/3/3", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			retry := SetHeaders(h, HeadersBoth, tc.states)
			policy := ""
			for i, s := range tc.states {
				if i > 0 {
					policy += ", "
				}
				policy += `"` + s.Name + `";q=` + itoa(s.Policy.Limit) + ";w=" + itoa(CeilSeconds(s.Policy.Window))
				if s.Policy.Burst > 0 { // q and w are the rate; the burst is this implementation's parameter
					policy += ";ratelab-burst=" + itoa(s.Policy.Burst)
				}
			}
			if got := h.Get("RateLimit-Policy"); got != policy {
				t.Errorf("RateLimit-Policy %q, want %q", got, policy)
			}
			if got := h.Get("RateLimit"); got != tc.rateLimit {
				t.Errorf("RateLimit %q, want %q", got, tc.rateLimit)
			}
			if got := h.Get("RateLimit-Limit") + "/" + h.Get("RateLimit-Remaining") + "/" + h.Get("RateLimit-Reset"); got != tc.legacy {
				t.Errorf("legacy %s, want %s", got, tc.legacy)
			}
			if retry != tc.retry {
				t.Errorf("retry %s, want %s", retry, tc.retry)
			}
			if retry > 0 && itoa(CeilSeconds(retry)) != h.Get("RateLimit-Reset") {
				t.Errorf("Retry-After %d is not the t given (%s)", CeilSeconds(retry), h.Get("RateLimit-Reset"))
			}
		})
	}
	for _, mode := range []Headers{HeadersDraft, HeadersLegacy} {
		h := http.Header{}
		SetHeaders(h, mode, []State{{Name: "x", Policy: sec, Allowed: true, Remaining: 1}})
		if (h.Get("RateLimit") != "") != (mode == HeadersDraft) || (h.Get("RateLimit-Limit") != "") != (mode == HeadersLegacy) {
			t.Errorf("%s: %v", mode, h)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
