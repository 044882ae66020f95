package edge_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/rules"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	return freeAddrs(t, 1)[0]
}

// freeAddrs is n free loopback addresses, each on its own port: they are
// held together while found, so none is found twice.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}

// limitRules is what ratelab edge --engine openresty serves for a lone
// --limit keyed by X-Consumer-Id: the one-rule set (rules.Shorthand), and
// its table as RenderRules writes it, for NginxConfig.Rules.
func limitRules(t *testing.T, limit string) (*rules.Set, string) {
	t.Helper()
	set, err := rules.Shorthand{Limits: []string{limit}, KeyBy: "header:X-Consumer-Id"}.Set()
	if err != nil {
		t.Fatal(err)
	}
	text, err := edge.RenderRules(set)
	if err != nil {
		t.Fatal(err)
	}
	return set, text
}

// needNginx skips a test where nginx with its lua module is missing, or
// under -short, and fails it under CI.
func needNginx(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no nginx")
	}
	if _, _, err := edge.FindNginx(); err != nil {
		if redistest.InCI() {
			t.Fatalf("under CI: %v", err)
		}
		t.Skip(err)
	}
}

// startNginx runs nginx with the module in front of the built-in upstream.
func startNginx(t *testing.T, r *redisrun.Server, c edge.NginxConfig) edge.NginxConfig {
	t.Helper()
	return startNginxUpstream(t, r, c, "builtin")
}

// startNginxUpstream runs nginx with the module in front of upstream.
func startNginxUpstream(t *testing.T, r *redisrun.Server, c edge.NginxConfig, upstream string) edge.NginxConfig {
	t.Helper()
	c, _ = startNginxProcess(t, r, c, upstream)
	return c
}

// startNginxProcess is startNginxUpstream that also returns nginx.
func startNginxProcess(t *testing.T, r *redisrun.Server, c edge.NginxConfig, upstream string) (edge.NginxConfig, *edge.Nginx) {
	t.Helper()
	needNginx(t)
	c.Upstream = upstream
	if c.RedisPort == 0 { // else a relay in front of r
		c.RedisHost, c.RedisPort = "127.0.0.1", r.Port()
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second // a loaded machine must not fail a decision open
	}
	c.KeyBy, c.Headers = "header:X-Consumer-Id", "both"
	if c.OnError == "" {
		c.OnError = "open"
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	// A port found free may be taken before nginx binds it (by another
	// test's outgoing connection): then try others, twice at most. The two
	// are never one port, which nginx would serve both servers on.
	var n *edge.Nginx
	var err error
	for attempt := 1; ; attempt++ {
		addrs := freeAddrs(t, 2)
		c.Listen, c.Admin = addrs[0], addrs[1]
		n, err = edge.StartNginx(context.Background(), c)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(n.Dir() + "/error.log")
			t.Logf("nginx error.log:\n%s", log)
		}
		n.StopNow()
	})
	c.Dir = n.Dir()
	return c, n
}

// TestOpenRestyBurst: through nginx with the module, 200 concurrent requests
// from one consumer with limit 10: exactly 10 reach the upstream and 190 get
// 429 with Retry-After and both header forms; the Go gateway's key holds them.
func TestOpenRestyBurst(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	set, text := limitRules(t, "10/1m")
	for _, denyCache := range []bool{true, false} {
		nc := startNginx(t, srv, edge.NginxConfig{Rules: text, DenyCache: denyCache, Timeout: 5 * time.Second})
		consumer := redistest.Prefix(t)
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		began := time.Now()
		for range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, _, err := fetch("http://"+nc.Listen+"/v1/ping", map[string]string{"X-Consumer-Id": consumer})
				if err != nil {
					t.Error(err)
					return
				}
				h := resp.Header
				mu.Lock()
				defer mu.Unlock()
				codes[resp.StatusCode]++
				if h.Get("RateLimit-Policy") != `"default";q=10;w=60` || h.Get("RateLimit") == "" ||
					h.Get("RateLimit-Limit") != "10" || h.Get("RateLimit-Remaining") == "" || h.Get("RateLimit-Reset") == "" {
					t.Errorf("%d without both header forms: %v", resp.StatusCode, h)
				}
				if resp.StatusCode == http.StatusTooManyRequests && (h.Get("Retry-After") == "" || h.Get("Retry-After") == "0") {
					t.Errorf("429 with Retry-After %q", h.Get("Retry-After"))
				}
			}()
		}
		wg.Wait()
		t.Logf("burst took %s", time.Since(began))
		if codes[200] != 10 || codes[429] != 190 {
			t.Fatalf("deny cache %v: statuses %v, want 10 × 200 and 190 × 429", denyCache, codes)
		}
		if f := forwarded(t, nc.Admin); f.Consumers[consumer] != 10 {
			t.Fatalf("the upstream received %d, want 10 (%v)", f.Consumers[consumer], f)
		}
		// The same key as the Go gateway's: both engines can share Redis.
		if n := logMembers(t, c, set, consumer); n != 10 {
			t.Fatalf("the Go gateway's key for %s holds %d members, want 10", consumer, n)
		}
	}
}

