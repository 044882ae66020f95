package audit

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// sfString renders s as a structured-field string (RFC 8941 §3.3.3), or
// reports false when s holds a byte one cannot carry.
func sfString(s string) (string, bool) {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", false
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), true
}

// FuzzRateLimitFields renders a limit, a remaining count, a reset and a
// Retry-After as a server sends them, in the draft-10 fields (RateLimit-Policy
// and RateLimit, with a policy name that may hold any printable character,
// and whatever member follows it) or in the X-RateLimit-* trio, and reads
// them back as the audit does: every value a server may send is read as
// sent, and a value out of range is read as absent, never as another value.
func FuzzRateLimitFields(f *testing.F) {
	f.Add("default", int64(100), int64(42), int64(30), int64(0), true, "")
	f.Add("default", int64(5), int64(0), int64(1), int64(1), true, `"burst";q=1000;w=1`)
	f.Add("per-user;q=1", int64(10), int64(9), int64(60), int64(3), true, "")
	f.Add(`a,b "c" \d`, int64(10), int64(9), int64(60), int64(3), true, ", x;q=5")
	f.Add("", int64(1), int64(-1), int64(-5), int64(-1), true, "")
	f.Add("", int64(60), int64(59), int64(1_000_000_000), int64(999_999_999), true, "")
	f.Add("", int64(60), int64(59), int64(999_999_999_999_999), int64(0), true, "")
	f.Add("", int64(10), int64(3), int64(20), int64(5), false, "")
	f.Add("", int64(10), int64(3), int64(1<<62), int64(1<<62), false, "")
	f.Fuzz(func(t *testing.T, name string, q, r, reset, retry int64, draft bool, next string) {
		var lf Fields
		retryAfter := strconv.FormatInt(retry, 10)
		lf.retryAfter = retryAfter
		if draft {
			quoted, ok := sfString(name)
			if !ok {
				return
			}
			if next != "" {
				next = ", " + next
			}
			lf.policy = quoted + ";q=" + strconv.FormatInt(q, 10) + ";w=60" + next
			lf.rateLimit = quoted + ";r=" + strconv.FormatInt(r, 10) + ";t=" + strconv.FormatInt(reset, 10) + next
		} else {
			lf.xLimit = strconv.FormatInt(q, 10)
			lf.xRemaining = strconv.FormatInt(r, 10)
			lf.xReset = strconv.FormatInt(reset, 10)
		}
		s := newSample(0, 0, time.Millisecond, 200, &lf)
		check := func(what string, got, sent int64) {
			t.Helper()
			switch {
			case sent >= 0 && got != sent:
				t.Errorf("%s %d read as %d from %+v", what, sent, got, lf)
			case sent < 0 && got >= 0:
				t.Errorf("%s %d read as %d from %+v", what, sent, got, lf)
			}
		}
		check("limit", s.limit, q)
		check("remaining", s.remaining, r)
		resetSecs := int64(-1)
		if s.Reset >= 0 {
			resetSecs = int64(s.Reset / time.Second)
		}
		switch {
		case reset < 0 && !draft: // as an epoch time long past: 0 or absent
			if s.Reset > 0 {
				t.Errorf("reset %d read as %s", reset, s.Reset)
			}
		case reset < 0:
			check("reset", resetSecs, reset)
		case reset <= 1e9: // seconds from now, in both
			check("reset", resetSecs, reset)
		case s.Reset < 0: // too far to keep: absent
		case draft:
			check("reset", resetSecs, reset)
		default: // X-RateLimit-Reset above 10^9 is an epoch time
			if d := resetSecs - max(reset-time.Now().Unix(), 0); d < -2 || d > 2 {
				t.Errorf("reset at %d read as %s from now", reset, s.Reset)
			}
		}
		// Every policy is read as well, the first with the quota and
		// remaining sent (when an int32 holds them), each named or not.
		advs := parseAdverts(nil, &lf, map[string]int16{name: 3})
		sent := q >= 0 && q < 1<<31 && r >= 0 && r < 1<<31
		if len(advs) > maxAdverts || sent && len(advs) == 0 {
			t.Fatalf("%d policies read from %+v", len(advs), lf)
		}
		if len(advs) > 0 && q >= 0 && q < 1<<31 && r >= 0 && r < 1<<31 && (advs[0].q != givenAs(int32(q)) || advs[0].r != givenAs(int32(r)) || draft && (!advs[0].named || advs[0].name != 3)) {
			t.Errorf("first policy read as %+v from %+v", advs[0], lf)
		}
		switch {
		case retry < 0 && s.RetryAfter >= 0:
			t.Errorf("Retry-After %d read as %s", retry, s.RetryAfter)
		case retry >= 0 && retry < 1e9 && s.RetryAfter != time.Duration(retry)*time.Second:
			t.Errorf("Retry-After %d read as %s", retry, s.RetryAfter)
		}
	})
}
