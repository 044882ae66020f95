package bench_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/batch"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

// fixedWindow is a test limiter: per consumer, admit admits per window of
// real length, advertise advertised per claimed window, and on a denial say
// Retry-After: sayRetry.
type fixedWindow struct {
	admit, advertised int
	real              time.Duration
	sayRetry          string

	mu    sync.Mutex
	start map[string]time.Time
	count map[string]int
}

func (f *fixedWindow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := r.Header.Get("X-Consumer-Id")
	f.mu.Lock()
	if f.start == nil {
		f.start, f.count = map[string]time.Time{}, map[string]int{}
	}
	if time.Since(f.start[c]) >= f.real {
		f.start[c], f.count[c] = time.Now(), 0
	}
	f.count[c]++
	n := f.count[c]
	f.mu.Unlock()
	w.Header().Set("RateLimit-Policy", `"default";q=`+strconv.Itoa(f.advertised)+";w=1")
	if n > f.admit {
		w.Header().Set("Retry-After", f.sayRetry)
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

func auditRun(t *testing.T, h http.Handler, noProbes bool) audit.LimitAudit {
	t.Helper()
	return auditRunProgress(t, h, noProbes, nil)
}

func auditRunProgress(t *testing.T, h http.Handler, noProbes bool, progress func(bench.Progress)) audit.LimitAudit {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 40, Duration: 2500 * time.Millisecond,
		Consumers: 2, ConsumerHeader: "X-Consumer-Id", ExpectLimit: 5, ExpectWindow: time.Second, NoProbes: noProbes,
		Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	return only(t, res.Audit)
}

// only is the one limit of an audit.
func only(t *testing.T, a *audit.Audit) audit.LimitAudit {
	t.Helper()
	if a == nil || len(a.Limits) != 1 {
		t.Fatalf("audit %+v, want one of one limit", a)
	}
	t.Logf("audit: %s %q: %+v", a.Verdict, a.Reasons, a.Limits[0])
	return a.Limits[0]
}

// TestAuditCatchesALeak: a server that admits twice the limit it
// advertises fails the admission audit.
func TestAuditCatchesALeak(t *testing.T) {
	t.Parallel()
	a := auditRun(t, &fixedWindow{admit: 10, advertised: 5, real: time.Second, sayRetry: "1"}, true)
	if a.OverAdmitted == 0 || a.WorstWindowAdmitted < 10 {
		t.Fatalf("worst window %d, over %d: the leak went unseen", a.WorstWindowAdmitted, a.OverAdmitted)
	}
}

// TestAuditCatchesALyingRetryAfter: a server that says 1 s and frees the
// consumer 8 s after its first request (over 4 s late) is caught, and the
// live line says the probes are under way while they wait.
func TestAuditCatchesALyingRetryAfter(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	var mu sync.Mutex
	var probing []time.Duration
	a := auditRunProgress(t, &fixedWindow{admit: 5, advertised: 5, real: 8 * time.Second, sayRetry: "1"}, false, func(p bench.Progress) {
		if p.Phase == "probes" {
			mu.Lock()
			probing = append(probing, p.ProbesLeft)
			mu.Unlock()
		}
	})
	mu.Lock()
	defer mu.Unlock()
	// The probes wait until the truth comes out, over 4 s: the live line
	// ticks through them, with how long they may still take (at most the
	// 1 s Retry-After and 10 s of asking again).
	if len(probing) == 0 || probing[0] <= 0 || probing[0] > 11*time.Second {
		t.Fatalf("probe progress %v", probing)
	}
	if a.RetryAfter.Probes == 0 || a.RetryAfter.Honest == nil || *a.RetryAfter.Honest || a.RetryAfter.MaxErrorMillis < 1000 {
		t.Fatalf("retry-after audit %+v: the lie went unseen", a.RetryAfter)
	}
	if a.OverAdmitted != 0 {
		t.Fatalf("over-admitted %d from a server that holds its limit", a.OverAdmitted)
	}
	// It admits 5 in 8 s where 5 a second were promised: after the first
	// second, its denials are ones the rule admits.
	if a.UnderAdmitted == 0 || a.WorstUnderAdmitted == 0 {
		t.Fatalf("%d of %d denials judged under-admitted: the server's stinginess went unseen", a.UnderAdmitted, a.DenialsJudged)
	}
}

// TestAuditPassesTheEdgeGateway: ratelab's own limiter over a real
// redis-server, with each algorithm, passes every part of the audit held to
// that algorithm's guarantee, with its decisions sent one per round trip
// and batched (16 per pipeline); the sliding log passes the sliding-window
// rule too, at exactly its limit.
func TestAuditPassesTheEdgeGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	for _, batched := range []int{1, 16} {
		for _, name := range append(algorithms.Algorithms(), "") {
			if name == "" && batched > 1 {
				continue // the sliding log has its own batched row
			}
			t.Run(fmt.Sprintf("batch %d/%s", batched, cmp.Or(name, "sliding-window rule")), func(t *testing.T) {
				t.Parallel()
				auditEdge(t, name, batched)
			})
		}
	}
}

// ruledGateway is ratelab's gateway limiting each X-Consumer-Id to limit
// (LIMIT/WINDOW:ALGORITHM), deciding in client on Redis's clock, with
// counters of its own, in front of an upstream that answers 200.
func ruledGateway(t *testing.T, client redis.UniversalClient, limit string, cfg limiter.Config) *edge.Handler {
	t.Helper()
	set, err := rules.Shorthand{Limits: []string{limit}, KeyBy: "header:X-Consumer-Id", Domain: redistest.Prefix(t)}.Set()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Decider = algorithms.NewDecider(client, algorithms.DecideClock(algorithms.ClockRedis))
	return edge.Middleware(edge.Config{Rules: limiter.FixedRules(set), KeyBy: edge.KeyBy{Header: "X-Consumer-Id"}, Config: cfg},
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

// auditEdge holds ratelab's limiter of algorithm name ("" for the sliding
// log held to the sliding-window rule) to its guarantee; with batch over 1,
// its decisions go to Redis through a Batcher, as ratelab edge
// --redis-batch sends them.
func auditEdge(t *testing.T, name string, batched int) {
	t.Helper()
	redistest.Client(t, srv) // skips, or fails under CI, without redis-server
	uc := redis.NewUniversalClient(limiter.RedisOptions(redis.UniversalOptions{Addrs: []string{srv.Addr}}, time.Second, 64))
	defer uc.Close()
	limited := uc
	if batched > 1 {
		b := batch.New(uc, batch.Options{Max: batched, Flushers: 2, Timeout: 5 * time.Second})
		defer b.Close()
		limited = b.Wrap(uc)
	}
	h := ruledGateway(t, limited, "5/1s:"+cmp.Or(name, "sliding-log"), limiter.Config{DenyCache: true,
		// Far above any decision on a loaded machine: a decision that
		// timed out would fail open, an admission the limiter never made.
		Timeout: 5 * time.Second})
	defer h.Close()
	a := auditExpect(t, h, name, false)
	// Held; or, where a loaded machine's flights hide that a window was
	// full when a denial came, not reached: never accused.
	if a.Verdict != audit.Held && a.Verdict != audit.NotReached || a.OverAdmitted != 0 || a.WorstWindowAdmitted == 0 {
		t.Fatalf("%s: %s %q: admitted %d in %d ms where %d were allowed", name, a.Verdict, a.Reasons, a.WorstWindowAdmitted, a.WorstSpanMillis, a.WorstSpanAllowed)
	}
	// Every denial it made was due: none is one the rule admits.
	if a.DenialsJudged == 0 || a.UnderAdmitted != 0 || a.SharedLimit {
		t.Fatalf("%s: %d of %d denials judged under-admitted (shared: %v)", name, a.UnderAdmitted, a.DenialsJudged, a.SharedLimit)
	}
	if name == "" && a.WorstWindowAdmitted != 5 {
		t.Fatalf("the sliding log admitted %d in one window, want its limit", a.WorstWindowAdmitted)
	}
	if a.Headers.Checked == 0 || a.Headers.Violations != 0 {
		t.Fatalf("headers: %+v", a.Headers)
	}
	// Honest, or on a loaded machine unprobed: every probe's reply
	// too slow to tell early from on time. Never called false.
	if ra := a.RetryAfter; ra.Honest != nil && (!*ra.Honest || ra.Probes == 0) ||
		ra.Honest == nil && !strings.Contains(ra.Skipped, "too slow to tell") {
		t.Fatalf("retry-after: %+v", a.RetryAfter)
	}
}

// TestAuditHoldsABurstApartFromTheLimit: ratelab's gateway enforcing 5
// per second with a burst below the limit, and one above it, passes the
// audit that claims its rate and burst, whose remaining counts down from
// the burst (above the limit for the deeper bucket, which the header
// checks take as honest); claiming a smaller burst than the gateway's,
// the audit finds the burst over-admitted.
func TestAuditHoldsABurstApartFromTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv) // skips, or fails under CI, without redis-server
	for _, tc := range []struct {
		algorithm    string
		burst, claim int64
		held         bool
	}{
		{"gcra", 3, 3, true},
		{"token-bucket", 12, 12, true},
		{"gcra", 12, 3, false},
	} {
		t.Run(fmt.Sprintf("%s/burst %d/claimed %d", tc.algorithm, tc.burst, tc.claim), func(t *testing.T) {
			t.Parallel()
			uc := redis.NewUniversalClient(limiter.RedisOptions(redis.UniversalOptions{Addrs: []string{srv.Addr}}, time.Second, 64))
			defer uc.Close()
			h := ruledGateway(t, uc, fmt.Sprintf("5/1s:%s:burst=%d", tc.algorithm, tc.burst), limiter.Config{Timeout: 5 * time.Second})
			defer h.Close()
			server := httptest.NewServer(h)
			defer server.Close()
			res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: server.URL, Rate: 40, Duration: 3 * time.Second,
				Consumers: 2, ConsumerHeader: "X-Consumer-Id", ExpectLimit: 5, ExpectWindow: time.Second, ExpectAlgorithm: tc.algorithm,
				ExpectBurst: tc.claim, NoProbes: true})
			if err != nil {
				t.Fatal(err)
			}
			a := only(t, res.Audit)
			if a.Burst != tc.claim || !strings.HasPrefix(a.Rule, fmt.Sprintf("a burst of %d, then 5 per 1s", tc.claim)) {
				t.Fatalf("audit of burst %d, rule %q: want the burst claimed", a.Burst, a.Rule)
			}
			// Saved and merged, the run is judged again by the same burst.
			js, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			var saved bench.Result
			if err := json.Unmarshal(js, &saved); err != nil {
				t.Fatal(err)
			}
			merged, err := bench.Merge([]bench.Result{saved}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if m := only(t, merged.Audit); m.Burst != a.Burst || m.Rule != a.Rule || m.Verdict != a.Verdict || m.OverAdmitted != a.OverAdmitted ||
				m.UnderAdmitted != a.UnderAdmitted {
				t.Fatalf("merged: %s burst %d %q, over %d, under %d; the run: %s burst %d %q, over %d, under %d", m.Verdict, m.Burst, m.Rule,
					m.OverAdmitted, m.UnderAdmitted, a.Verdict, a.Burst, a.Rule, a.OverAdmitted, a.UnderAdmitted)
			}
			if !tc.held {
				if a.Verdict != audit.Leaked || a.OverAdmitted == 0 {
					t.Fatalf("%s %q: a burst of %d claimed as %d went unseen", a.Verdict, a.Reasons, tc.burst, tc.claim)
				}
				return
			}
			if a.Verdict != audit.Held || a.OverAdmitted != 0 || a.WorstWindowAdmitted < tc.burst {
				t.Fatalf("%s %q: admitted %d in %d ms where %d were allowed", a.Verdict, a.Reasons, a.WorstWindowAdmitted, a.WorstSpanMillis, a.WorstSpanAllowed)
			}
			if a.DenialsJudged == 0 || a.UnderAdmitted != 0 {
				t.Fatalf("%d of %d denials judged under-admitted", a.UnderAdmitted, a.DenialsJudged)
			}
			if a.Headers.Checked == 0 || a.Headers.Violations != 0 {
				t.Fatalf("headers: %+v", a.Headers)
			}
		})
	}
}