// TestOpenRestyRedisDown: with Redis hung, the module's decisions time out
// and it fails open, or closed with a 503 that says Redis did not answer in
// time, both without RateLimit fields; once Redis is back, it limits again.
// The test judges what the module answered, never how long it took.
func TestOpenRestyRedisDown(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	for _, mode := range []string{"open", "closed"} {
		r, err := redisrun.Start(context.Background(), redisrun.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		_, text := limitRules(t, "1/1m")
		nc := startNginx(t, r, edge.NginxConfig{Rules: text, OnError: mode, Timeout: 200 * time.Millisecond})
		hdr := map[string]string{"X-Consumer-Id": "down-" + mode}
		if resp, _ := get(t, "http://"+nc.Listen+"/", hdr); resp.StatusCode != 200 {
			t.Fatalf("first request: %d", resp.StatusCode)
		}
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"open": 200, "closed": 503}[mode]
		for range 5 {
			// The consumer used its one request: only the fail mode admits it.
			resp, text := body(t, "http://"+nc.Listen+"/", hdr)
			if resp.StatusCode != want || hasLimitFields(resp.Header) {
				t.Fatalf("%s, Redis hung: %d with %v, want %d without RateLimit fields", mode, resp.StatusCode, resp.Header, want)
			}
			if mode == "closed" && !strings.Contains(text, "did not answer in time") {
				t.Fatalf("closed, Redis hung: the 503 says %q, not that Redis did not answer in time", text)
			}
		}
		if err := r.Resume(); err != nil {
			t.Fatal(err)
		}
		waitForStatus(t, "http://"+nc.Listen+"/", hdr, http.StatusTooManyRequests)
	}
}

func TestOpenRestyScriptFlush(t *testing.T) {
	c := redistest.Client(t, srv)
	set, text := limitRules(t, "30/1m")
	nc := startNginx(t, srv, edge.NginxConfig{Rules: text})
	consumer := redistest.Prefix(t)
	codes := map[int]int{}
	for i := range 60 {
		if i == 10 || i == 40 {
			if err := c.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		resp, _ := get(t, "http://"+nc.Listen+"/", map[string]string{"X-Consumer-Id": consumer})
		codes[resp.StatusCode]++
	}
	if codes[200] != 30 || codes[429] != 30 {
		t.Fatalf("statuses %v, want 30 × 200 and 30 × 429", codes)
	}
	if f := forwarded(t, nc.Admin); f.Consumers[consumer] != 30 {
		t.Fatalf("the upstream received %d, want 30", f.Consumers[consumer])
	}
	if n := logMembers(t, c, set, consumer); n != 30 {
		t.Fatalf("the log holds %d members, want the 30 admitted", n)
	}
}

// TestOpenRestyProxy: in front of a real upstream, nginx passes only what
// the limit allows, adds X-Forwarded-For, and keeps the path; its deny cache
// answers a denied consumer without Redis.
func TestOpenRestyProxy(t *testing.T) {
	c := redistest.Client(t, srv)
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("X-Forwarded-For"))
		mu.Unlock()
	}))
	defer up.Close()
	_, text := limitRules(t, "3/1m")
	nc := edge.NginxConfig{Rules: text, DenyCache: true}
	nc = startNginxUpstream(t, srv, nc, up.URL)
	hdr := map[string]string{"X-Consumer-Id": redistest.Prefix(t)}
	before := scriptCalls(t, c)
	codes := map[int]int{}
	for range 10 {
		resp, _ := get(t, "http://"+nc.Listen+"/v1/items", hdr)
		codes[resp.StatusCode]++
	}
	if codes[200] != 3 || codes[429] != 7 {
		t.Fatalf("statuses %v, want 3 × 200 and 7 × 429", codes)
	}
	if calls := scriptCalls(t, c) - before; calls != 4 {
		t.Fatalf("%d script calls in Redis for 3 admitted and 7 denied requests; want 4 (the rest from the deny cache)", calls)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != "/v1/items 127.0.0.1" {
		t.Fatalf("the upstream saw %q", seen)
	}
}

