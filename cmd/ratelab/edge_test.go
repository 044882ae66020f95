package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// TestEdgeOpenRestyWithoutNginx: with no nginx on PATH, ratelab edge
// --engine openresty is refused with exit 2 naming the flag, and sends
// nothing to Redis.
func TestEdgeOpenRestyWithoutNginx(t *testing.T) {
	c := redistest.Client(t, srv)
	t.Setenv("PATH", t.TempDir())
	before := connections(t, c)
	code, _, stderr := ratelab(t, "edge", "--redis", srv.URL(), "--listen", "127.0.0.1:0", "--admin", "",
		"--upstream", "builtin", "--engine", "openresty")
	if code != exitUsage || !strings.Contains(stderr, "--engine openresty needs nginx") {
		t.Errorf("exit %d, stderr %q; want 2 and --engine naming the missing nginx", code, stderr)
	}
	if after := connections(t, c); after != before {
		t.Errorf("the server accepted connections (%s, then %s): something was sent", before, after)
	}
}

// TestEdgeLimitsRefused: mistakes in --limit and --rules exit 2 naming the
// flag (and for a file, its line and field), and send nothing to Redis.
func TestEdgeLimitsRefused(t *testing.T) {
	c := redistest.Client(t, srv)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	for path, src := range map[string]string{
		good: "domain: d\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
		bad:  "domain: d\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n",
	} {
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rules", good, "--limit", "5/1s"}, "--rules and --limit are two ways to give the limits: give one"},
		{[]string{"--rules", good, "--key-by", "ip"}, "--key-by is for --limit"},
		{[]string{"--rules", bad}, `bad.yaml:4: descriptors[0].rate_limit.unit: "fortnight" is not a unit`},
		{[]string{"--rules", filepath.Join(dir, "none.yaml")}, "--rules: open"},
		{[]string{"--limit", "5/1s", "--limit", "6/1s"}, "--limit 5/1s and 6/1s are two limits on one window (1s): keep one"},
		{[]string{"--limit", "5/1s", "--limit", "12/10s:leaky"}, `--limit "12/10s:leaky": "leaky" is not an algorithm`},
		{[]string{"--limit", "5/1s", "--limit", "off"}, "--limit off serves with no limiter: give it alone"},
		{[]string{"--limit", "5/1s", "--limit", "12/10s", "--on-redis-error", "local", "--nodes", "6"}, "--nodes must be at most each limit"},
		{[]string{"--limit", "5/1s", "--limit", "12/10s", "--engine", "openresty", "--trusted-proxies", "10.0.0.0/8"}, "--trusted-proxies is not in the openresty engine"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := connections(t, c)
			code, _, stderr := ratelab(t, append([]string{"edge", "--redis", srv.URL(), "--listen", "127.0.0.1:0", "--admin", "",
				"--upstream", "builtin"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
			if after := connections(t, c); after != before {
				t.Errorf("the server accepted connections: something was sent")
			}
		})
	}
}

// TestEdgeSeveralLimits: --limit given twice limits each consumer to both,
// and every response names both policies.
func TestEdgeSeveralLimits(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	e := serveEdge(t, "--redis", srv.URL(), "--limit", "3/1m", "--limit", "2/1h:gcra", "--key-by", "header:X-Consumer-Id")
	var codes []int
	consumer := redistest.Prefix(t)
	for range 3 {
		resp := e.getAs(t, consumer)
		codes = append(codes, resp.StatusCode)
		if got := resp.Header.Get("RateLimit-Policy"); got != `"per-1m";q=3;w=60, "per-1h";q=2;w=3600` {
			t.Errorf("RateLimit-Policy %q", got)
		}
	}
	if code := e.stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, e.log.String())
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("statuses %v, want [200 200 429]", codes)
	}
	if stderr := e.log.String(); !strings.Contains(stderr, "2 limits: per-1m 3 per 1m0s (sliding-log), per-1h 2 per 1h0m0s (gcra)") {
		t.Fatalf("the start-up log does not name the limits: %s", stderr)
	}
}

