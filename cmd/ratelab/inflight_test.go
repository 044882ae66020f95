package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// TestEdgeInFlight: ratelab edge --in-flight 1 --upstream-delay 1h, with no
// --limit: a request held by the built-in upstream takes the one slot, the
// next is refused 429 as concurrent-requests; the held client goes away, its
// hold ends, and its slot is released.
func TestEdgeInFlight(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	adminAddr := freeAddr(t)
	e := serveEdge(t, "--redis", srv.URL(), "--admin", adminAddr, "--in-flight", "1", "--upstream-delay", "1h",
		"--key-by", "header:X-Consumer-Id")
	consumer := redistest.Prefix(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url(), nil)
	req.Header.Set("X-Consumer-Id", consumer)
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	admin := func(path string) string {
		resp, err := http.Get("http://" + adminAddr + path)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	testwait.Eventually(t, 30*time.Second, func() (bool, string) {
		var f struct{ Total int64 }
		_ = json.Unmarshal([]byte(admin("/__ratelab/forwarded")), &f)
		return f.Total == 1, "the held request at the upstream"
	})
	resp := e.getAs(t, consumer)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"in-flight";q=1;qu="concurrent-requests"`) {
		t.Fatalf("a second request in flight of 1: %d, policy %q; want 429 as concurrent-requests", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	cancel()
	<-gone
	testwait.Eventually(t, 30*time.Second, func() (bool, string) {
		m := admin("/metrics")
		return strings.Contains(m, `ratelab_edge_in_flight_releases_total{result="released"} 1`), "the release of the request whose client went away"
	})
}

// TestBenchExpectRulesRefusesInFlight: an audit by a rules file with an
// in-flight limit is refused (exit 2, nothing sent): judged as a rate, it
// would accuse a gateway of what the limit never promised.
func TestBenchExpectRulesRefusesInFlight(t *testing.T) {
	file := t.TempDir() + "/rules.yaml"
	src := "domain: api\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limit: {name: conc, in_flight: 5}\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := ratelab(t, "bench", "http", "http://127.0.0.1:1/", "--expect-rules", file, "--duration", "1s")
	if code != exitUsage || !strings.Contains(stderr, `--expect-rules: limit "conc" is an in-flight limit`) {
		t.Fatalf("exit %d, stderr %q; want 2 naming the in-flight limit", code, stderr)
	}
}