// TestEnginesShareOneClock: a Go gateway on a host whose clock runs an hour
// ahead (simulated) and nginx share one Redis and one consumer, limit 10 a
// minute, ten requests through each. On Redis's clock they admit 10 between
// them; on the callers' clocks the gateway ahead takes nginx's requests for
// an hour old, prunes them, and admits 10 more. MONITOR shows the time each
// engine hands the script: none on Redis's clock, its own on the caller's.
func TestEnginesShareOneClock(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 10, Window: time.Minute}
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	for _, clock := range []algorithms.Clock{algorithms.ClockRedis, algorithms.ClockCaller} {
		t.Run(clock.String(), func(t *testing.T) {
			g, _ := startGateway(t, srv.Addr, setup{limit: p.Limit, window: p.Window, clock: clock, now: ahead})
			set := g.Rules().Current().Set()
			text, err := edge.RenderRules(set)
			if err != nil {
				t.Fatal(err)
			}
			nc := startNginx(t, srv, edge.NginxConfig{Rules: text, Clock: clock.String()})
			mon := redistest.NewMonitor(t, srv)
			consumer := redistest.Prefix(t)
			key := counterKey(t, set, consumer)
			hdr := map[string]string{"X-Consumer-Id": consumer}
			admitted := map[string]int{}
			for _, engine := range []struct{ name, addr string }{{"nginx", nc.Listen}, {"go", g.Addr()}} {
				for range p.Limit {
					if resp, _ := get(t, "http://"+engine.addr+"/", hdr); resp.StatusCode == http.StatusOK {
						admitted[engine.name]++
					}
				}
			}
			// The script's time argument of each call, in order: nginx's ten, then the gateway's.
			for i := range 2 * p.Limit {
				// decide.lua's: the key, then the mode and the time.
				args := mon.Find(t, 5*time.Second, func(a []string) bool {
					return (a[0] == "evalsha" || a[0] == "eval") && len(a) > 5 && a[3] == key && a[4] == "decide"
				})
				want := time.Now()
				if i >= p.Limit {
					want = ahead()
				}
				switch sent := args[5]; {
				case clock == algorithms.ClockRedis && sent != "":
					t.Fatalf("call %d sent the time %q on Redis's clock, want none", i+1, sent)
				case clock == algorithms.ClockCaller:
					ms, err := strconv.ParseInt(sent, 10, 64)
					if err != nil || time.UnixMilli(ms).Sub(want).Abs() > time.Minute {
						t.Fatalf("call %d sent the time %q on the caller's clock, want about %d", i+1, sent, want.UnixMilli())
					}
				}
			}
			want := map[algorithms.Clock]map[string]int{
				algorithms.ClockRedis:  {"nginx": 10},
				algorithms.ClockCaller: {"nginx": 10, "go": 10},
			}[clock]
			if fmt.Sprint(admitted) != fmt.Sprint(want) {
				t.Fatalf("admitted %v through the two engines, want %v", admitted, want)
			}
		})
	}
}

// TestOpenRestyAdmin: nginx's admin port serves the built-in upstream's
// counts at /__ratelab/forwarded, and /healthz (TestOpenRestyHealthz),
// which for a lone --limit's rules says ok with no rules line, as the Go
// gateway's; /metrics, which the Go gateway serves, answers 404 there.
func TestOpenRestyAdmin(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	_, text := limitRules(t, "1/1m")
	nc := startNginx(t, srv, edge.NginxConfig{Rules: text})
	consumer := redistest.Prefix(t)
	for range 2 {
		get(t, "http://"+nc.Listen+"/", map[string]string{"X-Consumer-Id": consumer})
	}
	resp, _ := get(t, "http://"+nc.Admin+"/__ratelab/forwarded", nil)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/json" {
		t.Fatalf("/__ratelab/forwarded: %d, Content-Type %q; want 200 and application/json", resp.StatusCode, ct)
	}
	if f := forwarded(t, nc.Admin); f.Total != 1 || f.Consumers[consumer] != 1 {
		t.Fatalf("/__ratelab/forwarded says %+v, want the one admitted request", f)
	}
	if resp, text := body(t, "http://"+nc.Admin+"/healthz", nil); resp.StatusCode != http.StatusOK || text != "ok\n" {
		t.Fatalf("/healthz of one limit, Redis answering: %d %q, want ok and no rules line", resp.StatusCode, text)
	}
	for _, path := range []string{"/metrics", "/", "/__ratelab/forwarded/x", "/healthz/x"} {
		if resp, _ := get(t, "http://"+nc.Admin+path, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s on the admin port: %d, want 404", path, resp.StatusCode)
		}
	}
}

