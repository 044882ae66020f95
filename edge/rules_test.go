package edge_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

// rulesSetup is a gateway deciding by a rules file.
type rulesSetup struct {
	src       string // the rules file's text
	file      string // the rules file, already written (src unused); empty: one of its own
	redis     string // the Redis address; the test package's server when empty
	onError   limiter.OnError
	nodes     int // with onError local: the nodes sharing each limit
	denyCache bool
	shadow    bool
	breaker   int // failures in a row that open the circuit
	log       *syncBuffer
	localDown bool // with onError local: the local limiter is stopped before the gateway serves
}

// startRules serves a gateway with the built-in upstream deciding by the
// rules in s.src, written to a file of its own (or in s.file); it returns
// the gateway and the file's path.
func startRules(t *testing.T, s rulesSetup) (*edge.Gateway, string) {
	t.Helper()
	file := s.file
	if file == "" {
		file = filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(file, []byte(s.src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var log *syncBuffer
	if s.log != nil {
		log = s.log
	} else {
		log = &syncBuffer{}
	}
	served, err := limiter.LoadRules(context.Background(), limiter.RulesConfig{Path: file, Options: []rules.Option{rules.ForGateway()},
		Log: log, Name: "ratelab edge"})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.redis
	if addr == "" {
		addr = srv.Addr
	}
	timeout := 5 * time.Second
	if s.onError != "" {
		timeout = 500 * time.Millisecond
	}
	c := client(t, addr, timeout)
	var local *limiter.LocalLimiter
	if s.onError == limiter.FailLocal {
		if local, err = limiter.NewLocalLimiter(s.nodes); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(local.Close)
		if s.localDown {
			local.Close()
		}
	}
	g, err := edge.NewGateway(edge.GatewayConfig{
		Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Upstream: "builtin",
		Limit: edge.Config{Rules: served,
			KeyBy: edge.KeyBy{Header: "X-Consumer-Id"}, Shadow: s.shadow,
			Config: limiter.Config{Decider: algorithms.NewDecider(c), OnError: s.onError, Local: local,
				Timeout: timeout, DenyCache: s.denyCache, BreakerFailures: s.breaker, Log: log}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx) }()
	t.Cleanup(func() {
		httpClient.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return g, file
}

const twoLimits = `domain: two
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: per-minute, unit: minute, requests_per_unit: 3}
      - {name: per-hour, unit: hour, requests_per_unit: 5}
`

// TestRulesEveryLimitApplies: a consumer under two limits is admitted until
// the tighter denies; every response names both policies, RateLimit and
// the legacy fields the one closest to exhaustion, and a 429's Retry-After
// is never earlier than its t.
func TestRulesEveryLimitApplies(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	for _, denyCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("deny cache %v", denyCache), func(t *testing.T) {
			g, _ := startRules(t, rulesSetup{src: twoLimits, denyCache: denyCache})
			consumer := map[string]string{"X-Consumer-Id": redistest.Prefix(t)}
			for i := range 5 {
				resp, _ := get(t, "http://"+g.Addr()+"/", consumer)
				h := resp.Header
				if got := h.Get("RateLimit-Policy"); got != `"per-minute";q=3;w=60, "per-hour";q=5;w=3600` {
					t.Fatalf("request %d: RateLimit-Policy %q", i+1, got)
				}
				if i < 3 {
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("request %d: %d, want 200", i+1, resp.StatusCode)
					}
					want := fmt.Sprintf(`"per-minute";r=%d;t=60`, 2-i)
					if got := h.Get("RateLimit"); got != want || h.Get("RateLimit-Limit") != "3" || h.Get("RateLimit-Remaining") != fmt.Sprint(2-i) {
						t.Fatalf("request %d: RateLimit %q, legacy %s/%s; want %s", i+1, got, h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), want)
					}
					continue
				}
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("request %d: %d, want 429", i+1, resp.StatusCode)
				}
				var retry, reset int
				fmt.Sscan(h.Get("Retry-After"), &retry)
				if _, err := fmt.Sscanf(h.Get("RateLimit"), `"per-minute";r=0;t=%d`, &reset); err != nil || retry < reset || retry < 1 || retry > 60 {
					t.Fatalf("request %d: RateLimit %q, Retry-After %q", i+1, h.Get("RateLimit"), h.Get("Retry-After"))
				}
			}
			if f := forwarded(t, g.AdminAddr()); f.Total != 3 {
				t.Fatalf("the upstream received %d, want 3", f.Total)
			}
			m := g.Metrics()
			if a, d := m.LimitDecisions("two", "per-minute", limiter.LimitAllowed), m.Decisions(limiter.OutcomeAllowed); a != 3 || d != 3 {
				t.Fatalf("per-minute allowed %d, decisions allowed %d; want 3 and 3", a, d)
			}
		})
	}
}

// TestRulesUnlimitedAndShadow: an unlimited limit is answered without
// Redis, and a limit in shadow mode counts what it would deny and never
// blocks, nor shows in the headers.
func TestRulesUnlimitedAndShadow(t *testing.T) {
	t.Parallel()
	r := privateRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r})
	defer c.Close()
	g, _ := startRules(t, rulesSetup{redis: r, src: `domain: us
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: enforced, unit: minute, requests_per_unit: 4}
      - {name: trial, unit: minute, requests_per_unit: 1, shadow_mode: true}
  - key: header:X-Plan
    value: internal
    rate_limit: {name: internal, unlimited: true}
`})
	before := scriptCalls(t, c)
	internal := map[string]string{"X-Plan": "internal"}
	for range 3 {
		if resp, _ := get(t, "http://"+g.Addr()+"/", internal); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Policy") != "" {
			t.Fatalf("unlimited: %d, RateLimit-Policy %q; want 200 and none", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
		}
	}
	if n := scriptCalls(t, c) - before; n != 0 {
		t.Fatalf("unlimited requests made %d script calls, want none", n)
	}
	consumer := map[string]string{"X-Consumer-Id": redistest.Prefix(t)}
	codes := map[int]int{}
	for range 5 {
		resp, _ := get(t, "http://"+g.Addr()+"/", consumer)
		codes[resp.StatusCode]++
		if got := resp.Header.Get("RateLimit-Policy"); got != `"enforced";q=4;w=60` {
			t.Fatalf("RateLimit-Policy %q: want the enforced limit alone", got)
		}
	}
	if codes[200] != 4 || codes[429] != 1 {
		t.Fatalf("statuses %v, want 4 × 200 and 1 × 429", codes)
	}
	m := g.Metrics()
	if n := m.LimitDecisions("us", "trial", limiter.LimitShadowDenied); n < 3 {
		t.Fatalf("trial would have denied %d, want at least 3", n)
	}
	if n := m.LimitDecisions("us", "internal", limiter.LimitAllowed); n != 3 {
		t.Fatalf("internal allowed %d, want 3", n)
	}
}