// TestAuditCatchesAnOverAdmittingGateway: a server that admits twice the
// limit it advertises fails the audit whichever algorithm it claims.
func TestAuditCatchesAnOverAdmittingGateway(t *testing.T) {
	t.Parallel()
	for _, name := range algorithms.Algorithms() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := auditExpect(t, &fixedWindow{admit: 10, advertised: 5, real: time.Second, sayRetry: "1"}, name, true)
			if a.OverAdmitted == 0 {
				t.Fatalf("%s: the worst span held %d where %d were allowed: the leak went unseen", name, a.WorstWindowAdmitted, a.WorstSpanAllowed)
			}
		})
	}
}

// auditExpect is auditRun holding the server to algorithm ("" for the
// sliding-window rule).
func auditExpect(t *testing.T, h http.Handler, algorithm string, noProbes bool) audit.LimitAudit {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 40, Duration: 2500 * time.Millisecond,
		Consumers: 2, ConsumerHeader: "X-Consumer-Id", ExpectLimit: 5, ExpectWindow: time.Second, ExpectAlgorithm: algorithm,
		NoProbes: noProbes})
	if err != nil {
		t.Fatal(err)
	}
	a := only(t, res.Audit)
	if a.Algorithm != algorithm {
		t.Fatalf("audit %+v, want one held to %q", a, algorithm)
	}
	return a
}

