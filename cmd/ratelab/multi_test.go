package main

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
)

// policy is one limit of a test gateway: admit requests per window, while
// its headers claim claim (the same, but for a gateway that lies). route,
// when set, limits only requests to that path, and plan only those whose
// X-Plan is that, each on a log of its own.
type policy struct {
	name         string
	admit, claim int
	window       time.Duration
	route, plan  string
}

// How a test gateway decides a request that meets several limits.
const (
	// allAtOnce admits only when every limit admits, and then counts it in
	// each.
	allAtOnce = iota
	// sequential asks each limit in turn, which counts the request as soon
	// as it admits it: a request that a later limit denies has still taken
	// a slot of the earlier ones.
	sequential
)

// multiLimit is a gateway ratelab did not write: per consumer
// (X-Consumer-Id), an exact sliding log for each of its limits, state in
// maps, and draft-10 headers that name every policy the request met, with
// Retry-After on a 429 when every limit that denied admits again.
func multiLimit(t *testing.T, mode int, policies ...policy) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	logs := map[string][]time.Time{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		consumer := r.Header.Get("X-Consumer-Id")
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		var met []policy
		for _, p := range policies {
			if (p.route == "" || p.route == r.URL.Path) && (p.plan == "" || p.plan == r.Header.Get("X-Plan")) {
				met = append(met, p)
			}
		}
		key := func(p policy) string { return p.name + "/" + consumer }
		for _, p := range met {
			log := logs[key(p)]
			for len(log) > 0 && !log[0].After(now.Add(-p.window)) {
				log = log[1:]
			}
			logs[key(p)] = log
		}
		// frees is when p admits again.
		frees := func(p policy) time.Duration {
			log := logs[key(p)]
			if len(log) < p.admit {
				return 0
			}
			return log[len(log)-p.admit].Add(p.window).Sub(now)
		}
		var retry time.Duration
		denied := false
		switch mode {
		case allAtOnce:
			for _, p := range met {
				if d := frees(p); d > 0 {
					denied, retry = true, max(retry, d)
				}
			}
			if !denied {
				for _, p := range met {
					logs[key(p)] = append(logs[key(p)], now)
				}
			}
		case sequential:
			for _, p := range met {
				if d := frees(p); d > 0 {
					denied, retry = true, d
					break
				}
				logs[key(p)] = append(logs[key(p)], now)
			}
		}
		var pol, rl []string
		for _, p := range met {
			log := logs[key(p)]
			reset := p.window
			if len(log) > 0 {
				reset = log[0].Add(p.window).Sub(now)
			}
			pol = append(pol, fmt.Sprintf("%q;q=%d;w=%d", p.name, p.claim, int(p.window/time.Second)))
			rl = append(rl, fmt.Sprintf("%q;r=%d;t=%d", p.name, max(p.claim-len(log), 0), ceilSecs(reset)))
		}
		w.Header().Set("RateLimit-Policy", strings.Join(pol, ", "))
		w.Header().Set("RateLimit", strings.Join(rl, ", "))
		if denied {
			w.Header().Set("Retry-After", strconv.Itoa(ceilSecs(retry)))
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func ceilSecs(d time.Duration) int { return int(math.Ceil(d.Seconds())) }

// TestAuditSeveralLimits: a gateway with 5 per 1 s and 12 per 10 s per
// consumer, decided atomically with headers naming both, passes an audit
// of both with no header violation (and its Retry-After honest); one that
// admits 24 per 10 s while it claims 12 is caught, and the message names
// the 10 s limit; one that decides the limits one after the other is
// judged as what it does, never accused of a leak it has not. Rates are
// ten times the limits: admissions, not scheduling, decide each verdict.
func TestAuditSeveralLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	perSecond := policy{name: "per-second", admit: 5, claim: 5, window: time.Second}
	per10s := policy{name: "per-10s", admit: 12, claim: 12, window: 10 * time.Second}
	leaky := per10s
	leaky.admit = 24
	load := []string{"--rate", "100", "--duration", "4s", "--consumers", "2", "--fail-on-leak", "-o", "json"}
	both := []string{"--expect-limit", "5/1s", "--expect-limit", "12/10s"}
	for _, tc := range []struct {
		name   string
		srv    *httptest.Server
		expect []string
		probes bool
		check  func(t *testing.T, code int, res bench.Result, stderr string)
	}{
		{name: "correct", srv: multiLimit(t, allAtOnce, perSecond, per10s), expect: both, probes: true, check: func(t *testing.T, code int, res bench.Result, stderr string) {
			for _, l := range res.Audit.Limits {
				if l.Headers.Checked == 0 || l.Headers.Violations != 0 || l.Verdict != audit.Held {
					t.Errorf("%s: %s, %d of %d responses with wrong headers (%s)", l.ID, l.Verdict, l.Headers.Violations, l.Headers.Checked, l.Headers.Example)
				}
			}
			// Honest, or on a loaded machine unprobed: every probe's reply
			// too slow to tell early from on time. Never called false.
			if ra := res.Audit.Limits[0].RetryAfter; ra.Honest != nil && !*ra.Honest ||
				ra.Honest == nil && !strings.Contains(ra.Skipped, "too slow to tell") {
				t.Errorf("Retry-After %+v, want honest", ra)
			}
			if code != exitOK || res.Audit.Verdict != audit.Held {
				t.Fatalf("exit %d, %s %q, stderr %q", code, res.Audit.Verdict, res.Audit.Reasons, stderr)
			}
		}},
		{name: "leaky", srv: multiLimit(t, allAtOnce, perSecond, leaky), expect: both, check: func(t *testing.T, code int, res bench.Result, stderr string) {
			l := res.Audit.Limits[1]
			if code != exitThreshold || res.Audit.Verdict != audit.Leaked || l.Verdict != audit.Leaked || l.ID != "12/10s" ||
				!strings.Contains(stderr, "--fail-on-leak: 12/10s: ") || !strings.Contains(stderr, "over the 12 allowed") {
				t.Fatalf("exit %d, %s %q, stderr %q", code, res.Audit.Verdict, res.Audit.Reasons, stderr)
			}
			if first := res.Audit.Limits[0]; first.Verdict != audit.Held {
				t.Fatalf("5/1s, which the gateway keeps, is %s %q", first.Verdict, first.Reasons)
			}
		}},
		{name: "sequential", srv: multiLimit(t, sequential, perSecond, per10s), expect: both, check: func(t *testing.T, _ int, res bench.Result, stderr string) {
			for _, l := range res.Audit.Limits {
				if l.Verdict == audit.Leaked || l.OverAdmitted != 0 {
					t.Errorf("%s: %s %q: a gateway that never admits beyond a limit is accused", l.ID, l.Verdict, l.Reasons)
				}
			}
			if res.Audit.Verdict == audit.Leaked || strings.Contains(stderr, "over the") {
				t.Fatalf("%s %q, stderr %q", res.Audit.Verdict, res.Audit.Reasons, stderr)
			}
		}},
		{name: "one of two", srv: multiLimit(t, allAtOnce, perSecond, per10s), expect: []string{"--expect-limit", "12/10s"},
			check: func(t *testing.T, code int, res bench.Result, stderr string) {
				// Its policy is read among the two the gateway names: the
				// other is one the audit was not told of, not a wrong one.
				if l := res.Audit.Limits[0]; code != exitOK || l.Headers.Checked == 0 || l.Headers.Violations != 0 || l.Verdict != audit.Held {
					t.Fatalf("exit %d, stderr %q: %s, %d of %d responses with wrong headers (%s)", code, stderr, l.Verdict,
						l.Headers.Violations, l.Headers.Checked, l.Headers.Example)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{"bench", "http", tc.srv.URL}, load...), tc.expect...)
			if !tc.probes {
				args = append(args, "--no-probes")
			}
			code, stdout, stderr := ratelab(t, args...)
			var res bench.Result
			decodeJSON(t, stdout, &res)
			if res.Audit == nil || len(res.Audit.Limits) != len(tc.expect)/2 || res.Audit.Limits[0].ID != tc.expect[1] {
				t.Fatalf("exit %d, stderr %q, audit %+v", code, stderr, res.Audit)
			}
			tc.check(t, code, res, stderr)
		})
	}
}

