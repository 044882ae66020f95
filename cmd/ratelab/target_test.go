package main

import (
	"context"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// startRedis starts a redis-server of the test's own with opts, stopped
// when the test ends; it skips (or fails under CI) without redis-server.
func startRedis(t *testing.T, opts redisrun.Options) *redisrun.Server {
	t.Helper()
	redistest.Client(t, srv) // skips without redis-server, fails under CI
	s, err := redisrun.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestStartupLineNamesTheRedis: every command that decides says which
// Redis it uses, an external one included, and never prints a password.
func TestStartupLineNamesTheRedis(t *testing.T) {
	t.Parallel()
	s := startRedis(t, redisrun.Options{Args: []string{"--requirepass", "s3cret"}})
	code, stdout, stderr := ratelab(t, "race", "--redis", "redis://:s3cret@"+s.Addr, "--trials", "1", "--limiters", "lua")
	if code != exitOK || !strings.Contains(stderr, "race on Redis "+s.Version+" at "+s.Addr) {
		t.Fatalf("exit %d, stderr %q: want the start-up line naming the server", code, stderr)
	}
	if strings.Contains(stdout+stderr, "s3cret") {
		t.Fatal("the password was printed")
	}
}

// TestCredentialsRefused: a wrong password is said to be one, not a
// network failure, and exits 1 without printing it.
func TestCredentialsRefused(t *testing.T) {
	t.Parallel()
	s := startRedis(t, redisrun.Options{Args: []string{"--requirepass", "s3cret"}})
	for _, url := range []string{"redis://:wrong@" + s.Addr, "redis://" + s.Addr} {
		code, stdout, stderr := ratelab(t, "race", "--redis", url)
		if code != exitError || !strings.Contains(stderr, "Redis at "+s.Addr+" refused ratelab's credentials") ||
			strings.Contains(stderr, "cannot reach") || strings.Contains(stdout+stderr, "wrong") {
			t.Fatalf("%s: exit %d, stderr %q", redisrun.Redact(url), code, stderr)
		}
	}
}

// TestRedisTLS: a rediss:// server whose certificate ratelab cannot check
// fails as a TLS failure; --redis-ca or --redis-insecure make it work; the
// TLS flags on a redis:// URL are bad input.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	files := redistest.TLSFiles(t)
	s := startRedis(t, redisrun.Options{TLS: &files})
	url := "rediss://" + s.TLSAddr
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--redis", url}, exitError, "TLS with Redis at " + s.TLSAddr + " failed"},
		{[]string{"--redis", url, "--redis-ca", files.CAFile}, exitOK, "race on Redis " + s.Version + " at " + s.TLSAddr},
		{[]string{"--redis", url, "--redis-insecure"}, exitOK, "race on Redis"},
		{[]string{"--redis", "redis://" + s.Addr, "--redis-ca", files.CAFile}, exitUsage, `--redis-ca needs a rediss:// --redis`},
		{[]string{"--redis-insecure"}, exitUsage, "--redis-insecure needs a rediss:// --redis (or REDIS_URL)"},
		{[]string{"--redis", url, "--redis-cert", files.CertFile}, exitUsage, "--redis-cert needs --redis-key"},
		{[]string{"--redis", url, "--redis-ca", "/nonexistent.pem"}, exitUsage, "--redis-ca: open /nonexistent.pem"},
	} {
		code, _, stderr := ratelab(t, append([]string{"race", "--trials", "1", "--limiters", "lua"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
	}
}

// TestArgumentsAndFlagsRefused: an unknown subcommand anywhere exits 2,
// and so do flags that need another flag, or a bad upstream, before
// anything starts.
func TestArgumentsAndFlagsRefused(t *testing.T) {
	c := redistest.Client(t, srv)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "bogus"}, `unknown command "bogus" for "ratelab report"`},
		{[]string{"completion", "tcsh"}, `unknown command "tcsh" for "ratelab completion"`},
		{[]string{"bench", "tcp", "x"}, `unknown command "tcp" for "ratelab bench"`},
		{[]string{"edge", "--upstream", "ftp://x", "--redis", srv.URL()}, `--upstream "ftp://x": want an http:// or https:// URL, or builtin`},
		{[]string{"edge", "--upstream", "builtin", "--limit", "0/1s", "--redis", srv.URL()}, `--limit "0/1s": limit must be at least 1 (got 0)`},
		{[]string{"race", "--script-args", "{limit}", "--redis", srv.URL()}, "--script-args needs --script"},
		{[]string{"compare", "--script-name", "x", "--redis", srv.URL()}, "--script-name needs --script"},
		{[]string{"bench", "http", "http://127.0.0.1:1/", "--expect-limit", "0/1s"}, `--expect-limit "0/1s": limit must be at least 1 (got 0)`},
		{[]string{"compare", "--cluster", "--cluster-local"}, "--cluster-local starts its own cluster: --cluster names one of yours"},
		{[]string{"compare", "--algorithms", "leaky-bucket", "--redis", srv.URL()},
			`--algorithms: unknown algorithm "leaky-bucket" (the algorithms: fixed-window, sliding-log, sliding-counter, token-bucket, gcra)`},
		{[]string{"compare", "--algorithms", "gcra,,", "--workloads", "bogus", "--redis", srv.URL()}, `--workloads: unknown workload "bogus"`},
		{[]string{"compare", "--algorithms", ",", "--redis", srv.URL()}, `--algorithms names no algorithm`},
	} {
		before := connections(t, c)
		code, stdout, stderr := ratelab(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
		if after := connections(t, c); after != before {
			t.Errorf("%v: the server accepted connections: something was sent", tc.args)
		}
	}
}

// TestCompareWorkloadRules: rules that only some workloads need apply only
// when they run.
func TestCompareWorkloadRules(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--algorithms", "naive", "--workloads", "burst"}, exitUsage, "cannot run on the simulated clock of the burst workloads"},
		{[]string{"--algorithms", "naive,gcra", "--workloads", "throughput", "--duration", "200ms"}, exitOK, ""},
		{[]string{"--limit", "100000", "--workloads", "memory", "--algorithms", "gcra"}, exitOK, ""},
		{[]string{"--limit", "100000", "--workloads", "hammer"}, exitUsage, "--limit must be at most 10000 for the hammer workloads"},
	} {
		code, _, stderr := ratelab(t, append([]string{"compare", "--redis", srv.URL()}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}
