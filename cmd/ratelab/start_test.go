package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseStartAt: --start-at takes an RFC 3339 time as it is, and next:D
// as the instant bench.NextStart computes from now; anything else is a
// usage error that names the flag and shows both forms.
func TestParseStartAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 18, 0, 45, 1, time.UTC)
	for _, tc := range []struct{ in, want string }{
		{"2026-12-02T18:30:00Z", "2026-12-02T18:30:00Z"},
		{"2026-12-02T19:30:00.5+01:00", "2026-12-02T18:30:00.5Z"},
		{"next:1m", "2026-12-02T18:02:00Z"}, // 18:01:00 is a nanosecond short of 15 s away
		{"next:15s", "2026-12-02T18:01:15Z"},
		{"next:1h", "2026-12-02T19:00:00Z"},
	} {
		got, err := parseStartAt(tc.in, now)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if s := got.UTC().Format(time.RFC3339Nano); s != tc.want {
			t.Errorf("%s: %s, want %s", tc.in, s, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"tomorrow", `--start-at "tomorrow": want an RFC 3339 time`},
		{"next:soon", `--start-at "next:soon": D is not a duration; want an RFC 3339 time`},
		{"next:500ms", `--start-at "next:500ms": D must be between 1s and 1h (got 500ms); want`},
		{"next:2h", `--start-at "next:2h": D must be between 1s and 1h (got 2h0m0s); want`},
		{"next:", `--start-at "next:": D is not a duration`},
	} {
		_, err := parseStartAt(tc.in, now)
		var usage *usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "or next:D") {
			t.Errorf("%s: error %v, want a usage error saying %q and showing next:D", tc.in, err, tc.want)
		}
	}
}