// TestMergeSeveralLimits: two load machines audit one gateway of 5 per
// 1 s and 12 per 10 s per consumer at once; their results merged hold
// both limits with no header violation (the policies each response named
// are kept for the merge), and a gateway that admits 24 per 10 s while
// each machine alone saw no more than 12 is caught in the merge.
func TestMergeSeveralLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	perSecond := policy{name: "per-second", admit: 5, claim: 5, window: time.Second}
	per10s := policy{name: "per-10s", admit: 12, claim: 12, window: 10 * time.Second}
	leaky := per10s
	leaky.admit = 24
	for _, tc := range []struct {
		name    string
		srv     *httptest.Server
		code    int
		verdict audit.Verdict
	}{
		{"correct", multiLimit(t, allAtOnce, perSecond, per10s), exitOK, audit.Held},
		{"leaky", multiLimit(t, allAtOnce, perSecond, leaky), exitThreshold, audit.Leaked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var wg sync.WaitGroup
			for _, shard := range []string{"0/2", "1/2"} {
				wg.Go(func() {
					_, out, _ := ratelab(t, "bench", "http", tc.srv.URL, "--rate", "100", "--duration", "3s", "--consumers", "1",
						"--shard", shard, "--shared-consumers", "--expect-limit", "5/1s,12/10s", "--no-probes", "-o", "json")
					if err := os.WriteFile(filepath.Join(dir, strings.ReplaceAll(shard, "/", "-")+".json"), []byte(out), 0o644); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			code, stdout, stderr := ratelab(t, "report", "merge", filepath.Join(dir, "0-2.json"), filepath.Join(dir, "1-2.json"),
				"--fail-on-leak", "-o", "json")
			var res bench.Result
			decodeJSON(t, stdout, &res)
			if code != tc.code || res.Audit == nil || res.Audit.Verdict != tc.verdict || len(res.Audit.Limits) != 2 {
				t.Fatalf("exit %d, stderr %q, audit %+v", code, stderr, res.Audit)
			}
			for _, l := range res.Audit.Limits {
				if l.Headers.Checked == 0 || l.Headers.Violations != 0 && tc.verdict == audit.Held {
					t.Errorf("%s: %d of %d responses with wrong headers (%s)", l.ID, l.Headers.Violations, l.Headers.Checked, l.Headers.Example)
				}
			}
		})
	}
}

// TestMergeRules: two load machines audit one gateway by its rules file;
// the merge judges each limit on every machine's requests that met each
// counter: a gateway that honours the file holds, one that ignores its
// /search limit is caught by name. Three requests in four are to /search,
// so that its limit denies some that no other limit could have: each
// limit is tested.
func TestMergeRules(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(shopRules), 0o644); err != nil {
		t.Fatal(err)
	}
	perConsumer := policy{name: "per-second", admit: 5, claim: 5, window: time.Second}
	search := policy{name: "search", admit: 2, claim: 2, window: time.Second, route: "/search"}
	trial := policy{name: "trial", admit: 3, claim: 3, window: time.Second, plan: "trial"}
	for _, tc := range []struct {
		name    string
		srv     *httptest.Server
		code    int
		verdict audit.Verdict
	}{
		{"honoured", multiLimit(t, allAtOnce, perConsumer, search, trial), exitOK, audit.Held},
		{"ignored", multiLimit(t, allAtOnce, perConsumer, trial), exitThreshold, audit.Leaked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var wg sync.WaitGroup
			for _, shard := range []string{"0/2", "1/2"} {
				wg.Go(func() {
					_, out, _ := ratelab(t, "bench", "http", tc.srv.URL, "--rate", "100", "--duration", "3s", "--consumers", "2",
						"--shard", shard, "--shared-consumers", "--expect-rules", file, "--path", "/search:3", "--path", "/items:1",
						"--consumer-values", "X-Plan: trial,paid",
						"--no-probes", "-o", "json")
					if err := os.WriteFile(filepath.Join(dir, strings.ReplaceAll(shard, "/", "-")+".json"), []byte(out), 0o644); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			code, stdout, stderr := ratelab(t, "report", "merge", filepath.Join(dir, "0-2.json"), filepath.Join(dir, "1-2.json"),
				"--fail-on-leak", "-o", "json")
			var res bench.Result
			decodeJSON(t, stdout, &res)
			if code != tc.code || res.Audit == nil || res.Audit.Verdict != tc.verdict || len(res.Audit.Limits) != 3 {
				t.Fatalf("exit %d, stderr %q, note %q, audit %+v", code, stderr, res.AuditNote, res.Audit)
			}
			if s := res.Audit.Limits[1]; s.ID != "search" || s.Verdict != tc.verdict || s.Consumers != 2 ||
				tc.verdict == audit.Leaked && !strings.Contains(stderr, "--fail-on-leak: search: ") {
				t.Fatalf("search: %s %q, %d consumers; stderr %q", s.Verdict, s.Reasons, s.Consumers, stderr)
			}
		})
	}
}

// shopRules is a rules file: 5 per second per consumer, 2 per second of
// those on /search, and 3 per second for a consumer on the trial plan.
const shopRules = `domain: shop
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: per-second, unit: second, requests_per_unit: 5}
    descriptors:
      - key: path
        value: /search
        rate_limit: {name: search, unit: second, requests_per_unit: 2}
  - key: header:X-Plan
    value: trial
    descriptors:
      - key: header:X-Consumer-Id
        rate_limit: {name: trial, unit: second, requests_per_unit: 3}
`

// TestAuditRules: a gateway that honours a rules file (a limit per
// consumer, a stricter one on /search and one on the trial plan, each on a
// log of its own) passes an audit by that file, each limit judged on its
// own counters over a mix of routes and plans, with no header violation;
// one that ignores the /search limit is caught, and the message names it.
// A file keyed by the client's address judges the one client the engine
// sends from.
func TestAuditRules(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(shopRules), 0o644); err != nil {
		t.Fatal(err)
	}
	perConsumer := policy{name: "per-second", admit: 5, claim: 5, window: time.Second}
	search := policy{name: "search", admit: 2, claim: 2, window: time.Second, route: "/search"}
	trial := policy{name: "trial", admit: 3, claim: 3, window: time.Second, plan: "trial"}
	load := []string{"--rate", "100", "--duration", "3s", "--consumers", "2", "--expect-rules", file, "--no-probes", "--fail-on-leak",
		"--consumer-values", "X-Plan: trial,paid", "-o", "json"}
	t.Run("honoured", func(t *testing.T) {
		t.Parallel()
		srv := multiLimit(t, allAtOnce, perConsumer, search, trial)
		// Three requests in four to /search, so that its limit denies some
		// that no other limit could have: each limit is tested.
		code, stdout, stderr := ratelab(t, append([]string{"bench", "http", srv.URL, "--path", "/search:3", "--path", "/items:1",
			"--allow-untested", "search"}, load...)...)
		var res bench.Result
		decodeJSON(t, stdout, &res)
		if res.Audit == nil || len(res.Audit.Limits) != 3 {
			t.Fatalf("exit %d, stderr %q, audit %+v", code, stderr, res.Audit)
		}
		for i, l := range res.Audit.Limits {
			consumers := []int{2, 2, 1}[i] // consumer-0 alone is on trial
			// search's denials meet per-second's full window as well, on a
			// loaded machine often enough that none is its own alone: it may
			// go not reached, never accused.
			held := l.Verdict == audit.Held || l.ID == "search" && l.Verdict == audit.NotReached
			if !held || l.Headers.Checked == 0 || l.Headers.Violations != 0 || l.Consumers != consumers {
				t.Errorf("%s (%s): %s %q, %d consumers, %d of %d responses with wrong headers (%s)", l.ID, l.Descriptor, l.Verdict, l.Reasons,
					l.Consumers, l.Headers.Violations, l.Headers.Checked, l.Headers.Example)
			}
		}
		if s, p := res.Audit.Limits[1], res.Audit.Limits[0]; s.ID != "search" || s.Requests >= p.Requests || s.Requests == 0 {
			t.Errorf("search met %d requests, per-second %d: want some, fewer", s.Requests, p.Requests)
		}
		if code != exitOK {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("ignored", func(t *testing.T) {
		t.Parallel()
		srv := multiLimit(t, allAtOnce, perConsumer, trial)
		code, stdout, stderr := ratelab(t, append([]string{"bench", "http", srv.URL, "--path", "/search"}, load...)...)
		var res bench.Result
		decodeJSON(t, stdout, &res)
		if code != exitThreshold || res.Audit == nil || res.Audit.Verdict != audit.Leaked || !strings.Contains(stderr, "--fail-on-leak: search: ") {
			t.Fatalf("exit %d, stderr %q, audit %+v", code, stderr, res.Audit)
		}
		// Every request is to /search: each that per-second denied met
		// search's window full too, so nothing shows per-second enforced
		// rather than search at a higher rate. It is never accused.
		if l := res.Audit.Limits[0]; (l.Verdict != audit.Held && l.Verdict != audit.NotReached) || res.Audit.Limits[1].Verdict != audit.Leaked {
			t.Fatalf("per-second, which the gateway keeps, is %s %q", l.Verdict, l.Reasons)
		}
	})
	t.Run("by address", func(t *testing.T) {
		t.Parallel()
		byAddress := filepath.Join(t.TempDir(), "rules.yaml")
		src := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per-address, unit: second, requests_per_unit: 5}\n"
		if err := os.WriteFile(byAddress, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		srv := multiLimit(t, allAtOnce, policy{name: "per-address", admit: 5, claim: 5, window: time.Second})
		code, stdout, stderr := ratelab(t, "bench", "http", srv.URL, "--rate", "50", "--duration", "2500ms", "--consumer-header", "",
			"--expect-rules", byAddress, "--no-probes", "--fail-on-leak", "-o", "json")
		var res bench.Result
		decodeJSON(t, stdout, &res)
		if code != exitOK || res.Audit == nil || len(res.Audit.Limits) != 1 || res.Audit.Limits[0].Consumers != 1 ||
			res.Audit.Limits[0].WorstConsumer != "the client" || res.Audit.Limits[0].Requests != res.Requests {
			t.Fatalf("exit %d, stderr %q, audit %+v", code, stderr, res.Audit)
		}
	})
}

// TestAuditBadInput: what the audit is told to expect, and the mix it is
// told to send, are checked before anything is sent: each mistake exits 2
// naming its flag.
func TestAuditBadInput(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Add(1) }))
	defer srv.Close()
	dir := t.TempDir()
	good := filepath.Join(dir, "rules.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	envoy := filepath.Join(dir, "envoy.yaml")
	for file, src := range map[string]string{good: shopRules, bad: strings.Replace(shopRules, "requests_per_unit: 2", "requests_per_unit: 0", 1),
		envoy: "domain: d\ndescriptors:\n  - key: database\n    rate_limit: {unit: second, requests_per_unit: 1}\n"} {
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--expect-limit", "5/1s", "--expect-limit", "6/1s"}, "--expect-limit 5/1s and 6/1s are two limits on one window (1s): keep one"},
		{[]string{"--expect-limit", "5/1s,10/1000ms"}, "are two limits on one window"},
		{[]string{"--expect-limit", "5/1s,12/10s:nope"}, `--expect-limit "12/10s:nope": "nope" is not an algorithm`},
		{[]string{"--expect-limit", "5/1s,"}, `--expect-limit "": `},
		{[]string{"--expect-limit", "5/1s", "--expect-rules", good}, "--expect-rules and --expect-limit are two audits: give one"},
		{[]string{"--expect-rules", good, "--expect-algorithm", "gcra"}, "--expect-algorithm is for --expect-limit"},
		{[]string{"--expect-rules", bad}, "--expect-rules: " + bad + ":9: descriptors[0].descriptors[0].rate_limit.requests_per_unit"},
		{[]string{"--expect-rules", envoy}, "--expect-rules: " + envoy + ":3: descriptors[0].key"},
		{[]string{"--expect-rules", filepath.Join(dir, "none.yaml")}, "--expect-rules: open "},
		{[]string{"--fail-on-leak"}, "--fail-on-leak needs --expect-limit, --expect-rules or --expect-in-flight"},
		{[]string{"--path", "search"}, `--path "search" is not a path`},
		{[]string{"--path", "/a:0"}, "--path /a: the weight must be between 1 and 1000 (got 0)"},
		{[]string{"--consumer-values", "X-Plan"}, `--consumer-values "X-Plan": want NAME: VALUE[:WEIGHT]`},
		{[]string{"--consumer-values", "X-Consumer-Id: a"}, "--consumer-values X-Consumer-Id is the consumer header"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := ratelab(t, append([]string{"bench", "http", srv.URL, "--rate", "10", "--duration", "1s"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stderr %q: want %d and %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}
