package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/rules"
)

var srv *redisrun.Server

func TestMain(m *testing.M) {
	// The test binary runs ratelab itself when a test asks for a process.
	if os.Getenv("RATELAB_TEST_MAIN") == "1" {
		main()
	}
	os.Exit(redistest.Main(m, &srv))
}

// ratelab runs one command line in-process, with no REDIS_URL whatever
// the environment, and returns its exit code and output.
func ratelab(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runEnv(context.Background(), args, &stdout, &stderr, noRedisURL)
	return code, stdout.String(), stderr.String()
}

// noRedisURL is the environment with REDIS_URL unset.
func noRedisURL(name string) string {
	if name == "REDIS_URL" {
		return ""
	}
	return os.Getenv(name)
}

// connections reads how many connections the server has accepted so far.
func connections(t *testing.T, c *redis.Client) string {
	t.Helper()
	info := c.Info(context.Background(), "stats").Val()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			return v
		}
	}
	t.Fatal("no total_connections_received in INFO stats")
	return ""
}

// decodeJSON parses out into v, failing the test when it is not JSON.
func decodeJSON(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
}

// field is m[key] as a T, failing the test when it is missing or not a T.
func jsonField[T any](t *testing.T, m map[string]any, key string) T {
	t.Helper()
	v, ok := m[key].(T)
	if !ok {
		var want T
		t.Fatalf("field %q is %T (%v), want %T", key, m[key], m[key], want)
	}
	return v
}

func TestBadInputExitsTwoAndSendsNothing(t *testing.T) {
	c := redistest.Client(t, srv)
	url := "--redis=" + srv.URL()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"race", "--concurrency", "0"}, "--concurrency must be between 1 and 10000 (got 0)"},
		{[]string{"race", "--limit", "0"}, "--limit must be at least 1 (got 0)"},
		{[]string{"race", "--window", "-1s"}, "--window must be positive (got -1s)"},
		{[]string{"race", "--window", "1500us"}, "--window must be a whole number of milliseconds"},
		{[]string{"race", "--trials", "0"}, "--trials must be between 1 and 100000 (got 0)"},
		{[]string{"race", "--requests-per-worker", "0"}, "--requests-per-worker must be between 1"},
		{[]string{"race", "--limiters", "naive,bogus"}, `--limiters: unknown limiter "bogus"`},
		{[]string{"race", "--clock", "wall"}, `--clock: unknown clock "wall"`},
		{[]string{"race", "--output", "yaml"}, `--output: unknown output "yaml"`},
		{[]string{"race", "--watch-retries", "-1"}, "--watch-retries must be at least 1, or 0 for the default of 100 (got -1)"},
		{[]string{"race", "--concurrency", "many"}, `invalid argument "many" for "--concurrency`},
		{[]string{"race", "--nope"}, "unknown flag: --nope"},
		{[]string{"race", "extra"}, `ratelab race takes no arguments (got "extra")`},
		{[]string{"stampede"}, `unknown command "stampede"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := connections(t, c)
			code, stdout, stderr := ratelab(t, append(tc.args, url)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not say %q", stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("printed a report: %q", stdout)
			}
			if after := connections(t, c); after != before {
				t.Errorf("the server accepted connections (%s, then %s): something was sent", before, after)
			}
		})
	}
	t.Run("bad url", func(t *testing.T) {
		code, _, stderr := ratelab(t, "race", "--redis", "http://127.0.0.1:1")
		if code != exitUsage || !strings.Contains(stderr, `--redis "http://127.0.0.1:1"`) {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("an address for a URL", func(t *testing.T) {
		code, _, stderr := ratelab(t, "race", "--redis", "127.0.0.1:6379")
		if code != exitUsage || !strings.Contains(stderr, `--redis "127.0.0.1:6379": want a URL: redis://127.0.0.1:6379`) {
			t.Fatalf("exit %d, stderr %q; want exit 2 and the URL it meant", code, stderr)
		}
	})
	t.Run("an address for REDIS_URL", func(t *testing.T) {
		var stderr bytes.Buffer
		env := func(name string) string { return map[string]string{"REDIS_URL": "localhost:6379"}[name] }
		code := runEnv(context.Background(), []string{"compare"}, io.Discard, &stderr, env)
		if code != exitUsage || !strings.Contains(stderr.String(), `REDIS_URL "localhost:6379": want a URL: redis://localhost:6379`) {
			t.Fatalf("exit %d, stderr %q; want exit 2 naming REDIS_URL and the URL it meant", code, stderr.String())
		}
	})
	t.Run("bad REDIS_URL", func(t *testing.T) {
		var stderr bytes.Buffer
		env := func(name string) string { return map[string]string{"REDIS_URL": "http://u:secret@127.0.0.1:1"}[name] }
		code := runEnv(context.Background(), []string{"race"}, io.Discard, &stderr, env)
		if code != exitUsage || !strings.Contains(stderr.String(), `REDIS_URL "http://…@127.0.0.1:1"`) {
			t.Fatalf("exit %d, stderr %q; want exit 2 naming REDIS_URL without its password", code, stderr.String())
		}
	})
}

