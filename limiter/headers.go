package limiter

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// Headers selects the rate-limit header fields a front door sends.
type Headers string

const (
	// HeadersDraft sends RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers).
	HeadersDraft Headers = "draft"
	// HeadersLegacy sends RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
	HeadersLegacy Headers = "legacy"
	// HeadersBoth sends both.
	HeadersBoth Headers = "both"
)

// CeilSeconds is d in whole seconds, rounded up; 0 for d <= 0: how the
// header fields and Retry-After give times.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// State is one limit's part in a decision, as the headers show it.
type State struct {
	// Name names the policy in the draft's fields: the limit's ID.
	Name string
	// Policy is the limit.
	Policy algorithms.Policy
	// Allowed reports whether this limit admitted the request.
	Allowed bool
	// Remaining is what it admits more now; 0 when it denied.
	Remaining int64
	// RetryAfter is, when it denied, how long until it admits again.
	RetryAfter time.Duration
	// Reset is, when it admitted, how long until its quota is full again;
	// zero for "at most the window".
	Reset time.Duration
	// InFlight says the limit is an in-flight limit: Policy.Limit requests
	// at once, Policy.Window the lease of each.
	InFlight bool
}

// reset is t, the seconds until the limit's quota resets: the retry-after
// of a denial; for an admission, the limit's Reset or else its window (after
// at most one window every request has left it).
func (s State) reset() int64 {
	switch {
	case !s.Allowed:
		return CeilSeconds(s.RetryAfter)
	case s.Reset > 0:
		return CeilSeconds(s.Reset)
	}
	return CeilSeconds(s.Policy.Window)
}

// tightest is the index of the limit the RateLimit field and the legacy
// fields describe, and whether any limit denied. When some denied: of those
// that denied, the one that admits again last (its retry-after is then the
// response's Retry-After, so that no t the response gives is later). When
// all admitted: the one closest to exhaustion, the least remaining as a
// share of what it can hold (its limit, or its burst), then the least
// remaining, then the latest reset.
func tightest(states []State) (int, bool) {
	best, denied := -1, false
	for i, s := range states {
		switch {
		case best < 0:
			best, denied = i, !s.Allowed
		case !s.Allowed && !denied:
			best, denied = i, true
		case !s.Allowed:
			if s.RetryAfter > states[best].RetryAfter {
				best = i
			}
		case denied:
		default:
			b := states[best]
			// s.Remaining/s.Capacity < b.Remaining/b.Capacity, without
			// division: a bucket's remaining counts up to its burst.
			l, r := s.Remaining*b.Policy.Capacity(), b.Remaining*s.Policy.Capacity()
			if l < r || l == r && (s.Remaining < b.Remaining || s.Remaining == b.Remaining && s.reset() > b.reset()) {
				best = i
			}
		}
	}
	return best, denied
}

// SetHeaders writes the fields of draft-ietf-httpapi-ratelimit-headers-10
// for every limit a request met, as mode selects, and returns the
// Retry-After a denial carries (zero when every limit admitted):
//
//   - RateLimit-Policy lists every limit: "per-second";q=5;w=1, "per-10s";q=12;w=10;
//     q is the limit and w its window, the rate; a limit with a burst (token
//     bucket, GCRA) adds it as ratelab-burst, a parameter of this
//     implementation's own, as the draft has them prefixed:
//     "default";q=10;w=1;ratelab-burst=6;
//   - an in-flight limit is listed with the draft's quota unit
//     concurrent-requests and no window: "in-flight";q=5;qu="concurrent-requests",
//     its r the slots left;
//   - RateLimit gives the tightest (see tightest): "per-second";r=0;t=1;
//     r is what it admits now, which for a bucket counts up to its burst
//     (above q when the burst is above the limit), and t when it is whole
//     again;
//   - RateLimit-Limit, -Remaining and -Reset describe the same one;
//   - on a denial, Retry-After is when every limit that denied admits again,
//     the longest of their retry-afters: never earlier than the t given.
func SetHeaders(h http.Header, mode Headers, states []State) time.Duration {
	if len(states) == 0 {
		return 0
	}
	i, denied := tightest(states)
	t := states[i]
	reset := t.reset()
	// Every field's value is cut from one string, and every field's
	// []string from one array: three allocations for the lot.
	b := make([]byte, 0, 64*len(states)+48)
	var policy, rateLimit, limit, remaining int
	if mode != HeadersLegacy {
		for j, s := range states {
			if j > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendQuote(b, s.Name)
			b = append(b, ";q="...)
			b = strconv.AppendInt(b, s.Policy.Limit, 10)
			if s.InFlight {
				// The draft's quota unit: q requests at once, in no window.
				b = append(b, `;qu="concurrent-requests"`...)
				continue
			}
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, CeilSeconds(s.Policy.Window), 10)
			if s.Policy.Burst > 0 {
				b = append(b, ";ratelab-burst="...)
				b = strconv.AppendInt(b, s.Policy.Burst, 10)
			}
		}
		policy = len(b)
		b = strconv.AppendQuote(b, t.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, max(t.Remaining, 0), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, reset, 10)
		rateLimit = len(b)
	}
	if mode != HeadersDraft {
		b = strconv.AppendInt(b, t.Policy.Limit, 10)
		limit = len(b)
		b = strconv.AppendInt(b, max(t.Remaining, 0), 10)
		remaining = len(b)
		b = strconv.AppendInt(b, reset, 10)
	}
	all := string(b)
	vals := make([]string, 0, 5)
	set := func(key, v string) {
		vals = append(vals, v)
		h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if mode != HeadersLegacy {
		set(fieldPolicy, all[:policy])
		set(fieldRateLimit, all[policy:rateLimit])
	}
	if mode != HeadersDraft {
		set(fieldLimit, all[rateLimit:limit])
		set(fieldRemaining, all[limit:remaining])
		set(fieldReset, all[remaining:])
	}
	if !denied {
		return 0
	}
	return t.RetryAfter
}

// The fields SetHeaders sets, in the canonical form http.Header keeps
// them in, so that setting them looks nothing up.
var (
	fieldPolicy    = http.CanonicalHeaderKey("RateLimit-Policy")
	fieldRateLimit = http.CanonicalHeaderKey("RateLimit")
	fieldLimit     = http.CanonicalHeaderKey("RateLimit-Limit")
	fieldRemaining = http.CanonicalHeaderKey("RateLimit-Remaining")
	fieldReset     = http.CanonicalHeaderKey("RateLimit-Reset")
)
