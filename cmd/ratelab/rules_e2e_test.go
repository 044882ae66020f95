package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// The five algorithms a rules file's limits can use.
var fiveAlgorithms = []string{"fixed-window", "sliding-log", "sliding-counter", "token-bucket", "gcra"}

// planRules renders the rules of issue 18's worked example, every limit of
// algorithm: per consumer (X-Consumer-Id) 5 per 1 s and 12 per 10 s, a gold
// plan (X-Plan: gold) with ten times both, and 2 per 1 s on /search. Without
// per10s, the 12 per 10 s is left out (and the gold one replaces only the
// per-second one).
func planRules(domain, algorithm string, per10s bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %q\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limits:\n", domain)
	fmt.Fprintf(&b, "      - {name: per-second, unit: second, requests_per_unit: 5, algorithm: %s}\n", algorithm)
	if per10s {
		fmt.Fprintf(&b, "      - {name: per-10s, window: 10s, requests_per_unit: 12, algorithm: %s}\n", algorithm)
	}
	fmt.Fprintf(&b, "    descriptors:\n      - key: path\n        value: /search\n")
	fmt.Fprintf(&b, "        rate_limit: {name: search, unit: second, requests_per_unit: 2, algorithm: %s}\n", algorithm)
	fmt.Fprintf(&b, "  - key: header:X-Plan\n    value: gold\n    descriptors:\n      - key: header:X-Consumer-Id\n        rate_limits:\n")
	fmt.Fprintf(&b, "          - {name: gold-per-second, unit: second, requests_per_unit: 50, replaces: [{name: per-second}], algorithm: %s}\n", algorithm)
	if per10s {
		fmt.Fprintf(&b, "          - {name: gold-per-10s, window: 10s, requests_per_unit: 120, replaces: [{name: per-10s}], algorithm: %s}\n", algorithm)
	} else {
		fmt.Fprintf(&b, "          - {name: gold-per-10s, window: 10s, requests_per_unit: 120, algorithm: %s}\n", algorithm)
	}
	return b.String()
}

// planAudit is the audit of a gateway by the plan rules in file: four
// consumers (consumer-0 gold, the others free), a quarter of the requests
// to /search, 50 a second per consumer (ten times a free consumer's
// limit) for 4 s: long enough that each consumer meets its 12 (or 120)
// per 10 s and goes on being denied, so that what was admitted decides
// every verdict, not timing.
func planAudit(url, file string) []string {
	return []string{"bench", "http", url, "--rate", "200", "--duration", "4s", "--consumers", "4",
		"--expect-rules", file, "--path", "/search:1", "--path", "/items:3", "--consumer-values", "X-Plan: gold:1,free:3",
		"--fail-on-leak", "-o", "json"}
}

// needNginx skips an openresty case where nginx with lua is missing, and
// fails it under CI.
func needNginx(t *testing.T, engine string) {
	t.Helper()
	if _, _, err := edge.FindNginx(); engine == "openresty" && err != nil {
		if redistest.InCI() {
			t.Fatalf("under CI: %v", err)
		}
		t.Skip(err)
	}
}

// serveRules runs ratelab edge --rules file on engine until the test ends,
// with a Redis timeout of seconds and failing closed, so that no request is
// admitted without Redis's word. It returns the gateway's URL once it
// answers.
func serveRules(t *testing.T, engine, file string) string {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncWriter
	go func() {
		done <- run(ctx, []string{"edge", "--redis", srv.URL(), "--listen", addr, "--admin", "", "--upstream", "builtin",
			"--redis-timeout", "5s", "--on-redis-error", "closed", "--engine", engine, "--rules", file}, io.Discard, &stderr)
	}()
	stop := sync.OnceValue(func() int { cancel(); return <-done })
	t.Cleanup(func() {
		if code := stop(); code != exitOK {
			t.Errorf("edge exit %d: %s", code, stderr.String())
		}
	})
	url := "http://" + addr + "/"
	// A request with no X-Consumer-Id meets no limit: it asks nothing of
	// the counters the audit judges.
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, "edge does not answer: " + err.Error() + "\n" + stderr.String()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("edge answers %d\n%s", resp.StatusCode, stderr.String())
	})
	return url
}

// TestRulesGatewayAudited: ratelab edge serving the plan rules, with each
// of the five algorithms in its limits and on both engines, passes the
// audit by the same file (exit 0): every limit held, none with a wrong
// header. The audit never accuses a correct gateway.
func TestRulesGatewayAudited(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	for _, engine := range []string{"go", "openresty"} {
		for _, algorithm := range fiveAlgorithms {
			t.Run(engine+"/"+algorithm, func(t *testing.T) {
				needNginx(t, engine)
				t.Parallel()
				file := writeRules(t, "rules.yaml", planRules(redistest.Prefix(t), algorithm, true))
				url := serveRules(t, engine, file)
				code, stdout, stderr := ratelab(t, planAudit(url, file)...)
				var res bench.Result
				decodeJSON(t, stdout, &res)
				if res.Audit == nil || len(res.Audit.Limits) != 5 {
					t.Fatalf("exit %d, stderr %q, audit %+v", code, stderr, res.Audit)
				}
				for _, l := range res.Audit.Limits {
					if l.Verdict != bench.Held || l.Headers.Checked == 0 || l.Headers.Violations != 0 {
						t.Errorf("%s: %s %q, %d of %d responses with wrong headers (%s)", l.ID, l.Verdict, l.Reasons,
							l.Headers.Violations, l.Headers.Checked, l.Headers.Example)
					}
				}
				if code != exitOK {
					t.Fatalf("exit %d, stderr %q", code, stderr)
				}
			})
		}
	}
}