// TestUnreachableRedisExitsOneOnTheRefusal: a port nobody listens on ends
// the run with exit 1 naming the address, and the reason is the refusal
// itself: ratelab gave up on it, not after a timeout or a retry that failed
// otherwise.
func TestUnreachableRedisExitsOneOnTheRefusal(t *testing.T) {
	t.Parallel()
	code, _, stderr := ratelab(t, "race", "--redis", "redis://127.0.0.1:1")
	if code != exitError || !strings.Contains(stderr, "cannot reach Redis at 127.0.0.1:1: ") || !strings.HasSuffix(strings.TrimSpace(stderr), "connection refused") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the address and the refusal", code, stderr)
	}
}

func TestRaceJSON(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	code, stdout, stderr := ratelab(t, "race", "--redis", srv.URL(), "--trials", "3", "--output", "json",
		"--limiters", "naive,lua")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep map[string]any
	decodeJSON(t, stdout, &rep)
	if rep["command"] != "race" {
		t.Errorf("command = %v", rep["command"])
	}
	redis := jsonField[map[string]any](t, rep, "redis")
	if redis["mode"] != "external" || redis["version"] == "" {
		t.Errorf("redis = %v", redis)
	}
	cfg := jsonField[map[string]any](t, rep, "config")
	for k, want := range map[string]float64{"concurrency": 100, "limit": 5, "window_ms": 10000, "trials": 3, "requests_per_worker": 1} {
		if cfg[k] != want {
			t.Errorf("config.%s = %v, want %v", k, cfg[k], want)
		}
	}
	results := jsonField[[]any](t, rep, "results")
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	fields := []string{"limiter", "atomic", "trials", "requests", "admitted", "expected_admitted", "over_admitted",
		"under_admitted", "leaked_trials", "worst_trial_admitted", "worst_trial_expected", "errors", "retries_exhausted",
		"round_trips", "state_verified", "release_spread_us", "latency_us", "guarantee", "guarantee_rule", "clock"}
	for _, r := range results {
		r, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("a result is %T, want an object", r)
		}
		for _, f := range fields {
			if _, ok := r[f]; !ok {
				t.Errorf("%v: no field %q", r["limiter"], f)
			}
		}
		lat := jsonField[map[string]any](t, r, "latency_us")
		for _, f := range []string{"p50", "p95", "p99", "max"} {
			if _, ok := lat[f]; !ok {
				t.Errorf("%v: no latency_us.%s", r["limiter"], f)
			}
		}
		for _, tr := range jsonField[[]any](t, r, "trial_results") {
			tr, ok := tr.(map[string]any)
			if !ok {
				t.Fatalf("a trial is %T, want an object", tr)
			}
			for _, f := range []string{"bound", "minimum", "expected", "clock_from_ms", "clock_to_ms", "span_us"} {
				if _, ok := tr[f].(float64); !ok {
					t.Errorf("%v: trial field %q is %v", r["limiter"], f, tr[f])
				}
			}
		}
		switch r["limiter"] {
		case "lua":
			if r["admitted"] != 15.0 || r["state_verified"] != true || r["guarantee"] != "sliding-window" || r["clock"] != "caller" {
				t.Errorf("lua admitted %v (state %v) judged by %v on the %v clock, want 15, true, sliding-window, caller",
					r["admitted"], r["state_verified"], r["guarantee"], r["clock"])
			}
		case "naive":
			if r["guarantee"] != "expiry-windows" || r["clock"] != "redis" || r["guarantee_rule"] != "at most 5 per 10s key lifetime" {
				t.Errorf("naive judged by %v (%v) on the %v clock", r["guarantee"], r["guarantee_rule"], r["clock"])
			}
		}
	}
}

func TestFailOnLeak(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	for _, tc := range []struct {
		limiters string
		code     int
	}{
		{"lua-shared-member", exitThreshold}, // admits every request, every trial
		{"lua,watch,multi", exitOK},
	} {
		t.Run(tc.limiters, func(t *testing.T) {
			code, stdout, stderr := ratelab(t, "race", "--redis", srv.URL(), "--trials", "2", "--concurrency", "20",
				"--limiters", tc.limiters, "--fail-on-leak", "--output", "markdown")
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, stderr)
			}
			if !strings.Contains(stdout, "| limiter |") {
				t.Errorf("no report printed before the exit:\n%s", stdout)
			}
			if tc.code == exitThreshold && !strings.Contains(stderr, "--fail-on-leak: lua-shared-member over-admitted") {
				t.Errorf("stderr %q does not name the leak", stderr)
			}
		})
	}
}