// TestNginxConfRenders: nginx.conf names the rules and decide.lua in the
// directory, where WriteFiles puts the rules' table as RenderRules wrote it
// (the policy in it) and decide.lua as ratelab runs it; an unknown clock is
// refused, and so is a limiter with no rules; with the limiter off there
// are none.
func TestNginxConfRenders(t *testing.T) {
	t.Parallel()
	_, text := limitRules(t, "100/1m")
	nc := edge.NginxConfig{Listen: "127.0.0.1:8080", Upstream: "http://127.0.0.1:9000", RedisHost: "127.0.0.1",
		RedisPort: 6379, Rules: text, Timeout: 200 * time.Millisecond,
		KeyBy: "ip", OnError: "closed", Headers: "both", Dir: t.TempDir()}
	if err := nc.WriteFiles(); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(nc.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	conf := read("nginx.conf")
	for _, want := range []string{"listen 127.0.0.1:8080;", "server 127.0.0.1:9000;", "keepalive 64;",
		"proxy_pass http://ratelab_upstream;", `on_error = "closed"`, `clock = "redis",`,
		fmt.Sprintf("rules_path = %q,", filepath.Join(nc.Dir, "rules.lua")), fmt.Sprintf("decide_path = %q,", filepath.Join(nc.Dir, "decide.lua"))} {
		if !strings.Contains(conf, want) {
			t.Errorf("nginx.conf lacks %q:\n%s", want, conf)
		}
	}
	if rules := read("rules.lua"); rules != text || !strings.Contains(rules, "limit = 100, window_ms = 60000,") {
		t.Errorf("rules.lua is not the rules' table with the policy 100/1m:\n%s", rules)
	}
	if read("decide.lua") != algorithms.DecideSource() {
		t.Error("decide.lua is not algorithms/decide.lua as ratelab runs it")
	}
	caller := edge.NginxConfig{Upstream: "builtin", Rules: text, Clock: "caller"}
	if conf, err := caller.Render(); err != nil || !strings.Contains(conf, `clock = "caller",`) {
		t.Errorf("caller clock: %v\n%s", err, conf)
	}
	caller.Clock = "wall"
	if _, err := caller.Render(); err == nil {
		t.Errorf("an unknown clock rendered")
	}
	if conf, err := (edge.NginxConfig{Upstream: "builtin"}).Render(); err == nil {
		t.Errorf("nginx.conf rendered with no rules to serve:\n%s", conf)
	}
	if conf, err := (edge.NginxConfig{Upstream: "builtin", Off: true}).Render(); err != nil || strings.Contains(conf, "access_by_lua") ||
		strings.Contains(conf, "rules_path") {
		t.Errorf("off: %v, want no limiter and no rules:\n%s", err, conf)
	}
}

// TestOpenRestyFailures: the module on a full Redis answers 503 naming
// the full store and logs it once for many failures; with Redis hung its
// circuit opens after two failures and the rest are answered without
// Redis; once Redis answers, it limits again. A relay between nginx and
// Redis counts the decisions sent for the consumer, answered or not: the
// test counts what the module did, never how long an answer took. One
// worker, so that the counts are exact (each worker has its own circuit).
func TestOpenRestyFailures(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	consumer := "failures-" + redistest.Prefix(t)
	set, text := limitRules(t, "1/1m")
	rel := startRelay(t, r.Addr, []byte(counterKey(t, set, consumer)))
	// A timeout of seconds: a full Redis answers OOM, never "too late",
	// however loaded the machine.
	nc := startNginx(t, r, edge.NginxConfig{Rules: text, OnError: "closed",
		Timeout: 2 * time.Second, BreakerFailures: 2, Workers: 1, RedisHost: "127.0.0.1", RedisPort: rel.Port()})
	url := "http://" + nc.Listen + "/"
	hdr := map[string]string{"X-Consumer-Id": consumer}
	c := client(t, r.Addr, 5*time.Second)
	ctx := context.Background()

	// failClosed sends n requests and checks each is the fail mode's 503
	// naming cause, with Retry-After 1 and no RateLimit fields; it returns
	// how many decisions for the consumer reached Redis meanwhile.
	failClosed := func(phase string, n int, cause string) int64 {
		t.Helper()
		before := rel.Seen()
		for i := range n {
			resp, text := body(t, url, hdr)
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(text, cause) ||
				resp.Header.Get("Retry-After") != "1" || hasLimitFields(resp.Header) {
				t.Fatalf("%s, request %d: %d %q %v; want 503 naming %q, Retry-After 1, no RateLimit fields",
					phase, i+1, resp.StatusCode, text, resp.Header, cause)
			}
		}
		// The two that opened the circuit were sent; wait until the relay
		// has read them, then see that nothing more was.
		return rel.waitSeen(t, before+2) - before
	}

	// Another consumer's decision loads the script: from then on each
	// decision sends one EVALSHA naming the key, and no EVAL after a NOSCRIPT.
	if resp, _ := get(t, url, map[string]string{"X-Consumer-Id": "warm-" + consumer}); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	full := time.Now()
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if sent := failClosed("full Redis", 10, "OOM"); sent != 2 {
		t.Fatalf("full Redis: %d of 10 decisions reached Redis, want 2: the circuit opens after 2 failures", sent)
	}
	if _, text := body(t, "http://"+nc.Admin+"/healthz", nil); !strings.HasPrefix(text, "degraded: redis failing for ") ||
		!strings.HasSuffix(text, "(oom: the rate limiter's store is full: Redis refused the decision (OOM, maxmemory reached)); failing closed; circuit open, Redis asked every 100ms\n") {
		t.Fatalf("/healthz with Redis full and the circuit open: %q", text)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, url, hdr, http.StatusOK) // the probe found Redis answering, the circuit closed
	if _, text := body(t, "http://"+nc.Admin+"/healthz", nil); text != "ok\n" {
		t.Fatalf("/healthz once Redis answers again: %q", text)
	}
	fullFor := time.Since(full)

	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	if sent := failClosed("Redis hung", 20, "did not answer in time"); sent != 2 {
		t.Fatalf("Redis hung: %d of 20 decisions reached Redis, want 2: the circuit opens after 2 failures", sent)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, url, hdr, http.StatusTooManyRequests)

	log, err := os.ReadFile(filepath.Join(nc.Dir, "error.log"))
	if err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string]int{"ratelab: circuit open after 2 failures in a row": 2, "ratelab: redis answers again": 2} {
		if n := strings.Count(string(log), line); n != want {
			t.Fatalf("%d lines %q, want %d (the full Redis, then the hung one):\n%s", n, line, want, log)
		}
	}
	// One line per kind per 10 s: the full Redis failed every decision and
	// probe for fullFor, and was written about once per 10 s of it.
	if n, most := strings.Count(string(log), "ratelab: redis oom"), 1+int(fullFor/(10*time.Second)); n < 1 || n > most {
		t.Fatalf("%d lines about the full store in %s, want 1 to %d:\n%s", n, fullFor.Round(time.Millisecond), most, log)
	}
}

// TestOpenRestyStoppedWhileStarting: a Serve whose context ends while nginx
// is still starting stops nginx and returns nil, as the go engine does, not
// the context's error (which ratelab edge would report as a failure).
func TestOpenRestyStoppedWhileStarting(t *testing.T) {
	t.Parallel()
	needNginx(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // before nginx can answer: Serve sees it while waiting for the port
	o := edge.Options{Engine: edge.EngineOpenResty, Listen: freeAddr(t), Upstream: "builtin", Off: true,
		KeyBy: "ip", OnError: "open", Headers: "both", Timeout: time.Second, Pool: 1, Nodes: 1}
	if err := edge.Serve(ctx, o, nil, ""); err != nil {
		t.Fatalf("stopped while starting: %v, want nil", err)
	}
}