// privateRedis starts a redis-server of the test's own, whose counts no
// other test touches.
func privateRedis(t *testing.T) string {
	t.Helper()
	r, err := redisrun.Start(context.Background(), redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r.Addr
}

// TestRulesLocalFallback: while Redis is unreachable, --on-redis-error local
// applies every limit at this gateway's share. On a loaded machine a local
// decision may itself time out; it is then answered 503, never let through,
// so the share holds whatever the load: at most 3 admitted, and exactly 3
// with 2 denied when every local decision was made.
func TestRulesLocalFallback(t *testing.T) {
	t.Parallel()
	g, _ := startRules(t, rulesSetup{redis: "127.0.0.1:1", onError: limiter.FailLocal, nodes: 2, src: localRules})
	codes := localStatuses(t, g)
	// The shares: 5 per minute and 3 per hour; the hour's denies the fourth.
	if codes[200] > 3 || codes[200]+codes[429]+codes[503] != 5 {
		t.Fatalf("statuses %v, want at most 3 × 200 (the hour's share is 3), the rest 429 or 503", codes)
	}
	m := g.Metrics()
	if n := m.Decisions(limiter.OutcomeErrorOpen); n != 0 {
		t.Fatalf("%d requests let through unlimited, want none under --on-redis-error local", n)
	}
	if codes[503] == 0 && (codes[200] != 3 || codes[429] != 2 || m.Decisions(limiter.OutcomeErrorLocalDenied) != 2) {
		t.Fatalf("statuses %v, %d local denials: with every local decision made, want 3 × 200 and 2 × 429 counted",
			codes, m.Decisions(limiter.OutcomeErrorLocalDenied))
	}
}

// TestRulesLocalFallbackFailing: when the local limiter fails too (here
// stopped; on a loaded machine, a decision that timed out), no request is
// let through without its limits: each is answered 503.
func TestRulesLocalFallbackFailing(t *testing.T) {
	t.Parallel()
	g, _ := startRules(t, rulesSetup{redis: "127.0.0.1:1", onError: limiter.FailLocal, nodes: 2, src: localRules, localDown: true})
	if codes := localStatuses(t, g); codes[503] != 5 {
		t.Fatalf("statuses %v with the local limiter failing, want 5 × 503", codes)
	}
	if n := g.Metrics().Decisions(limiter.OutcomeErrorClosed); n != 5 {
		t.Fatalf("%d requests counted %s, want 5", n, limiter.OutcomeErrorClosed)
	}
}

const localRules = `domain: local
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: per-minute, unit: minute, requests_per_unit: 10}
      - {name: per-hour, unit: hour, requests_per_unit: 6}
`

// localStatuses sends five requests of one consumer to g and counts their
// statuses.
func localStatuses(t *testing.T, g *edge.Gateway) map[int]int {
	t.Helper()
	consumer := map[string]string{"X-Consumer-Id": "alice"}
	codes := map[int]int{}
	for range 5 {
		resp, _ := get(t, "http://"+g.Addr()+"/", consumer)
		codes[resp.StatusCode]++
	}
	return codes
}

// TestRulesOneCallPerRequest: a request meeting three limits costs one
// Redis call, as Redis's own INFO commandstats counts them.
func TestRulesOneCallPerRequest(t *testing.T) {
	t.Parallel()
	r := privateRedis(t)
	g, _ := startRules(t, rulesSetup{redis: r, src: `domain: three
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: per-second, unit: second, requests_per_unit: 1000}
      - {name: per-minute, unit: minute, requests_per_unit: 10000, algorithm: gcra}
      - {name: per-hour, unit: hour, requests_per_unit: 100000, algorithm: fixed-window}
`})
	c := redis.NewClient(&redis.Options{Addr: r})
	defer c.Close()
	consumer := map[string]string{"X-Consumer-Id": "alice"}
	get(t, "http://"+g.Addr()+"/", consumer) // the scripts are loaded
	before := scriptCalls(t, c)
	const requests = 50
	for range requests {
		if resp, _ := get(t, "http://"+g.Addr()+"/", consumer); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d, want 200", resp.StatusCode)
		}
	}
	if calls := scriptCalls(t, c) - before; calls != requests {
		t.Fatalf("%d requests of three limits each took %d script calls, want %d", requests, calls, requests)
	}
}

// TestRulesCircuitBreaker: under rules too, after three failures in a row
// the circuit opens and requests are answered in the fail mode without
// Redis; once Redis answers the probe, which decides through the Decider,
// closes it.
func TestRulesCircuitBreaker(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	r := startRedis(t)
	g, _ := startRules(t, rulesSetup{redis: r.Addr, onError: limiter.FailClosed, breaker: 3, src: twoLimits})
	url := "http://" + g.Addr() + "/"
	hdr := map[string]string{"X-Consumer-Id": "breaker"}
	if resp, _ := get(t, url, hdr); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if resp, _ := get(t, url, hdr); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("request %d with Redis hung, fail closed: %d", i+1, resp.StatusCode)
		}
	}
	if n := redisCalls(t, g.Metrics()); n != 4 {
		t.Fatalf("%d decisions asked Redis, want 4: the first, and the 3 failures that opened the circuit", n)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		resp, _ := get(t, url, hdr)
		return resp.StatusCode == http.StatusOK && resp.Header.Get("RateLimit-Policy") != "",
			fmt.Sprintf("once Redis answers: %d, RateLimit-Policy %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	})
}