// TestAuditCatchesFalseRemaining: a server that admits its limit but says
// 0 remaining from the first request on is caught by the header checks.
func TestAuditCatchesFalseRemaining(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	count := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.Header.Get("X-Consumer-Id")
		mu.Lock()
		count[c]++
		n := count[c]
		mu.Unlock()
		w.Header().Set("RateLimit-Policy", `"default";q=5;w=60`)
		w.Header().Set("RateLimit", `"default";r=0;t=60`)
		if n > 5 {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	a := auditRun(t, h, true)
	if a.Headers.Violations == 0 {
		t.Fatalf("headers %+v: the false remaining went unseen", a.Headers)
	}
}

// TestMergedAuditCatchesASplitLeak: four load machines share the
// consumers of a server that admits twice its limit. Each sends a consumer
// 7.5 requests a second, the four 30, and the server admits them all where
// it promised 15: each machine passes its audit (with room for a stalled
// machine's catch-up); merged, the audit sees them all and fails, and the
// counts and histograms add up.
func TestMergedAuditCatchesASplitLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	srv := httptest.NewServer(&fixedWindow{admit: 30, advertised: 15, real: time.Second, sayRetry: "1"})
	defer srv.Close()
	runs := make([]bench.Result, 4)
	var wg sync.WaitGroup
	errs := make([]error, len(runs))
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i], errs[i] = bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 60, Duration: 2500 * time.Millisecond,
				Consumers: 2, ConsumerHeader: "X-Consumer-Id", Shard: i, Shards: len(runs), SharedConsumers: true,
				ExpectLimit: 15, ExpectWindow: time.Second, NoProbes: true})
		}()
	}
	wg.Wait()
	var requests int64
	for i, r := range runs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if a := only(t, r.Audit); a.OverAdmitted != 0 {
			t.Fatalf("machine %d alone saw %d in a window: the test needs each machine to pass", i+1, a.WorstWindowAdmitted)
		}
		requests += r.Requests
	}
	m, err := bench.Merge(runs, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if m.Audit == nil {
		t.Fatalf("no merged audit (note %q)", m.AuditNote)
	}
	if a := only(t, m.Audit); m.Audit.Verdict != audit.Leaked || a.OverAdmitted == 0 || a.WorstWindowAdmitted < 20 {
		t.Fatalf("merged audit %+v: the split leak went unseen", m.Audit)
	}
	if m.Requests != requests || m.Histogram().TotalCount() != requests || m.Audit.Samples != requests {
		t.Fatalf("merged %d requests (%d in the histogram, %d audited), want %d", m.Requests, m.Histogram().TotalCount(), m.Audit.Samples, requests)
	}
	runs[1].Audit = nil
	if m, err = bench.Merge(runs, 0); err != nil || m.Audit != nil || !strings.Contains(m.AuditNote, "run [2] ran without --expect-limit") {
		t.Fatalf("merge with an unaudited run: audit %v, note %q, err %v", m.Audit, m.AuditNote, err)
	}
}