// TestPrivateServer: with no --redis, ratelab starts its own redis-server
// and names it in the report.
func TestPrivateServer(t *testing.T) {
	t.Parallel()
	if srv == nil {
		t.Skip("no redis-server on PATH")
	}
	code, stdout, stderr := ratelab(t, "race", "--trials", "1", "--concurrency", "10", "--output", "json", "--limiters", "lua")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Redis struct{ Mode, Version, Addr string }
	}
	decodeJSON(t, stdout, &rep)
	if rep.Redis.Mode != "ephemeral" || rep.Redis.Version == "" || !strings.HasPrefix(rep.Redis.Addr, "127.0.0.1:") {
		t.Fatalf("redis = %+v, want an ephemeral server on loopback", rep.Redis)
	}
}

// TestEmbeddedFallback: with no redis-server on PATH, ratelab says it uses
// the embedded server and still reproduces the leak.
func TestEmbeddedFallback(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	code, stdout, stderr := ratelab(t, "race", "--trials", "5", "--limiters", "lua-shared-member,lua", "--output", "markdown")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "embedded in-process Redis") || !strings.Contains(stdout, "embedded in-process Redis (miniredis)") {
		t.Fatalf("no embedded banner:\nstderr %s\nstdout %s", stderr, stdout)
	}
	if !strings.Contains(stdout, "lua-shared-member leaked in 5 of 5 trials") {
		t.Fatalf("the embedded server did not reproduce the leak:\n%s", stdout)
	}
}

func TestVersionAndCompletion(t *testing.T) {
	t.Parallel()
	code, stdout, _ := ratelab(t, "version")
	if code != exitOK || !strings.HasPrefix(stdout, "ratelab ") {
		t.Fatalf("version: exit %d, %q", code, stdout)
	}
	code, stdout, _ = ratelab(t, "completion", "bash")
	if code != exitOK || !strings.Contains(stdout, "bash completion") {
		t.Fatalf("completion bash: exit %d", code)
	}
	code, stdout, _ = ratelab(t, "__complete", "race", "--limiters", "")
	if code != exitOK || !slices.Contains(strings.Split(stdout, "\n"), "lua-count-denied") {
		t.Fatalf("completion of --limiters: %q", stdout)
	}
}

