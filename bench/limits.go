package bench

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
