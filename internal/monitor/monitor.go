// Package monitor reads the lines Redis's MONITOR command sends, one per
// command the server runs:
//
//	+1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "abc" "1" "rl:{a}"
//
// the server's time in seconds and microseconds, the client's database and
// address ("lua" for a command a script ran, "unix:/path" for a Unix
// socket), and the command's arguments, each quoted as Redis's sdscatrepr
// quotes them: \" and \\, \n \r \t \a \b for those five bytes, the other
// bytes outside printable ASCII as \xHH, and the rest as they are.
package monitor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Line is one command MONITOR showed.
type Line struct {
	// Time is the server's time when it ran the command, to the microsecond.
	Time time.Time
	// DB is the database the client had selected.
	DB int
	// Addr is the client's address as the server sees it: "127.0.0.1:5555",
	// "[::1]:6000", "unix:/tmp/redis.sock", or "lua" for a command a
	// script ran.
	Addr string
	// Args are the command's name and its arguments, unquoted.
	Args []string
}

// Parse reads one line as MONITOR sends it; the leading + of the status
// reply and the trailing CRLF may be there or not.
func Parse(s string) (Line, error) {
	s = strings.TrimPrefix(strings.TrimRight(s, "\r\n"), "+")
	stamp, rest, ok := strings.Cut(s, " [")
	if !ok {
		return Line{}, fmt.Errorf("monitor: unexpected line %q", cut(s))
	}
	sec, usec, ok := strings.Cut(stamp, ".")
	if !ok || !digits(sec) || len(sec) > 18 || len(usec) != 6 || !digits(usec) {
		return Line{}, fmt.Errorf("monitor: bad time in %q", cut(s))
	}
	secs, _ := strconv.ParseInt(sec, 10, 64)
	us, _ := strconv.ParseInt(usec, 10, 64)
	// The client part is "db addr"; an IPv6 address has brackets of its
	// own, so the part ends at the first `] "`, where the arguments start.
	client, quoted, ok := strings.Cut(rest, `] "`)
	if !ok {
		return Line{}, fmt.Errorf("monitor: no command in %q", cut(s))
	}
	db, addr, ok := strings.Cut(client, " ")
	if !ok || !digits(db) || len(db) > 9 || addr == "" {
		return Line{}, fmt.Errorf("monitor: bad client %q in %q", client, cut(s))
	}
	n, _ := strconv.Atoi(db)
	args, err := Unquote(`"` + quoted)
	if err != nil {
		return Line{}, fmt.Errorf("monitor: %w in %q", err, cut(s))
	}
	return Line{Time: time.Unix(secs, us*1000), DB: n, Addr: addr, Args: args}, nil
}

// Addr is the client address of a line, as far as it can be read when the
// whole line cannot (cut short, or odd); "" when even that cannot.
func Addr(s string) string {
	_, rest, _ := strings.Cut(s, " [")
	client, _, _ := strings.Cut(rest, `] "`)
	_, addr, _ := strings.Cut(client, " ")
	return addr
}

// String is the line as MONITOR sends it, without the + and the CRLF.
func (l Line) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d.%06d [%d %s]", l.Time.Unix(), l.Time.Nanosecond()/1000, l.DB, l.Addr)
	for _, a := range l.Args {
		b.WriteByte(' ')
		b.WriteString(Quote(a))
	}
	return b.String()
}

// Quote quotes an argument as MONITOR shows it (Redis's sdscatrepr).
func Quote(arg string) string {
	var b strings.Builder
	b.Grow(len(arg) + 2)
	b.WriteByte('"')
	for i := 0; i < len(arg); i++ {
		switch c := arg[i]; c {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		default:
			if c >= ' ' && c <= '~' {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Unquote reads arguments as Quote writes them, separated by one space:
// `"get" "k\n" "\x00"`.
func Unquote(s string) ([]string, error) {
	var args []string
	for i := 0; i < len(s); {
		if len(args) > 0 {
			if s[i] != ' ' {
				return nil, errors.New("arguments not separated by a space")
			}
			i++
		}
		if i >= len(s) || s[i] != '"' {
			return nil, errors.New("an argument not in quotes")
		}
		arg, n, err := unquoteOne(s[i:])
		if err != nil {
			return nil, err
		}
		args = append(args, arg)
		i += n
	}
	if len(args) == 0 {
		return nil, errors.New("no arguments")
	}
	return args, nil
}

// unquoteOne reads the quoted argument s starts with, and says how many
// bytes of s it took.
func unquoteOne(s string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), i + 1, nil
		case c != '\\':
			b.WriteByte(c)
			continue
		case i+1 >= len(s):
			return "", 0, errors.New("an unterminated argument")
		}
		i++
		switch e := s[i]; e {
		case '\\', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'x':
			if i+2 >= len(s) {
				return "", 0, errors.New(`a bad \x escape`)
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", 0, errors.New(`a bad \x escape`)
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			return "", 0, fmt.Errorf("an unknown escape %q", []byte{'\\', e})
		}
	}
	return "", 0, errors.New("an unterminated argument")
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// cut shortens a line for a message.
func cut(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
