package monitor_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/monitor"
)

func TestParse(t *testing.T) {
	t.Parallel()
	at := func(sec, us int64) time.Time { return time.Unix(sec, us*1000) }
	for _, tc := range []struct {
		name string
		line string
		want monitor.Line
		err  string
	}{
		{"a command", `+1700000000.123456 [0 127.0.0.1:5555] "get" "rl:{a}:naive"`,
			monitor.Line{Time: at(1_700_000_000, 123_456), Addr: "127.0.0.1:5555", Args: []string{"get", "rl:{a}:naive"}}, ""},
		{"no plus, a CRLF", "1700000000.000001 [3 lua] \"ZADD\" \"k\" \"1\" \"m\"\r\n",
			monitor.Line{Time: at(1_700_000_000, 1), DB: 3, Addr: "lua", Args: []string{"ZADD", "k", "1", "m"}}, ""},
		{"IPv6", `+1700000000.000010 [0 [::1]:6000] "ping"`,
			monitor.Line{Time: at(1_700_000_000, 10), Addr: "[::1]:6000", Args: []string{"ping"}}, ""},
		{"a Unix socket", `+1700000000.000010 [15 unix:/tmp/redis.sock] "ping"`,
			monitor.Line{Time: at(1_700_000_000, 10), DB: 15, Addr: "unix:/tmp/redis.sock", Args: []string{"ping"}}, ""},
		{"an empty argument", `+1700000000.000010 [0 a:1] "set" "" ""`,
			monitor.Line{Time: at(1_700_000_000, 10), Addr: "a:1", Args: []string{"set", "", ""}}, ""},
		{"a space and a bracket in an argument", `+1700000000.000010 [0 a:1] "set" "a] \"b" "c d"`,
			monitor.Line{Time: at(1_700_000_000, 10), Addr: "a:1", Args: []string{"set", `a] "b`, "c d"}}, ""},

		{"a reply", `+OK`, monitor.Line{}, "unexpected line"},
		{"a short fraction", `+17000000.1 [0 a:1] "get"`, monitor.Line{}, "bad time"},
		{"a signed time", `++1700000000.000001 [0 a:1] "get"`, monitor.Line{}, "bad time"},
		{"no db", `+1700000000.000001 [a:1] "get"`, monitor.Line{}, "bad client"},
		{"no command", `+1700000000.000001 [0 a:1]`, monitor.Line{}, "no command"},
		{"bare", `+1700000000.000010 [0 a:1] "get" k`, monitor.Line{}, "not in quotes"},
		{"two spaces", `+1700000000.000010 [0 a:1] "get"  "k"`, monitor.Line{}, "not in quotes"},
		{"no space", `+1700000000.000010 [0 a:1] "get""k"`, monitor.Line{}, "not separated"},
		{"unterminated", `+1700000000.000010 [0 a:1] "get" "k`, monitor.Line{}, "unterminated"},
		{"a backslash last", `+1700000000.000010 [0 a:1] "get" "k\`, monitor.Line{}, "unterminated"},
		{"a bad hex escape", `+1700000000.000010 [0 a:1] "\xZZ"`, monitor.Line{}, `bad \x escape`},
		{"a short hex escape", `+1700000000.000010 [0 a:1] "\x4"`, monitor.Line{}, `bad \x escape`},
		{"an unknown escape", `+1700000000.000010 [0 a:1] "\q"`, monitor.Line{}, `unknown escape "\\q"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := monitor.Parse(tc.line)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equal(l, tc.want) {
				t.Fatalf("got %+v, want %+v", l, tc.want)
			}
		})
	}
}

// TestEscapes: every escape Redis writes reads back as its byte, and
// Quote writes each byte as Redis does.
func TestEscapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		quoted string
		arg    string
	}{
		{`"\""`, `"`},
		{`"\\"`, `\`},
		{`"\n"`, "\n"},
		{`"\r"`, "\r"},
		{`"\t"`, "\t"},
		{`"\a"`, "\a"},
		{`"\b"`, "\b"},
		{`"\x00"`, "\x00"},
		{`"\x0b"`, "\v"},
		{`"\x0c"`, "\f"},
		{`"\x1b"`, "\x1b"},
		{`"\x7f"`, "\x7f"},
		{`"\x80"`, "\x80"},
		{`"\xff"`, "\xff"},
		{`"\xe2\x82\xac"`, "€"},
		{`" ~"`, " ~"},
		{`"a\\nb"`, `a\nb`},
		{`"\\x00"`, `\x00`},
		{`"\r\n"`, "\r\n"},
	} {
		t.Run(tc.quoted, func(t *testing.T) {
			args, err := monitor.Unquote(tc.quoted)
			if err != nil || len(args) != 1 || args[0] != tc.arg {
				t.Fatalf("Unquote(%s) = %q, %v; want %q", tc.quoted, args, err, tc.arg)
			}
			if q := monitor.Quote(tc.arg); q != tc.quoted {
				t.Fatalf("Quote(%q) = %s, want %s", tc.arg, q, tc.quoted)
			}
		})
	}
	// Redis writes hex in lower case; either reads.
	if args, err := monitor.Unquote(`"\xAB\xab"`); err != nil || !slices.Equal(args, []string{"\xab\xab"}) {
		t.Fatalf(`Unquote("\xAB\xab") = %q, %v`, args, err)
	}
}

// TestString: a line written as MONITOR writes it reads back the same.
func TestString(t *testing.T) {
	t.Parallel()
	l := monitor.Line{Time: time.Unix(1_700_000_000, 42_000), DB: 2, Addr: "127.0.0.1:5555",
		Args: []string{"SET", "k\n", "\x00\"\\", ""}}
	s := l.String()
	if want := `1700000000.000042 [2 127.0.0.1:5555] "SET" "k\n" "\x00\"\\" ""`; s != want {
		t.Fatalf("String() = %s, want %s", s, want)
	}
	got, err := monitor.Parse("+" + s + "\r\n")
	if err != nil || !equal(got, l) {
		t.Fatalf("Parse(%s) = %+v, %v; want %+v", s, got, err, l)
	}
}

func TestAddr(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		`+1700000000.000001 [0 127.0.0.1:7000] "set" "big" "xxxx`: "127.0.0.1:7000",
		`+1700000000.000001 [0 [::1]:7000] "get" "k"`:             "[::1]:7000",
		`+1700000000.000001 [0 lua] "get" "k"`:                    "lua",
		`+OK`:                                                     "",
	} {
		if got := monitor.Addr(line); got != want {
			t.Errorf("Addr(%s) = %q, want %q", line, got, want)
		}
	}
}

func equal(a, b monitor.Line) bool {
	return a.Time.Equal(b.Time) && a.DB == b.DB && a.Addr == b.Addr && slices.Equal(a.Args, b.Args)
}
