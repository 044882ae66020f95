package race

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/monitor"
)

// monitorRefusedError is a server's answer to MONITOR other than +OK: an
// ACL that lacks +monitor, a managed service that disables it, a server
// that does not have it.
type monitorRefusedError struct{ reply string }

func (e *monitorRefusedError) Error() string {
	if strings.Contains(strings.ToLower(e.reply), "unknown command") {
		return "the server does not support MONITOR (" + e.reply + ")"
	}
	return "the server refused MONITOR (" + e.reply + ")"
}

// monitorConn is one MONITOR connection, opened on its own socket: go-redis
// would hand it back to a pool.
type monitorConn struct {
	conn net.Conn
	rd   *bufio.Reader
	once sync.Once
	stop func() bool // detaches the close on ctx's end
}

// monitorLineMax bounds one MONITOR line; longer lines (a huge argument)
// are cut there.
const monitorLineMax = 1 << 20

// openMonitor connects to the server o names, authenticates as o says,
// names the connection name where the server lets it, and sends MONITOR.
// A refusal is a *monitorRefusedError. The connection is closed when ctx
// ends, and by Close.
func openMonitor(ctx context.Context, o *redis.Options, name string) (*monitorConn, error) {
	dial := o.Dialer
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	network := o.Network
	if network == "" {
		network = "tcp"
	}
	dctx, cancel := context.WithTimeout(ctx, o.DialTimeout+o.ReadTimeout)
	defer cancel()
	conn, err := dial(dctx, network, o.Addr)
	if err != nil {
		return nil, fmt.Errorf("monitor: dial %s: %w", o.Addr, err)
	}
	m := &monitorConn{conn: conn, rd: bufio.NewReaderSize(conn, 64<<10)}
	// The callback touches only conn: it may run at once, in a goroutine
	// of its own, while m is still being built.
	m.stop = context.AfterFunc(ctx, func() { conn.Close() })
	if deadline, ok := dctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if o.Password != "" {
		auth := []string{"AUTH", o.Password}
		if o.Username != "" {
			auth = []string{"AUTH", o.Username, o.Password}
		}
		if reply, err := m.call(auth...); err != nil {
			m.Close()
			return nil, fmt.Errorf("monitor: auth: %w", err)
		} else if reply != "+OK" {
			m.Close()
			return nil, fmt.Errorf("monitor: auth: %s", strings.TrimPrefix(reply, "-"))
		}
	}
	if _, err := m.call("CLIENT", "SETNAME", name); err != nil { // a refusal is no matter
		m.Close()
		return nil, fmt.Errorf("monitor: %w", err)
	}
	reply, err := m.call("MONITOR")
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("monitor: %w", err)
	}
	if reply != "+OK" {
		m.Close()
		return nil, &monitorRefusedError{reply: strings.TrimPrefix(reply, "-")}
	}
	_ = conn.SetDeadline(time.Time{})
	return m, nil
}

// call sends one command and reads a one-line reply.
func (m *monitorConn) call(args ...string) (string, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := m.conn.Write(b.Bytes()); err != nil {
		return "", err
	}
	return m.line()
}

