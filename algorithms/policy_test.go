package algorithms_test

import (
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]algorithms.Policy{
		"100/1m":         {Limit: 100, Window: time.Minute},
		" 5 / 10s ":      {Limit: 5, Window: 10 * time.Second},
		"10r/s":          {Limit: 10, Window: time.Second}, // nginx's spelling of a rate
		"600r/m":         {Limit: 600, Window: time.Minute},
		"10/1s:burst=6":  {Limit: 10, Window: time.Second, Burst: 6},
		"10r/s:burst=20": {Limit: 10, Window: time.Second, Burst: 20},
	} {
		if p, err := algorithms.ParsePolicy(in); err != nil || p != want {
			t.Errorf("ParsePolicy(%q) = %+v, %v; want %+v", in, p, err, want)
		}
	}
	for in, want := range map[string]string{
		"100":                   `"100": want requests/window, such as 100/1m`,
		"x/1s":                  `"x/1s": "x" is not a whole number`,
		"5/soon":                `"5/soon": the window "soon" is not a duration: a window such as 1s, 10s, 1m or 1h`,
		"10/s":                  `"10/s": the window "s" needs a number: a window such as 1s`,
		"10/m":                  `"10/m": the window "m" needs a number: a window such as 1m`,
		"10r/h":                 `"10r/h": "10r" is not a whole number`,
		"0/1s":                  `"0/1s": limit must be at least 1 (got 0)`,
		"5/1us":                 `"5/1us": window must be a whole number of milliseconds (got 1µs)`,
		"10/1s:gcra":            `"10/1s:gcra": "gcra": want LIMIT/WINDOW or LIMIT/WINDOW:burst=N, such as 100/1m`,
		"10/1s:burst=0":         `"10/1s:burst=0": burst must be at least 1 (got 0)`,
		"10/1s:burst=-2":        `"10/1s:burst=-2": burst must be at least 1 (got -2)`,
		"10/1s:burst=six":       `"10/1s:burst=six": burst "six" is not a whole number`,
		"10/1s:burst=":          `"10/1s:burst=": burst= needs a whole number, such as burst=6`,
		"10/1ms:burst=1e16":     `"10/1ms:burst=1e16": burst "1e16" is not a whole number`,
		"1/1h:burst=3000000000": `"1/1h:burst=3000000000": burst × window in ms must be below 2^53 (got 3000000000 × 3600000)`,
	} {
		if _, err := algorithms.ParsePolicy(in); err == nil || err.Error() != want {
			t.Errorf("ParsePolicy(%q) = %v, want %q", in, err, want)
		}
	}
}

// TestParseLimit: LIMIT/WINDOW, then an algorithm and a burst, as the
// flags take them; a burst only with an algorithm that has one.
func TestParseLimit(t *testing.T) {
	for in, want := range map[string]algorithms.Limit{
		"10/1s":                       {Policy: algorithms.Policy{Limit: 10, Window: time.Second}},
		"100/1m:gcra":                 {Policy: algorithms.Policy{Limit: 100, Window: time.Minute}, Algorithm: "gcra"},
		"10/1s:gcra:burst=6":          {Policy: algorithms.Policy{Limit: 10, Window: time.Second, Burst: 6}, Algorithm: "gcra"},
		"10r/s:token-bucket:burst=30": {Policy: algorithms.Policy{Limit: 10, Window: time.Second, Burst: 30}, Algorithm: "token-bucket"},
		"10/1s:burst=6":               {Policy: algorithms.Policy{Limit: 10, Window: time.Second, Burst: 6}},
	} {
		l, err := algorithms.ParseLimit(in)
		if err != nil || l != want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", in, l, err, want)
		}
		if again, err := algorithms.ParseLimit(l.String()); err != nil || again != l {
			t.Errorf("%q written %q, read back as %+v (%v)", in, l.String(), again, err)
		}
	}
	for in, want := range map[string]string{
		"10/1s:sliding-log:burst=6":  `"10/1s:sliding-log:burst=6": burst is for token-bucket and gcra: sliding-log has none (got burst=6)`,
		"10/1s:fixed-window:burst=6": `"10/1s:fixed-window:burst=6": burst is for token-bucket and gcra: fixed-window has none (got burst=6)`,
		"10/1s:burst=6:gcra":         `"10/1s:burst=6:gcra": "gcra" after the burst: want LIMIT/WINDOW:ALGORITHM:burst=N`,
		"10/1s:gcra:gcra":            `"10/1s:gcra:gcra": "gcra": want LIMIT/WINDOW, then :ALGORITHM and :burst=N`,
		"10/1s:burst=6:burst=7":      `"10/1s:burst=6:burst=7": two bursts: give one`,
		"10/1s:magic":                `"10/1s:magic": "magic" is not an algorithm (want fixed-window, sliding-log, sliding-counter, token-bucket, gcra)`,
		"10/s:gcra:burst=6":          `"10/s:gcra:burst=6": the window "s" needs a number: a window such as 1s`,
	} {
		if _, err := algorithms.ParseLimit(in); err == nil || err.Error() != want {
			t.Errorf("ParseLimit(%q) = %v, want %q", in, err, want)
		}
	}
}

// TestHasBurstIsBurstRefill: the algorithms that take a burst are those
// whose guarantee is BurstRefill, and New refuses a burst to any other.
func TestHasBurstIsBurstRefill(t *testing.T) {
	for _, info := range algorithms.Registered() {
		if got, want := algorithms.HasBurst(info.Name), info.Guarantee == algorithms.BurstRefill; got != want {
			t.Errorf("HasBurst(%q) = %t, its guarantee is %s", info.Name, got, info.Guarantee)
		}
		p := algorithms.Policy{Limit: 10, Window: time.Second, Burst: 6}
		_, err := algorithms.New(info.Name, nil, p)
		if (err == nil) != algorithms.HasBurst(info.Name) {
			t.Errorf("New(%q) with a burst: %v", info.Name, err)
		}
		if algorithms.CheckBurst(info.Name, p) == nil != algorithms.HasBurst(info.Name) {
			t.Errorf("CheckBurst(%q) disagrees with HasBurst", info.Name)
		}
	}
}