// TestEdgeRulesReload: with either engine, ratelab edge --rules serves the
// file and, once it is rewritten, the new version: the policy the
// responses name changes without a restart.
func TestEdgeRulesReload(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	for _, engine := range []string{"go", "openresty"} {
		t.Run(engine, func(t *testing.T) {
			if _, _, err := edge.FindNginx(); engine == "openresty" && err != nil {
				if redistest.InCI() {
					t.Fatalf("under CI: %v", err)
				}
				t.Skip(err)
			}
			file := filepath.Join(t.TempDir(), "rules.yaml")
			version := func(n int) string {
				return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limit: {name: per-consumer, unit: minute, requests_per_unit: %d}\n",
					redistest.Prefix(t), n)
			}
			if err := os.WriteFile(file, []byte(version(100)), 0o644); err != nil {
				t.Fatal(err)
			}
			e := serveEdge(t, "--redis", srv.URL(), "--engine", engine, "--rules", file)
			policy := func() string {
				req, _ := http.NewRequest(http.MethodGet, e.url(), nil)
				req.Header.Set("X-Consumer-Id", "alice")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return ""
				}
				resp.Body.Close()
				return resp.Header.Get("RateLimit-Policy")
			}
			waitPolicy := func(want string, rewrite func()) {
				t.Helper()
				testwait.Eventually(t, 15*time.Second, func() (bool, string) {
					got := policy()
					if got != want && rewrite != nil {
						rewrite()
					}
					return got == want, fmt.Sprintf("the policy is %q, want %q\n%s", got, want, e.log.String())
				})
			}
			waitPolicy(`"per-consumer";q=100;w=60`, nil)
			// Rewritten until seen: the watch starts a moment after the gateway serves.
			waitPolicy(`"per-consumer";q=200;w=60`, func() {
				if err := os.WriteFile(file, []byte(version(200)), 0o644); err != nil {
					t.Fatal(err)
				}
			})
			if code := e.stop(); code != exitOK {
				t.Fatalf("exit %d: %s", code, e.log.String())
			}
			if !strings.Contains(e.log.String(), "reloaded: version") {
				t.Fatalf("the reload is not logged:\n%s", e.log.String())
			}
		})
	}
}

// TestEdgeOpenRestyAnyAlgorithm: the nginx engine runs a lone limit of any
// algorithm (as a rule), with the headers of the Go gateway's lone limit.
func TestEdgeOpenRestyAnyAlgorithm(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	if _, _, err := edge.FindNginx(); err != nil {
		if redistest.InCI() {
			t.Fatalf("under CI: %v", err)
		}
		t.Skip(err)
	}
	e := serveEdge(t, "--redis", srv.URL(), "--engine", "openresty", "--limit", "2/1m", "--algorithm", "gcra", "--key-by", "header:X-Consumer-Id")
	consumer := redistest.Prefix(t)
	send := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, e.url(), nil)
		req.Header.Set("X-Consumer-Id", consumer)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	var codes []int
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		resp, err := send()
		if err != nil {
			return false, "nginx does not answer: " + err.Error() + "\n" + e.log.String()
		}
		codes = append(codes, resp.StatusCode)
		if got := resp.Header.Get("RateLimit-Policy"); got != `"default";q=2;w=60` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		return true, ""
	})
	for range 2 {
		resp, err := send()
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.StatusCode)
	}
	if code := e.stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, e.log.String())
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("statuses %v, want [200 200 429]\n%s", codes, e.log.String())
	}
	if !strings.Contains(e.log.String(), "default 2 per 1m0s (gcra)") {
		t.Fatalf("the start-up log does not name the limit:\n%s", e.log.String())
	}
}

// TestEdgeBatched: with --redis-batch, concurrent requests of one consumer
// through one limit (a Scripted limiter) or two (the Decider) are admitted
// exactly up to the limit.
func TestEdgeBatched(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits []string
	}{
		{"one limit", []string{"--limit", "10/1h"}},
		{"two limits", []string{"--limit", "10/1h", "--limit", "20/2h:gcra"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.Client(t, srv)
			e := serveEdge(t, append([]string{"--redis", srv.URL(), "--redis-batch", "16", "--key-by", "header:X-Consumer-Id"}, tc.limits...)...)
			get := func(consumer string) (int, error) {
				req, _ := http.NewRequest(http.MethodGet, e.url(), nil)
				req.Header.Set("X-Consumer-Id", consumer)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			}
			prefix := redistest.Prefix(t)
			const requests = 40
			statuses := make(chan int, requests)
			var wg sync.WaitGroup
			for range requests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					code, err := get(prefix + "consumer")
					if err != nil {
						t.Error(err)
					}
					statuses <- code
				}()
			}
			wg.Wait()
			close(statuses)
			count := map[int]int{}
			for code := range statuses {
				count[code]++
			}
			if count[http.StatusOK] != 10 || count[http.StatusTooManyRequests] != requests-10 {
				t.Errorf("statuses %v, want 10 × 200 and %d × 429", count, requests-10)
			}
			if code := e.stop(); code != exitOK {
				t.Fatalf("exit %d: %s", code, e.log.String())
			}
		})
	}
}
