package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/batch"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

var srv *redisrun.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// client is how the gateway talks to Redis: a bounded pool, the decision's
// deadline on every socket operation, and no retries.
func client(t *testing.T, addr string, timeout time.Duration) redis.UniversalClient {
	t.Helper()
	c := redis.NewUniversalClient(limiter.RedisOptions(redis.UniversalOptions{Addrs: []string{addr}, Protocol: 2}, timeout, 256))
	t.Cleanup(func() { c.Close() })
	return c
}

type setup struct {
	limit     int64
	window    time.Duration
	keyBy     edge.KeyBy
	onError   limiter.OnError
	timeout   time.Duration
	denyCache bool
	shadow    bool
	clock     algorithms.Clock
	now       func() time.Time // the limiter's caller clock; time.Now when nil
	algorithm string           // sliding-log when empty
	breaker   int              // failures in a row that open the circuit
	local     int              // with onError local: the nodes sharing the limit
	log       io.Writer
	// batch, over 1, sends the limiter's EVALSHAs through a Batcher of
	// that many at most per pipeline, as ratelab edge --redis-batch does;
	// onBatch, when set, sees each pipeline's size.
	batch   int
	onBatch func(size int, retry bool)
}

// startGateway serves a gateway with the built-in upstream on loopback until the test ends.
func startGateway(t *testing.T, addr string, s setup) (*edge.Gateway, redis.UniversalClient) {
	t.Helper()
	if s.window == 0 {
		s.window = time.Minute
	}
	if s.timeout == 0 {
		// Long enough that a loaded machine never turns a decision into a
		// Redis timeout (and a fail-open admission); the tests of timeouts
		// set their own.
		s.timeout = 5 * time.Second
	}
	if s.keyBy.Header == "" && s.keyBy.TrustedProxies == nil {
		s.keyBy.Header = "X-Consumer-Id"
	}
	c := client(t, addr, s.timeout)
	limited := c
	if s.batch > 1 {
		b := batch.New(c, batch.Options{Max: s.batch, Flushers: 2, Timeout: s.timeout, OnBatch: s.onBatch})
		t.Cleanup(func() { b.Close() })
		limited = b.Wrap(c)
	}
	if s.algorithm == "" {
		s.algorithm = "sliding-log"
	}
	p := algorithms.Policy{Limit: s.limit, Window: s.window}
	set, err := rules.Shorthand{Limits: []string{p.String() + ":" + s.algorithm}, KeyBy: keyBySpec(s.keyBy)}.Set()
	if err != nil {
		t.Fatal(err)
	}
	opts := []algorithms.DeciderOption{algorithms.DecideClock(s.clock)}
	if s.now != nil {
		opts = append(opts, algorithms.DecideNow(s.now))
	}
	var local *limiter.LocalLimiter
	if s.local > 0 {
		if local, err = limiter.NewLocalLimiter(s.local); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(local.Close)
	}
	g, err := edge.NewGateway(edge.GatewayConfig{
		Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Upstream: "builtin",
		Limit: edge.Config{Rules: limiter.FixedRules(set), Clock: s.clock, KeyBy: s.keyBy, Shadow: s.shadow,
			Config: limiter.Config{Decider: algorithms.NewDecider(limited, opts...), OnError: s.onError, Timeout: s.timeout,
				DenyCache: s.denyCache, BreakerFailures: s.breaker, Local: local, Log: s.log}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx) }()
	t.Cleanup(func() {
		// A connection the client dialled and never used is new to the
		// server, which waits 5 s before it counts it idle and shuts down:
		// the client closes its idle ones first.
		httpClient.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return g, c
}

var httpClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// get sends a GET with header, reads the whole answer and says how long it
// took; the test fails at once when it cannot. Goroutines use fetch.
func get(t *testing.T, url string, header map[string]string) (*http.Response, time.Duration) {
	t.Helper()
	resp, took, err := fetch(url, header)
	if err != nil {
		t.Fatal(err)
	}
	return resp, took
}

// fetch is get for goroutines: it returns the error instead of ending the
// test, which only the test's own goroutine may do.
func fetch(url string, header map[string]string) (*http.Response, time.Duration, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", url, err)
	}
	return resp, time.Since(start), nil
}

// forwarded reads what the built-in upstream behind adminAddr received.
func forwarded(t *testing.T, adminAddr string) edge.Forwarded {
	t.Helper()
	resp, err := httpClient.Get("http://" + adminAddr + "/__ratelab/forwarded")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var f edge.Forwarded
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

// oneRule is the rules of one limit on each X-Consumer-Id (else the
// client's address), in a domain of the test's own.
func oneRule(t *testing.T, limit string) *limiter.Rules {
	t.Helper()
	set, err := rules.Shorthand{Limits: []string{limit}, KeyBy: "header:X-Consumer-Id", Domain: redistest.Prefix(t)}.Set()
	if err != nil {
		t.Fatal(err)
	}
	return limiter.FixedRules(set)
}

// deciderFunc decides by a function, without Redis.
type deciderFunc func(context.Context, []algorithms.Check) (algorithms.Outcome, error)

func (f deciderFunc) Decide(ctx context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
	return f(ctx, checks)
}

// keyBySpec is k as rules.Shorthand reads it: header:NAME, or ip.
func keyBySpec(k edge.KeyBy) string {
	if k.Header != "" {
		return "header:" + k.Header
	}
	return "ip"
}

// counterKey is the Redis key of the counter of the one limit that
// consumer (its X-Consumer-Id) meets in set, in either engine.
func counterKey(t *testing.T, set *rules.Set, consumer string) string {
	t.Helper()
	hits := set.Match(rules.Request{Header: map[string][]string{"X-Consumer-Id": {consumer}}})
	if len(hits) != 1 {
		t.Fatalf("%s meets %d limits, want 1", consumer, len(hits))
	}
	return hits[0].Key
}

// logMembers is the size of the consumer's sliding log: the counter of its
// one limit in set.
func logMembers(t *testing.T, c redis.UniversalClient, set *rules.Set, consumer string) int64 {
	t.Helper()
	return c.ZCard(context.Background(), counterKey(t, set, consumer)).Val()
}

// waitForStatus asks url until it answers status, for at most 10 seconds.
func waitForStatus(t *testing.T, url string, hdr map[string]string, status int) {
	t.Helper()
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		resp, _ := get(t, url, hdr)
		return resp.StatusCode == status, fmt.Sprintf("%s answers %d, want %d", url, resp.StatusCode, status)
	})
}

// TestConcurrentBurst: 200 concurrent requests from one consumer with limit
// 10: exactly 10 reach the upstream, 190 get 429 with Retry-After and both
// header forms, and the consumer's log in Redis holds exactly 10 members.
// So too when the decisions share round trips (batch 16): the burst is
// the load that fills pipelines.
func TestConcurrentBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	for _, tc := range []struct {
		denyCache bool
		batch     int
	}{{true, 1}, {false, 1}, {true, 16}, {false, 16}} {
		t.Run(fmt.Sprintf("deny cache %v/batch %d", tc.denyCache, tc.batch), func(t *testing.T) {
			var batchMu sync.Mutex
			var batches, deepest int
			onBatch := func(size int, _ bool) {
				batchMu.Lock()
				defer batchMu.Unlock()
				batches++
				deepest = max(deepest, size)
			}
			// A timeout that a 2-core machine running the race detector meets
			// while it opens 200 connections at once: this test is about counts.
			g, c := startGateway(t, srv.Addr, setup{limit: 10, denyCache: tc.denyCache, timeout: 5 * time.Second,
				batch: tc.batch, onBatch: onBatch})
			defer func() {
				batchMu.Lock()
				defer batchMu.Unlock()
				// How deep the pipelines went is the scheduler's to say: logged,
				// never asserted.
				if tc.batch > 1 {
					t.Logf("%d pipelines, the deepest of %d decisions", batches, deepest)
				}
			}()
			consumer := redistest.Prefix(t)
			var mu sync.Mutex
			codes := map[int]int{}
			var wg sync.WaitGroup
			for range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, _, err := fetch("http://"+g.Addr()+"/v1/ping", map[string]string{"X-Consumer-Id": consumer})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					codes[resp.StatusCode]++
					h := resp.Header
					if h.Get("RateLimit-Policy") != `"default";q=10;w=60` || h.Get("RateLimit") == "" ||
						h.Get("RateLimit-Limit") != "10" || h.Get("RateLimit-Remaining") == "" || h.Get("RateLimit-Reset") == "" {
						t.Errorf("%d without both header forms: %v", resp.StatusCode, h)
					}
					if resp.StatusCode == http.StatusTooManyRequests {
						if ra := h.Get("Retry-After"); ra == "" || ra == "0" {
							t.Errorf("429 with Retry-After %q", ra)
						}
						if !strings.HasPrefix(h.Get("RateLimit"), `"default";r=0;t=`) {
							t.Errorf("429 with RateLimit %q", h.Get("RateLimit"))
						}
					}
				}()
			}
			wg.Wait()
			if codes[200] != 10 || codes[429] != 190 {
				t.Fatalf("statuses %v, want 10 × 200 and 190 × 429", codes)
			}
			if f := forwarded(t, g.AdminAddr()); f.Consumers[consumer] != 10 {
				t.Fatalf("the upstream received %d, want 10", f.Consumers[consumer])
			}
			if n := logMembers(t, c, g.Rules().Current().Set(), consumer); n != 10 {
				t.Fatalf("the log holds %d members, want 10", n)
			}
		})
	}
}

