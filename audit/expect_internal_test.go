package audit

import (
	"strings"
	"testing"
	"time"
)

// A malformed --expect-limit is refused, naming the limit and what is
// wrong; nginx's rate and burst are read as gateways state them.
func TestParseExpectedLimits(t *testing.T) {
	if _, err := ParseExpectedLimits("5/1s,12/10s:gcra", ""); err != nil {
		t.Error(err)
	}
	for bad, want := range map[string]string{
		"5/1s,":                     `ExpectLimits "": want requests/window, such as 100/1m`,
		"5/1s:nope":                 `ExpectLimits "5/1s:nope": "nope" is not an algorithm`,
		"x/1s":                      `ExpectLimits "x/1s": "x" is not a whole number`,
		"0/1s":                      `ExpectLimits "0/1s": limit must be at least 1 (got 0)`,
		"0/1s:gcra":                 `ExpectLimits "0/1s:gcra": limit must be at least 1 (got 0)`,
		"5/1s,0/10s":                `ExpectLimits "0/10s": limit must be at least 1 (got 0)`,
		"10/s":                      `ExpectLimits "10/s": the window "s" needs a number: a window such as 1s`,
		"10/1s:sliding-log:burst=6": `ExpectLimits "10/1s:sliding-log:burst=6": burst is for token-bucket and gcra: sliding-log has none`,
		"10/1s:burst=6": `ExpectLimits "10/1s:burst=6": a burst is for token-bucket and gcra, and it names no algorithm: ` +
			`name one, as in 10/1s:gcra:burst=6`,
		"10/1s:gcra:burst=0": `ExpectLimits "10/1s:gcra:burst=0": burst must be at least 1 (got 0)`,
	} {
		_, err := ParseExpectedLimits(bad, "")
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", bad, err, want)
		}
	}
	if _, err := ParseExpectedLimits("10/1s:burst=6", "fixed-window"); err == nil ||
		err.Error() != `ExpectLimits "10/1s:burst=6": a burst is for token-bucket and gcra, and ExpectAlgorithm is fixed-window: name one, as in 10/1s:gcra:burst=6` {
		t.Errorf("a burst for --expect-algorithm fixed-window: %v", err)
	}
	// nginx's rate=10r/s burst=5, stated as gateways state it.
	for in, want := range map[string]ExpectedLimit{
		"10/1s:gcra:burst=6": {Limit: 10, Window: time.Second, Algorithm: "gcra", Burst: 6},
		"10r/s:burst=6":      {Limit: 10, Window: time.Second, Algorithm: "token-bucket", Burst: 6},
	} {
		ls, err := ParseExpectedLimits(in, "token-bucket")
		if err != nil || len(ls) != 1 || ls[0] != want {
			t.Errorf("%q: %+v, %v; want %+v", in, ls, err, want)
		}
	}
	if got := (ExpectedLimit{Limit: 10, Window: time.Second, Algorithm: "gcra", Burst: 6}).String(); got != "10/1s:gcra:burst=6" {
		t.Errorf("written %q", got)
	}
}
