package audit

import (
	"strconv"
	"strings"
	"time"
)

// maxResetSeconds is the furthest reset the audit reads, 10^9 s: where
// X-RateLimit-Reset's epoch times begin.
const maxResetSeconds = 1e9

// resetIn is a reset secs seconds away, or -1 (absent) when it is negative
// or further than maxResetSeconds: never a time.Duration wrapped around
// into a near reset.
func resetIn(secs int64) time.Duration {
	if secs < 0 || secs > maxResetSeconds {
		return -1
	}
	return time.Duration(secs) * time.Second
}

// sfParam reads an integer parameter of the first item of a structured
// field such as `"default";q=100;w=60`. A quoted string is read whole, so
// that a policy named "a;q=1" holds no parameter.
func sfParam(field, name string) (int64, bool) {
	for _, p := range sfSplit(field)[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && k == name {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// sfSplit cuts the first item of a structured field list at its
// semicolons: the item, then its parameters.
func sfSplit(field string) []string { return sfCut(field, ';') }

// sfCut cuts a structured field at sep where it stands outside a quoted
// string (in which a backslash escapes the next character), so that a
// policy named "a;q=1" or "a,b" is one name. Cut at ';', it reads the
// first member of a list only: a comma ends it.
func sfCut(field string, sep byte) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(field); i++ {
		switch c := field[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == sep:
			parts = append(parts, field[start:i])
			start = i + 1
		case c == ',':
			return append(parts, field[start:i])
		}
	}
	return append(parts, field[start:])
}

// Fields are the raw values of an HTTP response's rate-limit fields, as
// the audit reads them: Retry-After, RateLimit-Policy and RateLimit
// (draft-10), and the legacy RateLimit-Limit/-Remaining/-Reset and their
// X-RateLimit- forms. The engine sets them as it reads the response.
type Fields struct {
	retryAfter, policy, rateLimit string
	limit, remaining, reset       string // RateLimit-Limit, -Remaining, -Reset
	xLimit, xRemaining, xReset    string // X-RateLimit-…
}

// Set keeps value when name is one of the rate-limit fields.
func (f *Fields) Set(name, value []byte) {
	var dst *string
	switch strings.ToLower(string(name)) {
	case "retry-after":
		dst = &f.retryAfter
	case "ratelimit-policy":
		dst = &f.policy
	case "ratelimit":
		dst = &f.rateLimit
	case "ratelimit-limit":
		dst = &f.limit
	case "ratelimit-remaining":
		dst = &f.remaining
	case "ratelimit-reset":
		dst = &f.reset
	case "x-ratelimit-limit":
		dst = &f.xLimit
	case "x-ratelimit-remaining":
		dst = &f.xRemaining
	case "x-ratelimit-reset":
		dst = &f.xReset
	default:
		return
	}
	if *dst == "" {
		*dst = string(value)
	}
}

// Advertised says the fields give a limit or what remains of it
// (RateLimit-Policy, RateLimit, RateLimit-Limit/-Remaining, or their
// X-RateLimit- forms): the limiter decided the response.
func (f *Fields) Advertised() bool {
	return f.policy != "" || f.rateLimit != "" || f.limit != "" || f.remaining != "" || f.xLimit != "" || f.xRemaining != ""
}
