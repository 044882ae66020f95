package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
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
		{[]string{"--limit", "5/1s", "--limit", "12/10s", "--on-redis-error", "local", "--nodes", "6"}, "--nodes must be at most every limit"},
		{[]string{"--limit", "5/1s", "--limit", "12/10s", "--engine", "openresty"}, "the openresty engine"},
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
	ctx, cancel := context.WithCancel(context.Background())
	addr := freeAddr(t)
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"edge", "--redis", srv.URL(), "--listen", addr, "--admin", "", "--upstream", "builtin", "--redis-timeout", "5s",
			"--limit", "3/1m", "--limit", "2/1h:gcra", "--key-by", "header:X-Consumer-Id"}, io.Discard, &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	var codes []int
	consumer := redistest.Prefix(t)
	for len(codes) < 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Header.Set("X-Consumer-Id", consumer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("edge not serving after 10s: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if got := resp.Header.Get("RateLimit-Policy"); got != `"per-1m";q=3;w=60, "per-1h";q=2;w=3600` {
			t.Errorf("RateLimit-Policy %q", got)
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("statuses %v, want [200 200 429]", codes)
	}
	if !strings.Contains(stderr.String(), "2 limits: per-1m 3 per 1m0s (sliding-log), per-1h 2 per 1h0m0s (gcra)") {
		t.Fatalf("the start-up log does not name the limits: %s", stderr.String())
	}
}