// TestRedisDown: with Redis hung (SIGSTOP), every decision times out, and
// the fail mode answers: fail-open passes the request, fail-closed answers
// 503, both without RateLimit fields; once Redis is back, limiting resumes
// without a restart. The test counts what the gateway did, never how long
// an answer took.
func TestRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	for _, mode := range []limiter.OnError{limiter.FailOpen, limiter.FailClosed} {
		t.Run(string(mode), func(t *testing.T) {
			r, err := redisrun.Start(context.Background(), redisrun.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			timeout := 200 * time.Millisecond
			g, _ := startGateway(t, r.Addr, setup{limit: 1, onError: mode, timeout: timeout})
			url := "http://" + g.Addr() + "/"
			hdr := map[string]string{"X-Consumer-Id": "down-" + string(mode)}
			// Another consumer first, until it is admitted: the gateway's first
			// call dials Redis and loads the script, which a loaded machine can
			// stretch past the 200ms timeout.
			waitForStatus(t, url, map[string]string{"X-Consumer-Id": "warm-" + string(mode)}, http.StatusOK)
			if resp, _ := get(t, url, hdr); resp.StatusCode != 200 {
				t.Fatalf("first request: %d", resp.StatusCode)
			}
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
			want := map[limiter.OnError]int{limiter.FailOpen: 200, limiter.FailClosed: 503}[mode]
			var slowest time.Duration
			for range 10 {
				resp, took := get(t, url, hdr)
				slowest = max(slowest, took)
				// The consumer used its one request: only the fail mode admits it.
				if resp.StatusCode != want || hasLimitFields(resp.Header) {
					t.Fatalf("with Redis hung: %d with %v, want %d without RateLimit fields", resp.StatusCode, resp.Header, want)
				}
				if mode == limiter.FailClosed && resp.Header.Get("Retry-After") == "" {
					t.Fatalf("503 without Retry-After")
				}
			}
			if n := g.Metrics().RedisErrors(limiter.RedisErrorTimeout); n < 10 {
				t.Fatalf("%d Redis timeouts counted, want 10", n)
			}
			if err := r.Resume(); err != nil {
				t.Fatal(err)
			}
			// The consumer already used its one request: once Redis answers, 429.
			waitForStatus(t, url, hdr, http.StatusTooManyRequests)
			t.Logf("slowest response while Redis was hung: %s", slowest)
		})
	}
}

