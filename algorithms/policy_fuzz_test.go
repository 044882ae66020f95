package algorithms_test

import (
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// FuzzParsePolicy parses any --limit or --expect-limit ("100/1m"). A
// policy it accepts is valid, and reads back from its own String as
// itself; one it refuses is said to be bad in words, never a panic.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"100/1m", "10/1s", " 5 / 10s ", "1/1ms", "0/1s", "-1/1s", "5/0s", "5/-1s", "5/1500us",
		"9007199254740992/1ms", "9223372036854775807/1ms", "5/1h2m3s4ms", "5", "/", "5/1m/2", "off", "5/9223372036854775807ns", "1e3/1s",
		"10r/s", "10/s", "10/1s:burst=6", "10/1s:burst=0", "10/1s:gcra:burst=6", "1/1ms:burst=9007199254740992", "5/1s:burst=6:burst=7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := algorithms.ParsePolicy(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: an empty error", s)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%q parsed as %+v, which is not valid: %v", s, p, err)
		}
		again, err := algorithms.ParsePolicy(p.String())
		if err != nil || again != p {
			t.Fatalf("%q parsed as %+v, written %q, read back as %+v (%v)", s, p, p.String(), again, err)
		}
	})
}

// FuzzPolicyString writes any valid policy, with a burst or none, and
// reads it back: parse(format(p)) == p.
func FuzzPolicyString(f *testing.F) {
	f.Add(int64(100), int64(60_000), int64(0))
	f.Add(int64(1), int64(1), int64(0))
	f.Add(int64(1<<53), int64(1), int64(1))
	f.Add(int64(5), int64(1<<40), int64(0))
	f.Add(int64(10), int64(1000), int64(6))
	f.Fuzz(func(t *testing.T, limit, windowMillis, burst int64) {
		p := algorithms.Policy{Limit: limit, Window: time.Duration(windowMillis) * time.Millisecond, Burst: burst}
		if windowMillis <= 0 || windowMillis > int64(time.Duration(1<<63-1)/time.Millisecond) || p.Validate() != nil {
			return
		}
		again, err := algorithms.ParsePolicy(p.String())
		if err != nil || again != p {
			t.Fatalf("%+v written %q, read back as %+v (%v)", p, p.String(), again, err)
		}
	})
}