// line reads one line without its CRLF, cut at monitorLineMax.
func (m *monitorConn) line() (string, error) {
	var b []byte
	for {
		chunk, err := m.rd.ReadSlice('\n')
		if len(b)+len(chunk) <= monitorLineMax {
			b = append(b, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return "", err
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
}

// Close closes the connection; the server drops the monitor with it.
func (m *monitorConn) Close() {
	m.once.Do(func() {
		if m.stop != nil {
			m.stop()
		}
		m.conn.Close()
	})
}

// monLine is one command MONITOR showed.
type monLine struct {
	// micros is the server's time when it fed the command, in µs since the epoch.
	micros int64
	// addr is the client's address as the server sees it, or "lua" for a
	// command a script ran.
	addr string
	args []string
}

// parseMonitorLine reads one line MONITOR sent.
func parseMonitorLine(s string) (monLine, error) {
	l, err := monitor.Parse(s)
	if err != nil {
		return monLine{}, err
	}
	return monLine{micros: l.Time.UnixMicro(), addr: l.Addr, args: l.Args}, nil
}

// scriptOrder is where a server shows a script's commands: after its
// call (Redis 7.0), or before it.
type scriptOrder int

const (
	orderUnknown scriptOrder = iota
	scriptsAfterCall
	scriptsBeforeCall
)

// startScript is the start marker when scripts may run: the order of its
// two lines, the EVAL and its ECHO, says the server's scriptOrder.
const startScript = "return redis.call('ECHO', ARGV[1])"

// capture is what a monitor read between two markers: the trial's lines
// from the clients in addrs, with the runs of script commands next to
// them; every run of other clients' lines is one line with addr "".
type capture struct {
	lines []monLine
	// order is where the server shows a script's commands, when the start
	// marker could tell.
	order scriptOrder
	// full is set when the capture reached its bound and stopped.
	full bool
}

// read reads lines until the one that echoes end, keeping, from the start
// marker on, the lines of addrs (and of scripts next to them), at most
// max: past that it closes the monitor, so that the server does not hold
// what it could no longer send. The start marker is an ECHO of start, or
// startScript called with it, whose two lines give the capture's order. It
// returns when it has seen end, when the connection fails or is closed,
// and at the read deadline.
func (m *monitorConn) read(start, end string, addrs map[string]int, max int) (capture, error) {
	var c capture
	var pending []monLine // a run of script lines, kept when next to ours
	prevOurs := false
	started, sawCall, sawEcho := false, false, false
	isMarker := func(l monLine, marker string) bool {
		return len(l.args) == 2 && strings.EqualFold(l.args[0], "echo") && l.args[1] == marker
	}
	isCallMarker := func(l monLine) bool {
		n := len(l.args)
		return n == 4 && strings.EqualFold(l.args[0], "eval") && l.args[1] == startScript && l.args[n-1] == start
	}
	keep := func(l monLine) bool {
		if len(c.lines) >= max {
			c.full = true
			return false
		}
		c.lines = append(c.lines, l)
		return true
	}
	for {
		s, err := m.line()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("monitor: the connection closed before the trace ended: %w", err)
			}
			return c, err
		}
		if strings.HasPrefix(s, "-") {
			return c, fmt.Errorf("monitor: %s", strings.TrimPrefix(s, "-"))
		}
		l, err := parseMonitorLine(s)
		if err != nil {
			if a := monitor.Addr(s); a != "lua" {
				if _, ours := addrs[a]; !ours {
					continue // another client's line, cut at monitorLineMax or odd: not ours to read
				}
			}
			return c, err
		}
		if !started {
			switch {
			case l.addr == "lua" && isMarker(l, start):
				if sawCall {
					c.order = scriptsAfterCall
				}
				sawEcho = true
			case isCallMarker(l):
				if sawEcho {
					c.order = scriptsBeforeCall
				}
				sawCall = true
			case isMarker(l, start): // a plain ECHO: scripts may not run
				sawCall, sawEcho = true, true
			}
			started = sawCall && sawEcho
			continue
		}
		if isMarker(l, end) {
			if prevOurs && len(pending) > 0 {
				for _, p := range pending {
					keep(p)
				}
			}
			return c, nil
		}
		if l.addr == "lua" {
			if len(pending) < max {
				pending = append(pending, l)
			}
			continue
		}
		_, ours := addrs[l.addr]
		if len(pending) > 0 {
			if prevOurs || ours {
				for _, p := range pending {
					keep(p)
				}
			}
			pending = pending[:0]
		}
		ok := true
		switch {
		case ours:
			ok = keep(l)
		case len(c.lines) == 0 || c.lines[len(c.lines)-1].addr != "":
			ok = keep(monLine{micros: l.micros}) // others were here
		}
		if !ok {
			m.Close()
			return c, nil
		}
		prevOurs = ours
	}
}