// TestScriptFlush: SCRIPT FLUSH in the middle of a run: decisions go on
// through EVAL, nothing fails, and no request is counted twice.
func TestScriptFlush(t *testing.T) {
	redistest.Client(t, srv)
	g, c := startGateway(t, srv.Addr, setup{limit: 50})
	consumer := redistest.Prefix(t)
	hdr := map[string]string{"X-Consumer-Id": consumer}
	codes := map[int]int{}
	for i := range 100 {
		if i == 30 || i == 60 {
			if err := c.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		resp, _ := get(t, "http://"+g.Addr()+"/", hdr)
		codes[resp.StatusCode]++
	}
	if codes[200] != 50 || codes[429] != 50 {
		t.Fatalf("statuses %v, want 50 × 200 and 50 × 429", codes)
	}
	if e := g.Metrics().RedisErrors("other") + g.Metrics().RedisErrors("timeout"); e != 0 {
		t.Fatalf("%d Redis errors", e)
	}
	if f := forwarded(t, g.AdminAddr()); f.Consumers[consumer] != 50 {
		t.Fatalf("the upstream received %d, want 50", f.Consumers[consumer])
	}
	if n := logMembers(t, c, g.Rules().Current().Set(), consumer); n != 50 {
		t.Fatalf("the log holds %d members, want the 50 admitted", n)
	}
}

// scriptCalls counts EVALSHA and EVAL calls the server has run.
func scriptCalls(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	var n int64
	for _, line := range strings.Split(c.Info(context.Background(), "commandstats").Val(), "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				calls, _, _ := strings.Cut(rest, ",")
				var v int64
				fmt.Sscan(calls, &v)
				n += v
			}
		}
	}
	return n
}

