package algorithms

import (
	"strings"
	"testing"
	"time"
)

// TestParseDecideReply reads decide.lua's reply, and refuses every reply
// that is not one, naming what is wrong.
func TestParseDecideReply(t *testing.T) {
	shadows := []bool{false, true}
	r, err := parseDecideReply([]any{int64(1), int64(1), int64(4), int64(0), int64(10000), int64(7),
		int64(0), int64(0), int64(2500), int64(9000), int64(0)}, shadows)
	if err != nil || !r.allowed || r.decisions[0].Remaining != 4 || r.decisions[0].Reset != 10*time.Second || r.marks[0] != 7 ||
		r.decisions[1].Allowed || r.decisions[1].RetryAfter != 2500*time.Millisecond {
		t.Fatalf("parseDecideReply = %+v, %v", r, err)
	}
	for _, tc := range []struct {
		name  string
		reply any
		want  string
	}{
		{"not an array", int64(1), "want {allowed"},
		{"too short", []any{int64(1), int64(1)}, "want {allowed"},
		{"a string", []any{int64(1), "1", int64(0), int64(0), int64(0), int64(0), int64(1), int64(0), int64(0), int64(0), int64(0)}, "element 2 is string"},
		{"a flag of 2", []any{int64(2), int64(1), int64(0), int64(0), int64(0), int64(0), int64(1), int64(0), int64(0), int64(0), int64(0)}, "want 0 or 1"},
		{"negative remaining", []any{int64(1), int64(1), int64(-1), int64(0), int64(0), int64(0), int64(1), int64(0), int64(0), int64(0), int64(0)}, "negative"},
		{"admitted with a retry-after", []any{int64(1), int64(1), int64(0), int64(5), int64(0), int64(0), int64(1), int64(0), int64(0), int64(0), int64(0)}, "admitted with a retry-after"},
		{"negative reset", []any{int64(1), int64(1), int64(0), int64(0), int64(-5), int64(0), int64(1), int64(0), int64(0), int64(0), int64(0)}, "reset"},
		{"admitted over a denial", []any{int64(1), int64(0), int64(0), int64(5), int64(0), int64(0), int64(1), int64(0), int64(0), int64(0), int64(0)}, "is not its limits'"},
		{"denied by a shadow", []any{int64(0), int64(1), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(5), int64(0), int64(0)}, "is not its limits'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseDecideReply(tc.reply, shadows); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseDecideReply(%v) = %v, want an error saying %q", tc.reply, err, tc.want)
			}
		})
	}
}