// TestSharedConsumersHonestGateway: three shards share the consumers of
// ratelab's own limiter over a real redis-server. No shard can judge how
// remaining falls alone (the others admit in between), so none does and
// none accuses; merged, the audit judges every response and the gateway
// passes it all. A merged result can be merged again.
func TestSharedConsumersHonestGateway(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	redistest.Client(t, srv)
	uc := redis.NewUniversalClient(limiter.RedisOptions(redis.UniversalOptions{Addrs: []string{srv.Addr}}, 5*time.Second, 64))
	defer uc.Close()
	h := ruledGateway(t, uc, "5/1s:sliding-log", limiter.Config{Timeout: 5 * time.Second})
	defer h.Close()
	gw := httptest.NewServer(h)
	defer gw.Close()
	start := time.Now().Add(300 * time.Millisecond)
	runs := make([]bench.Result, 3)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			runs[i], err = bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: gw.URL, Rate: 60, Duration: 2500 * time.Millisecond,
				Connections: 6, Consumers: 2, ConsumerHeader: "X-Consumer-Id", ExpectLimit: 5, ExpectWindow: time.Second,
				Shard: i, Shards: 3, SharedConsumers: true, StartAt: start})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i, r := range runs {
		a := only(t, r.Audit)
		if a.Headers.Violations != 0 || a.Headers.Partial == "" || a.RetryAfter.Honest != nil || a.OverAdmitted != 0 || a.UnderSkipped == "" {
			t.Fatalf("shard %d alone: %+v", i, a)
		}
	}
	m, err := bench.Merge(runs, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if m.Audit == nil {
		t.Fatalf("no merged audit: %s", m.AuditNote)
	}
	a := only(t, m.Audit)
	if m.Audit.Verdict != audit.Held || a.Headers.Partial != "" || a.Headers.Checked == 0 || a.Headers.Violations != 0 || a.OverAdmitted != 0 ||
		a.WorstWindowAdmitted != 5 || a.UnderSkipped != "" || a.DenialsJudged == 0 || a.UnderAdmitted != 0 {
		t.Fatalf("merged: %+v", m.Audit)
	}
	again, err := bench.Merge([]bench.Result{m}, 0)
	if err != nil || again.Audit == nil || again.Audit.Samples != m.Audit.Samples {
		t.Fatalf("a merge merged again: %+v, %v", again.Audit, err)
	}
}