// TestIdentity: a spoofed X-Forwarded-For from an untrusted peer does not
// change the key; from a trusted proxy it does; hostile header values make
// bounded keys with one hash tag.
func TestIdentity(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
	domain := redistest.Prefix(t) // keys of this test alone
	serve := func(k edge.KeyBy, peer string, header http.Header) int {
		set, err := rules.Shorthand{Limits: []string{"1/1m"}, KeyBy: keyBySpec(k), Domain: domain}.Set()
		if err != nil {
			t.Fatal(err)
		}
		h := edge.Middleware(edge.Config{Rules: limiter.FixedRules(set), KeyBy: k,
			Config: limiter.Config{Decider: algorithms.NewDecider(c), Timeout: 5 * time.Second}}, ok)
		defer h.Close()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer
		for name, v := range header {
			r.Header[name] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	peer := "127.0.0.9:5555"
	untrusted := edge.KeyBy{}
	for i, xff := range []string{"1.1.1.1", "2.2.2.2", "3.3.3.3"} {
		code := serve(untrusted, peer, http.Header{"X-Forwarded-For": {xff}})
		if want := map[bool]int{true: 200, false: 429}[i == 0]; code != want {
			t.Fatalf("untrusted peer, X-Forwarded-For %s: %d, want %d (the header must not change the key)", xff, code, want)
		}
	}
	trusted := edge.KeyBy{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, xff := range []string{"4.4.4.4", "5.5.5.5, 127.0.0.2"} {
		if code := serve(trusted, "127.0.0.10:1", http.Header{"X-Forwarded-For": {xff}}); code != 200 {
			t.Fatalf("trusted proxy, X-Forwarded-For %q: %d, want 200 (a client of its own)", xff, code)
		}
	}
	hostile := edge.KeyBy{Header: "X-Consumer-Id"}
	// A value longer than the rules read is refused before any decision.
	if code := serve(hostile, peer, http.Header{"X-Consumer-Id": {strings.Repeat("x", limiter.DefaultBounds.Length+1)}}); code != http.StatusBadRequest {
		t.Fatalf("an identity of %d bytes: %d, want 400", limiter.DefaultBounds.Length+1, code)
	}
	for _, v := range []string{strings.Repeat("x", limiter.DefaultBounds.Length), "{a}}{", "line\nbreak", "ümlaut\x00"} {
		if code := serve(hostile, peer, http.Header{"X-Consumer-Id": {v}}); code != http.StatusOK {
			t.Fatalf("identity %q: %d, want 200", v[:min(len(v), 20)], code)
		}
		id := hostile.Identify(&http.Request{Header: http.Header{"X-Consumer-Id": {v}}})
		key := algorithms.Key(id.Key, "sliding-log")
		if len(key) > 64 || strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 || strings.ContainsAny(id.Key, "\n\x00") {
			t.Fatalf("identity %q makes key %q", v[:min(len(v), 20)], key)
		}
		if len(id.Label) > 64 || strings.ContainsAny(id.Label, "{}\n\x00") {
			t.Fatalf("label %q", id.Label)
		}
	}
}

// TestRedisRestart: Redis killed mid-run fails open at once (a refused
// connection is no wait), and a new Redis on the same port is used without
// a restart of the gateway.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	r, err := redisrun.Start(context.Background(), redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	port := r.Port()
	g, _ := startGateway(t, r.Addr, setup{limit: 1, onError: limiter.FailOpen})
	url := "http://" + g.Addr() + "/"
	hdr := map[string]string{"X-Consumer-Id": "restart"}
	get(t, url, hdr)
	r.Stop()
	for range 5 {
		if resp, _ := get(t, url, hdr); resp.StatusCode != 200 {
			t.Fatalf("Redis gone, fail open: %d", resp.StatusCode)
		}
	}
	if g.Metrics().RedisErrors(limiter.RedisErrorUnreachable) == 0 {
		t.Fatalf("no unreachable Redis counted with Redis gone")
	}
	r, err = redisrun.Start(context.Background(), redisrun.Options{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	// The new server is empty: the consumer's first request there is
	// admitted, the second denied.
	waitForStatus(t, url, hdr, http.StatusTooManyRequests)
}

// TestHeaderForms: --headers selects the fields; Retry-After rounds the
// script's milliseconds up to whole seconds.
func TestHeaderForms(t *testing.T) {
	t.Parallel()
	deny := deciderFunc(func(_ context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
		return algorithms.Outcome{Checks: []algorithms.Decision{{Limit: 5, RetryAfter: 1500 * time.Millisecond}}}, nil
	})
	for _, tc := range []struct {
		headers     limiter.Headers
		draft, lgcy bool
	}{{limiter.HeadersDraft, true, false}, {limiter.HeadersLegacy, false, true}, {limiter.HeadersBoth, true, true}} {
		h := edge.Middleware(edge.Config{Rules: oneRule(t, "5/1m"), Headers: tc.headers, Config: limiter.Config{Decider: deny}}, http.NotFoundHandler())
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		got := w.Result().Header
		if w.Code != 429 || got.Get("Retry-After") != "2" {
			t.Fatalf("%s: %d with Retry-After %q, want 429 and 2 (1.5 s rounded up)", tc.headers, w.Code, got.Get("Retry-After"))
		}
		if (got.Get("RateLimit") == `"default";r=0;t=2`) != tc.draft || (got.Get("RateLimit-Reset") == "2") != tc.lgcy {
			t.Fatalf("%s: headers %v", tc.headers, got)
		}
		if (got.Get("RateLimit-Policy") != "") != tc.draft || (got.Get("RateLimit-Limit") != "") != tc.lgcy {
			t.Fatalf("%s: headers %v", tc.headers, got)
		}
	}
}

// TestShadowAndDenyCache: shadow mode never blocks but counts what it
// would have; the deny cache answers a denied consumer without Redis.
func TestShadowAndDenyCache(t *testing.T) {
	redistest.Client(t, srv)
	g, _ := startGateway(t, srv.Addr, setup{limit: 1, shadow: true})
	shadowed := map[string]string{"X-Consumer-Id": redistest.Prefix(t)}
	for range 5 {
		if resp, _ := get(t, "http://"+g.Addr()+"/", shadowed); resp.StatusCode != 200 {
			t.Fatalf("shadow mode answered %d", resp.StatusCode)
		}
	}
	if n := g.Metrics().Decisions(limiter.OutcomeShadowDenied); n != 4 {
		t.Fatalf("%d shadow denials counted, want 4", n)
	}

	g, rc := startGateway(t, srv.Addr, setup{limit: 1, denyCache: true})
	hdr := map[string]string{"X-Consumer-Id": redistest.Prefix(t) + "-cache"}
	before := scriptCalls(t, rc)
	for range 10 {
		get(t, "http://"+g.Addr()+"/", hdr)
	}
	if calls := scriptCalls(t, rc) - before; calls != 2 {
		t.Fatalf("10 requests, 8 of them while denied, made %d script calls in Redis; want 2", calls)
	}
	m := g.Metrics()
	if m.Decisions(limiter.OutcomeAllowed) != 1 || m.Decisions(limiter.OutcomeDenied) != 1 || m.DenyCacheHits() != 8 {
		t.Fatalf("allowed %d, denied by Redis %d, from the cache %d; want 1, 1, 8",
			m.Decisions(limiter.OutcomeAllowed), m.Decisions(limiter.OutcomeDenied), m.DenyCacheHits())
	}
	resp, err := httpClient.Get("http://" + g.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`ratelab_edge_decisions_total{outcome="denied_from_cache"} 8`,
		"ratelab_edge_deny_cache_hits_total 8", `ratelab_edge_decision_seconds_bucket{le="+Inf"} 2`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}
