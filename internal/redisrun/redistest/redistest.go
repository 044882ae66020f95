// Package redistest gives a test package one private redis-server, started by
// TestMain on a free loopback port and stopped after the tests, and clients to
// it with cleanup. Under CI (CI set to anything but "" or "false") a missing
// redis-server fails the package instead of skipping its Redis tests.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelab/ratelab/internal/monitor"
	"github.com/ratelab/ratelab/internal/randid"
	"github.com/ratelab/ratelab/internal/redisrun"
)

// InCI reports whether the tests run under CI.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "false" && v != "0"
}

// Main starts the package's redis-server into *srv, runs the tests, stops the
// server and fails the run if goroutines leaked. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }
func Main(m *testing.M, srv **redisrun.Server) int {
	// go-redis logs its own dial retries; the tests check errors themselves.
	redis.SetLogger(quiet{})
	s, err := redisrun.Start(context.Background(), redisrun.Options{})
	switch {
	case errors.Is(err, redisrun.ErrNotFound) && !InCI():
		fmt.Fprintln(os.Stderr, "redistest: no redis-server on PATH: tests that need Redis are skipped (make test installs it)")
	case err != nil:
		fmt.Fprintf(os.Stderr, "redistest: %v\n", err)
		return 1
	default:
		*srv = s
	}
	code := m.Run()
	if s != nil {
		s.Stop()
	}
	if code == 0 {
		// go-redis retries a failed dial from a goroutine that sleeps a
		// second and outlives Close; tests of unreachable servers leave one.
		ignore := goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
		if err := goleak.Find(ignore); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: goroutines leaked: %v\n", err)
			return 1
		}
	}
	return code
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Client returns a client to srv, closed when the test ends. The test is
// skipped when srv is nil (no redis-server outside CI).
func Client(t testing.TB, srv *redisrun.Server) *redis.Client {
	t.Helper()
	if srv == nil {
		t.Skip("no redis-server on PATH")
	}
	c := redis.NewClient(&redis.Options{
		Addr:         srv.Addr,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  5 * time.Second,
		WriteTimeout: 5 * time.Second,
	})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: ping %s: %v", srv.Addr, err)
	}
	return c
}

// Cluster starts a private Redis Cluster of 3 masters, stopped when the
// test ends. The test is skipped when srv, the package's server, is nil
// (no redis-server outside CI).
func Cluster(t testing.TB, srv *redisrun.Server) *redisrun.Cluster {
	t.Helper()
	if srv == nil {
		t.Skip("no redis-server on PATH")
	}
	cl, err := redisrun.StartCluster(context.Background(), 3, redisrun.Options{})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(cl.Stop)
	return cl
}

// Prefix returns a key prefix unique to this test, so tests sharing the
// package's server never see each other's keys.
func Prefix(t testing.TB) string {
	t.Helper()
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	return name + "." + randid.Hex(4)
}

// Monitor is a MONITOR connection to a server: it sees every command any
// client sends from the moment it is opened, as Redis echoes them.
type Monitor struct {
	conn net.Conn
	rd   *bufio.Reader
}

// NewMonitor opens a MONITOR connection to srv, closed when the test ends.
func NewMonitor(t testing.TB, srv *redisrun.Server) *Monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", srv.Addr, 2*time.Second)
	if err != nil {
		t.Fatalf("redistest: monitor: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	m := &Monitor{conn: conn, rd: bufio.NewReader(conn)}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatalf("redistest: monitor: %v", err)
	}
	if line, err := m.rd.ReadString('\n'); err != nil || strings.TrimSpace(line) != "+OK" {
		t.Fatalf("redistest: monitor answered %q (%v)", line, err)
	}
	return m
}

// Find reads the commands seen until one's arguments (the command name
// first, lower-cased) satisfy match, for at most timeout, and returns them.
func (m *Monitor) Find(t testing.TB, timeout time.Duration, match func(args []string) bool) []string {
	t.Helper()
	_ = m.conn.SetReadDeadline(time.Now().Add(timeout))
	for {
		line, err := m.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("redistest: monitor saw no such command within %s: %v", timeout, err)
		}
		l, err := monitor.Parse(line)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		args := l.Args
		args[0] = strings.ToLower(args[0])
		if match(args) {
			return args
		}
	}
}