// TestInterruptStopsPrivateServer: cancelling the context, as Ctrl-C does,
// ends the run with an error and stops the redis-server ratelab started.
func TestInterruptStopsPrivateServer(t *testing.T) {
	if srv == nil {
		t.Skip("no redis-server on PATH")
	}
	t.Setenv("REDIS_URL", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"race", "--trials", "100000", "--limiters", "watch"}, io.Discard, &stderr)
	}()
	// Interrupt once ratelab's own server is running.
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		return len(privateServers(t)) > 0, "ratelab started no redis-server"
	})
	cancel()
	select {
	case code := <-done:
		if code != exitError || !strings.Contains(stderr.String(), "interrupted") {
			t.Fatalf("exit %d, stderr %q; want 1 and 'interrupted'", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15s after the interrupt")
	}
	if left := privateServers(t); len(left) != 0 {
		t.Fatalf("redis-server still running after the interrupt: %v (the package's own is %s)", left, srv.Addr)
	}
}

// privateServers lists the redis-server processes this test process started,
// other than the package's own.
func privateServers(t *testing.T) []string {
	t.Helper()
	_, port, _ := strings.Cut(srv.Addr, ":")
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var found []string
	for _, p := range procs {
		stat, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		_, rest, ok := strings.Cut(string(stat), ") ")
		fields := strings.Fields(rest)
		if !ok || len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
		// redis-server rewrites its command line to "redis-server host:port".
		line := strings.Join(strings.Fields(strings.ReplaceAll(string(cmdline), "\x00", " ")), " ")
		if strings.Contains(line, "redis-server") && !strings.HasSuffix(line, ":"+port) {
			found = append(found, line)
		}
	}
	return found
}

// TestRaceUserScript: a script whose member is the millisecond timestamp is
// caught; ratelab's own sliding log, raced as a user script, holds.
func TestRaceUserScript(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	code, stdout, stderr := ratelab(t, "race", "--redis", srv.URL(), "--trials", "3", "--fail-on-leak", "--output", "json",
		"--script", "testdata/timestamp_member.lua", "--script-args", "{limit} {window_ms} {now_ms} {now_ms}")
	if code != exitThreshold || !strings.Contains(stderr, "script:timestamp_member over-admitted") {
		t.Fatalf("racy script: exit %d, stderr %q; want exit 3 naming it", code, stderr)
	}
	var rep struct{ Results []struct{ Limiter string } }
	decodeJSON(t, stdout, &rep)
	if len(rep.Results) != 2 || rep.Results[0].Limiter != "lua" {
		t.Fatalf("want lua beside the script: %s", stdout)
	}
	code, _, stderr = ratelab(t, "race", "--redis", srv.URL(), "--trials", "3", "--fail-on-leak", "--output", "json",
		"--script", "../../algorithms/slidinglog.lua", "--script-name", "mine")
	if code != exitOK {
		t.Fatalf("sliding log as a user script: exit %d: %s", code, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--script", "testdata/nope.lua"}, "--script: open testdata/nope.lua"},
		{[]string{"--script", "testdata/timestamp_member.lua", "--script-args", "{limit} {bogus}"}, "unknown placeholder {bogus}"},
		{[]string{"--script-name", "x"}, "--script-name needs --script"},
		{[]string{"--script", "testdata/timestamp_member.lua", "--script-name", "lua"}, `--script-name "lua" is a built-in`},
	} {
		code, _, stderr := ratelab(t, append([]string{"race", "--redis", srv.URL()}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestCompareBadInput(t *testing.T) {
	c := redistest.Client(t, srv)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "0"}, "--limit must be at least 1 (got 0)"},
		{[]string{"--window", "0s"}, "--window must be positive"},
		{[]string{"--algorithms", "naive"}, "--algorithms: naive keeps its window in the key's expiry"},
		{[]string{"--algorithms", "bogus"}, `--algorithms: unknown algorithm "bogus" (the algorithms: fixed-window, sliding-log, sliding-counter, token-bucket, gcra)`},
		{[]string{"--workloads", "burst,soak"}, `--workloads: unknown workload "soak"`},
		{[]string{"--connections", "0"}, "--connections must be at least 1 (got 0)"},
		{[]string{"--duration", "-1s"}, "--duration must be positive (got -1s)"},
		{[]string{"--redis-batch", "0"}, "--redis-batch must be at least 1 (got 0)"},
		{[]string{"--redis-batch", "1025"}, "--redis-batch must be between 1 and 1024 (got 1025)"},
		{[]string{"--redis-batch", "16", "--workloads", "burst"}, "--redis-batch batches the throughput workload, which is not among --workloads"},
		{[]string{"--cluster-local"}, "--cluster-local starts its own cluster: it cannot be combined with --redis"},
		{[]string{"--limit", "20000"}, "--limit must be at most 10000 for the burst, boundary, hammer and accuracy workloads (got 20000)"},
		{[]string{"--script", "testdata/timestamp_member.lua", "--script-args", "{limit} {window_ms}"},
			"--script-args: the burst, boundary, hammer, accuracy and memory workloads run scripts on a simulated caller clock"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := connections(t, c)
			code, stdout, stderr := ratelab(t, append([]string{"compare", "--redis", srv.URL()}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
			if after := connections(t, c); after != before {
				t.Errorf("the server accepted connections: something was sent")
			}
		})
	}
	for _, cmd := range []string{"compare", "race"} {
		code, _, stderr := ratelab(t, cmd, "--cluster")
		if code != exitUsage || !strings.Contains(stderr, "--cluster needs --redis") {
			t.Errorf("%s --cluster alone: exit %d, %q", cmd, code, stderr)
		}
	}
}

// TestCompareJSON checks the fields the JSON promises, on a short run.
func TestCompareJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	// A window long beside what the race detector on a loaded machine
	// takes to make a burst's decisions (the workloads run on a simulated
	// clock, so it costs no time).
	code, stdout, stderr := ratelab(t, "compare", "--redis", srv.URL(), "--limit", "10", "--window", "10s", "--duration", "200ms",
		"--keys", "100", "--connections", "4", "--accuracy-clients", "5", "--output", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep map[string]any
	decodeJSON(t, stdout, &rep)
	if rep["command"] != "compare" || rep["ping_ops_per_sec"] == nil {
		t.Errorf("command %v, ping_ops_per_sec %v", rep["command"], rep["ping_ops_per_sec"])
	}
	results := jsonField[[]any](t, rep, "results")
	if len(results) != 5 {
		t.Fatalf("%d results, want the 5 algorithms", len(results))
	}
	for _, r := range results {
		r, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("a result is %T, want an object", r)
		}
		for _, f := range []string{"algorithm", "exact", "keys_per_client", "round_trips", "burst_over_admitted",
			"boundary_max_in_window", "hammer_max_in_window", "hammer_recovery_ms", "false_allow_rate",
			"false_deny_rate", "bytes_per_client", "ops_per_sec", "latency_us", "recommendation"} {
			if v, ok := r[f]; !ok || v == nil {
				t.Errorf("%v: field %q missing or null", r["algorithm"], f)
			}
		}
		mem := jsonField[map[string]any](t, r, "bytes_per_client")
		for _, l := range []string{"10", "100", "1000", "10000"} {
			if _, ok := mem[l]; !ok {
				t.Errorf("%v: no bytes_per_client[%s]", r["algorithm"], l)
			}
		}
		lat := jsonField[map[string]any](t, r, "latency_us")
		if lat["p50"] == nil || lat["p99"] == nil {
			t.Errorf("%v: latency_us = %v", r["algorithm"], lat)
		}
	}
}

func TestSkewBadInput(t *testing.T) {
	c := redistest.Client(t, srv)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--algorithms", "naive"}, `--algorithms: "naive" is not one of fixed-window`},
		{[]string{"--algorithms", ","}, "--algorithms names no algorithm"},
		{[]string{"--clock", "wall"}, `--clock: unknown clock "wall"`},
		{[]string{"--skews", "1.5ms"}, "--skews: each offset must be a whole number of milliseconds"},
		{[]string{"--skews", "soon"}, `invalid argument "soon" for "--skews"`},
		{[]string{"--limit", "0"}, "--limit must be at least 1 (got 0)"},
		{[]string{"--window", "0s"}, "--window must be positive"},
		{[]string{"--clients", "0"}, "--clients must be at least 1 (got 0)"},
		{[]string{"--duration", "0s"}, "--duration must be between 1ms and 10m"},
		{[]string{"--load", "0"}, "--load must be above 0"},
		{[]string{"--connections", "0"}, "--connections must be between 1 and 10000"},
		{[]string{"--timeout", "0s"}, "--timeout must be between 1ms and 1m"},
		{[]string{"--clients", "100000", "--duration", "10m"}, "--clients: the stream would make about"},
		{[]string{"--output", "yaml"}, `--output: unknown output "yaml"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := connections(t, c)
			code, stdout, stderr := ratelab(t, append([]string{"skew", "--redis", srv.URL()}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
			if after := connections(t, c); after != before {
				t.Errorf("the server accepted connections: something was sent")
			}
		})
	}
}

// TestSkewJSON: a short run prints the rows the JSON promises, one per
// clock and skew level, and nothing over-admitted on Redis's clock.
func TestSkewJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	code, stdout, stderr := ratelab(t, "skew", "--redis", srv.URL(), "--algorithms", "sliding-log", "--skews", "0,500ms",
		"--clients", "3", "--duration", "1s", "--output", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep map[string]any
	decodeJSON(t, stdout, &rep)
	if rep["command"] != "skew" {
		t.Errorf("command = %v", rep["command"])
	}
	rows := jsonField[[]any](t, rep, "rows")
	if len(rows) != 2*4 {
		t.Fatalf("%d rows, want 2 clocks × 4 skew levels (0, 125, 250 and 500 ms)", len(rows))
	}
	for _, r := range rows {
		r, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("a row is %T, want an object", r)
		}
		for _, f := range []string{"algorithm", "clock", "max_skew_ms", "decisions", "over_admitted", "false_denied"} {
			if _, ok := r[f]; !ok {
				t.Errorf("row %v: no field %q", r, f)
			}
		}
		if r["clock"] == "redis" && r["over_admitted"] != 0.0 {
			t.Errorf("on Redis's clock: %v over-admitted", r["over_admitted"])
		}
		if r["algorithm"] != "sliding-log" || jsonField[float64](t, r, "decisions") < 1 {
			t.Errorf("row %v", r)
		}
	}
}

func TestEdgeBadInput(t *testing.T) {
	c := redistest.Client(t, srv)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "builtin", "--limit", "100"}, `--limit "100": want requests/window`},
		{[]string{"--upstream", "builtin", "--limit", "0/1m"}, "limit must be at least 1"},
		{[]string{"--upstream", "builtin", "--limit", "10/soon"}, `--limit "10/soon": the window "soon" is not a duration: a window such as 1s`},
		{[]string{"--upstream", "builtin", "--limit", "10/s"}, `--limit "10/s": the window "s" needs a number: a window such as 1s`},
		{[]string{"--upstream", "builtin", "--limit", "10/1s:burst=6"}, `--limit "10/1s:burst=6": burst is for token-bucket and gcra, and the algorithm is sliding-log`},
		{[]string{"--upstream", "builtin", "--limit", "10/1s:fixed-window:burst=6"}, `--limit "10/1s:fixed-window:burst=6": burst is for token-bucket and gcra: fixed-window has none`},
		{[]string{"--upstream", "builtin", "--limit", "10/1s:gcra:burst=0"}, `--limit "10/1s:gcra:burst=0": burst must be at least 1 (got 0)`},
		{[]string{"--upstream", "builtin", "--algorithm", "naive"}, `--algorithm "naive" is not an algorithm`},
		{[]string{"--upstream", "builtin", "--key-by", "cookie:x"}, `unknown key "cookie:x"`},
		{[]string{"--upstream", "builtin", "--trusted-proxies", "10.0.0.0/33"}, `trusted proxy "10.0.0.0/33"`},
		{[]string{"--upstream", "builtin", "--on-redis-error", "maybe"}, `--on-redis-error "maybe": want open, closed or local`},
		{[]string{"--upstream", "builtin", "--on-redis-error", "local", "--limit", "3/1s", "--nodes", "4"}, `--nodes must be at most each limit with local, whose share for each node is the limit over the nodes (got 4 nodes; limit "default" is 3/1s)`},
		{[]string{"--upstream", "builtin", "--nodes", "0"}, "--nodes must be between 1 and 10000 (got 0)"},
		{[]string{"--upstream", "builtin", "--breaker-failures", "-1"}, "--breaker-failures must be between 0"},
		{[]string{"--upstream", "builtin", "--engine", "openresty", "--on-redis-error", "local"}, "--on-redis-error local is not in the openresty engine"},
		{[]string{"--upstream", "builtin", "--redis-sentinel", "m@127.0.0.1:26379", "--redis", "redis://x:1"}, "--redis-sentinel finds the primary itself: it cannot be combined with --redis"},
		{[]string{"--upstream", "builtin", "--headers", "x"}, `--headers "x": want draft, legacy or both`},
		{[]string{"--upstream", "builtin", "--redis-timeout", "0s"}, "--redis-timeout must be between 1ms and 1m"},
		{[]string{}, "--upstream is required"},
		{[]string{"--upstream", "builtin", "--engine", "envoy"}, `--engine "envoy": want go or openresty`},
		{[]string{"--upstream", "builtin", "--engine", "openresty", "--shadow"}, "--shadow is not in the openresty engine"},
		{[]string{"--upstream", "builtin", "--redis-batch", "-1"}, "--redis-batch must be between 1 and 1024 (got -1)"},
		{[]string{"--upstream", "builtin", "--max-value-length", "-1"}, "--max-value-length must be between 1 and 1048576, or 0 for the default 4096 (got -1)"},
		{[]string{"--upstream", "builtin", "--engine", "openresty", "--redis-batch", "8"}, "--redis-batch is not in the openresty engine"},
		{[]string{"--upstream", "builtin", "--clock", "wall"}, `--clock: unknown clock "wall" (want caller or redis)`},
		{[]string{"--upstream", "builtin", "--in-flight", "-1"}, "--in-flight must be at least 1, or 0 for none (got -1)"},
		{[]string{"--upstream", "builtin", "--in-flight", "5", "--in-flight-lease", "0s"}, "--in-flight-lease must be positive (got 0s)"},
		{[]string{"--upstream", "builtin", "--in-flight-lease", "5s"}, "--in-flight-lease is for --in-flight"},
		{[]string{"--upstream", "builtin", "--upstream-delay", "-1s"}, "--upstream-delay must be between 0 and 1h (got -1s)"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--upstream-delay", "1s"}, "--upstream-delay is for --upstream builtin"},
		{[]string{"--upstream", "http://127.0.0.1:99999"}, `--upstream "http://127.0.0.1:99999": want an http:// or https:// URL`},
		{[]string{"--upstream", "builtin", "--listen", "127.0.0.1:180810"}, `--listen "127.0.0.1:180810": want host:port or :port, the port from 0`},
		{[]string{"--upstream", "builtin", "--admin", "127.0.0.1:-1"}, `--admin "127.0.0.1:-1": want host:port or :port`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := connections(t, c)
			code, _, stderr := ratelab(t, append([]string{"edge", "--redis", srv.URL(), "--listen", "127.0.0.1:0", "--admin", ""}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
			if after := connections(t, c); after != before {
				t.Errorf("the server accepted connections: something was sent")
			}
		})
	}
}

// TestEdgeServes: ratelab edge answers, limits, and stops on cancel.
func TestEdgeServes(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	e := serveEdge(t, "--redis", srv.URL(), "--limit", "2/1m", "--key-by", "header:X-Consumer-Id")
	var codes []int
	consumer := redistest.Prefix(t)
	for range 3 {
		resp := e.getAs(t, consumer)
		codes = append(codes, resp.StatusCode)
	}
	if code := e.stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, e.log.String())
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("statuses %v, want [200 200 429]", codes)
	}
	if !strings.Contains(e.log.String(), "on a Redis error: fail open") {
		t.Fatalf("the start-up log does not state the failure mode: %s", e.log.String())
	}
}

// TestEdgeClock: --clock reaches the script through both engines: no time
// argument on Redis's clock (the default), this host's time in ms with
// --clock caller.
func TestEdgeClock(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	for _, engine := range []string{"go", "openresty"} {
		for _, clock := range []string{"redis", "caller"} {
			t.Run(engine+"/"+clock, func(t *testing.T) {
				if _, _, err := edge.FindNginx(); engine == "openresty" && err != nil {
					if redistest.InCI() {
						t.Fatalf("under CI: %v", err)
					}
					t.Skip(err)
				}
				mon := redistest.NewMonitor(t, srv)
				args := []string{"--redis", srv.URL(), "--limit", "5/1m", "--key-by", "header:X-Consumer-Id", "--engine", engine}
				if clock != "redis" {
					args = append(args, "--clock", clock)
				}
				e := serveEdge(t, args...)
				defer func() {
					if t.Failed() {
						e.stop()
						t.Log(e.log.String())
					}
				}()
				consumer := redistest.Prefix(t)
				e.getAs(t, consumer)
				set, err := rules.Shorthand{Limits: []string{"5/1m"}, KeyBy: "header:X-Consumer-Id"}.Set()
				if err != nil {
					t.Fatal(err)
				}
				key := set.Match(rules.Request{Header: map[string][]string{"X-Consumer-Id": {consumer}}})[0].Key
				// decide.lua's: the key, then the mode and the time.
				call := mon.Find(t, 5*time.Second, func(a []string) bool {
					return (a[0] == "evalsha" || a[0] == "eval") && len(a) > 5 && a[3] == key && a[4] == "decide"
				})
				if code := e.stop(); code != exitOK {
					t.Fatalf("exit %d: %s", code, e.log.String())
				}
				sent := call[5]
				if ms, err := strconv.ParseInt(sent, 10, 64); clock == "caller" && (err != nil || time.Since(time.UnixMilli(ms)).Abs() > time.Minute) {
					t.Fatalf("--clock caller sent the time %q, want this host's in ms", sent)
				}
				if clock == "redis" && sent != "" {
					t.Fatalf("on Redis's clock the script was sent the time %q, want none", sent)
				}
				if want := map[string]string{"redis": "Redis's clock", "caller": "this host's clock"}[clock]; !strings.Contains(e.log.String(), want) {
					t.Errorf("the start-up log does not say %q: %s", want, e.log.String())
				}
			})
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestBenchHTTP(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	runs := []string{dir + "/a.json", dir + "/b.json"}
	for i, path := range runs {
		code, stdout, stderr := ratelab(t, "bench", "http", srv.URL, "--rate", "400", "--duration", "500ms", "--shard", fmt.Sprintf("%d/2", i), "--shared-consumers",
			"--output", "json", "--hgrm", dir+"/run.hgrm")
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"command", "target", "config", "requests", "duration_s", "throughput_rps", "status_counts",
			"errors", "error_kinds", "latency_us", "send_lag_us", "timeline", "started_unix_ms", "histograms"} {
			if _, ok := res[f]; !ok {
				t.Errorf("no field %q", f)
			}
		}
	}
	if b, err := os.ReadFile(dir + "/run.hgrm"); err != nil || !strings.Contains(string(b), "Percentile") {
		t.Fatalf("--hgrm wrote %q (%v)", b, err)
	}
	// Merged, the counts add up exactly.
	code, stdout, stderr := ratelab(t, "report", "merge", runs[0], runs[1], "--output", "json")
	if code != exitOK {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	var merged, a, b struct {
		Requests     int64
		StatusCounts map[string]int64 `json:"status_counts"`
	}
	for _, in := range []struct {
		path string
		into any
	}{{"", &merged}, {runs[0], &a}, {runs[1], &b}} {
		data := []byte(stdout)
		if in.path != "" {
			var err error
			if data, err = os.ReadFile(in.path); err != nil {
				t.Fatal(err)
			}
		}
		if err := json.Unmarshal(data, in.into); err != nil {
			t.Fatalf("%s: %v", in.path, err)
		}
	}
	if merged.Requests != a.Requests+b.Requests || merged.StatusCounts["503"] != a.StatusCounts["503"]+b.StatusCounts["503"] {
		t.Fatalf("merged %+v from %+v and %+v", merged, a, b)
	}
	// One request in ten fails: --max-error-rate 0.05 is crossed, after the report.
	code, stdout, stderr = ratelab(t, "bench", "http", srv.URL, "--rate", "200", "--duration", "300ms", "--max-error-rate", "0.05")
	if code != exitThreshold || !strings.Contains(stderr, "--max-error-rate") || !strings.Contains(stdout, "ratelab bench http") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "http"}, "bench http takes one URL"},
		{[]string{"bench", "http", "ftp://x"}, "want an http:// or https:// URL"},
		{[]string{"bench", "http", "http://127.0.0.1:70000/"}, `the port "70000" is not between 1 and 65535`},
		{[]string{"bench", "http", srv.URL, "--rate", "-5"}, "--rate must be between 0"},
		{[]string{"bench", "http", srv.URL, "-H", "nocolon"}, `--header "nocolon"`},
		{[]string{"bench", "http", srv.URL, "-H", "X-A: a\r\nX-B: 1"}, `--header X-A: "a\r\nX-B: 1" holds a line break`},
		{[]string{"bench", "http", srv.URL, "-X", "GET /x HTTP/1.1\r\n"}, `--method "GET /x HTTP/1.1\r\n" is not an HTTP method`},
		{[]string{"bench", "http", srv.URL, "--body", "@/nonexistent"}, "--body: open /nonexistent"},
		{[]string{"bench", "http", srv.URL, "--duration", "0s"}, "--duration or --requests must bound the run"},
		{[]string{"bench", "http", srv.URL, "--threads", "-1"}, "--threads must be between 0 (every core) and 1024 (got -1)"},
		{[]string{"bench", "http", srv.URL, "--expect-algorithm", "gcra"}, "--expect-algorithm needs --expect-limit"},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "5/1s", "--expect-algorithm", "naive"}, `--expect-algorithm "naive": want one of`},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "10/s"}, `--expect-limit "10/s": the window "s" needs a number: a window such as 1s`},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "10/1s:burst=6"}, `--expect-limit "10/1s:burst=6": a burst is for token-bucket and gcra, and it names no algorithm: name one, as in 10/1s:gcra:burst=6`},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "10/1s:burst=6", "--expect-algorithm", "sliding-log"}, `and --expect-algorithm is sliding-log`},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "10/1s:sliding-counter:burst=6"}, `burst is for token-bucket and gcra: sliding-counter has none`},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "10/1s:gcra:burst=0"}, `--expect-limit "10/1s:gcra:burst=0": burst must be at least 1 (got 0)`},
		{[]string{"bench", "http", srv.URL, "--connections", "0"}, "--connections must be at least 1 (got 0)"},
		{[]string{"bench", "http", srv.URL, "--interval", "1ms"}, "--interval must be at least 10ms"},
		{[]string{"bench", "http", srv.URL, "--start-at", "tomorrow"}, `--start-at "tomorrow": want an RFC 3339 time`},
		{[]string{"bench", "http", srv.URL, "--start-at", "next:2h"}, `--start-at "next:2h": D must be between 1s and 1h`},
		{[]string{"report", "merge", "a.json", "--clock-tolerance", "-1s"}, "--clock-tolerance must be between 0 and 1m"},
		{[]string{"report", "merge", "/nonexistent.json"}, "/nonexistent.json"},
	} {
		before := n.Load()
		code, _, stderr := ratelab(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
		if n.Load() != before {
			t.Errorf("%v: requests were sent", tc.args)
		}
	}
}

