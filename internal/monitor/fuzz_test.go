package monitor_test

import (
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/monitor"
)

// FuzzParse: no line makes Parse panic; a line it reads, written again as
// MONITOR writes it, reads back the same; and any string, quoted as Redis
// quotes it, is an argument that reads back as itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`+1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "abc" "1" "rl:{a}:lua"`,
		`1700000000.000001 [3 lua] "ZADD" "k" "1" "m"`,
		`+1700000000.000010 [0 [::1]:6000] "set" "we\"ird key" "x\ny\r\t\a\b\x00\\"`,
		`+1700000000.000010 [0 unix:/tmp/redis.sock] "ping"`,
		`+1700000000.000010 [0 a:1] "\xZZ"`,
		`+1700000000.000010 [0 a:1] "get" "k`,
		`+OK`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if l, err := monitor.Parse(s); err == nil {
			again, err := monitor.Parse(l.String())
			if err != nil || !equal(again, l) {
				t.Fatalf("Parse(%q) = %+v, written %q, read back as %+v, %v", s, l, l.String(), again, err)
			}
		}
		l := monitor.Line{Time: time.Unix(1_700_000_000, 123_456_000), Addr: "127.0.0.1:5555", Args: []string{"SET", s}}
		got, err := monitor.Parse("+" + l.String() + "\r\n")
		if err != nil || !equal(got, l) {
			t.Fatalf("the argument %q, quoted %s, read back as %+v, %v", s, monitor.Quote(s), got, err)
		}
	})
}