// TestBenchAudit: a server that admits twice what it advertises fails
// --fail-on-leak with exit 3; ratelab edge in front of redis-server passes.
func TestBenchAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	args := []string{"--rate", "40", "--duration", "2500ms", "--consumers", "2", "--expect-limit", "5/1s"}
	// One run judged alone, and at the same time two more at another such
	// server, as two load machines would, whose results are merged: one
	// audit over both, and the same verdict.
	var code int
	var stdout, stderr string
	var jsons [2]string
	var wg sync.WaitGroup
	alone := leakyServer(t, 5).URL
	wg.Go(func() {
		code, stdout, stderr = ratelab(t, append([]string{"bench", "http", alone, "--no-probes", "--fail-on-leak"}, args...)...)
	})
	shared := leakyServer(t, 5).URL
	for i := range jsons {
		wg.Go(func() {
			_, jsons[i], _ = ratelab(t, "bench", "http", shared, "--no-probes", "-o", "json", "--rate", "80", "--duration", "2500ms",
				"--consumers", "2", "--expect-limit", "5/1s", "--shard", fmt.Sprintf("%d/2", i), "--shared-consumers")
		})
	}
	wg.Wait()
	if code != exitThreshold || !strings.Contains(stderr, "over the 5 allowed") || !strings.Contains(stdout, "LEAKED") {
		t.Fatalf("leaky server: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	dir := t.TempDir()
	for i, name := range []string{"a", "b"} {
		if err := os.WriteFile(dir+"/"+name+".json", []byte(jsons[i]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr = ratelab(t, "report", "merge", dir+"/a.json", dir+"/b.json", "--fail-on-leak")
	if code != exitThreshold || !strings.Contains(stderr, "over the 5 allowed") || !strings.Contains(stdout, "LEAKED") {
		t.Fatalf("merged leaky runs: exit %d, stderr %q\n%s", code, stderr, stdout)
	}

	url := serveEdge(t, "--redis", srv.URL(), "--limit", "5/1s", "--key-by", "header:X-Consumer-Id").url()
	code, stdout, stderr = ratelab(t, append([]string{"bench", "http", url, "--fail-on-leak"}, args...)...)
	if code != exitOK || !strings.Contains(stdout, ": HELD: the worst consumer") || !strings.Contains(stdout, "Retry-After: honest") {
		t.Fatalf("ratelab edge: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
}

// TestUsageHintNamesTheCommand: bad input ends with the help of the
// command that refused it, not the root's.
func TestUsageHintNamesTheCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "http", "http://127.0.0.1:1/", "--rate", "-1"}, "Run 'ratelab bench http --help' for usage."},
		{[]string{"bench", "http", "--nope"}, "Run 'ratelab bench http --help' for usage."},
		{[]string{"race", "--limit", "0"}, "Run 'ratelab race --help' for usage."},
		{[]string{"compare", "--algorithms", "leaky-bucket"}, "Run 'ratelab compare --help' for usage."},
		{[]string{"report", "bogus"}, "Run 'ratelab report --help' for usage."},
		{[]string{"stampede"}, "Run 'ratelab --help' for usage."},
	} {
		code, _, stderr := ratelab(t, tc.args...)
		if code != exitUsage || !strings.HasSuffix(stderr, tc.want+"\n") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
