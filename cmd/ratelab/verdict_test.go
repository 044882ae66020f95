package main

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// slidingLog is a gateway with an exact sliding log per consumer (in
// X-Consumer-Id), or one for every consumer with shared, admitting admit
// per window; it advertises nothing but Retry-After.
func slidingLog(t *testing.T, admit int, window time.Duration, shared bool) *httptest.Server {
	var mu sync.Mutex
	logs := map[string][]time.Time{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Consumer-Id")
		if shared {
			key = ""
		}
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		log := logs[key]
		for len(log) > 0 && !log[0].After(now.Add(-window)) {
			log = log[1:]
		}
		if len(log) >= admit {
			logs[key] = log
			w.Header().Set("Retry-After", strconv.Itoa(int(log[0].Add(window).Sub(now).Seconds())+1))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		logs[key] = append(log, now)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestBenchGateCannotBeFooled: a gateway that answers 400 (or 401) to
// every request held nothing anyone could see. --fail-on-leak exits 3 with
// no verdict and the statuses seen, unless --allow-no-verdict; so does
// --max-error-rate, naming the statuses; and a target that refuses every
// connection exits 1, with the error kinds and no response percentiles.
func TestBenchGateCannotBeFooled(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusBadRequest, http.StatusUnauthorized} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
			defer srv.Close()
			load := []string{"bench", "http", srv.URL, "--rate", "100", "--duration", "500ms", "--consumers", "5", "--expect-limit", "10/1s"}
			seen := regexp.MustCompile(strconv.Itoa(status) + ` × \d+`)
			for _, tc := range []struct {
				flags []string
				code  int
				want  []string // in stderr
			}{
				{[]string{"--fail-on-leak", "--max-error-rate", "0.01"}, exitThreshold, []string{
					"--max-error-rate: 1.0000 of requests failed, above 0.01 (errors by status: ",
					"--fail-on-leak: no verdict: most responses, ", "were neither 2xx nor 429", "(statuses seen: ",
				}},
				{[]string{"--fail-on-leak", "--allow-no-verdict"}, exitOK, nil},
				{[]string{"--max-error-rate", "0.01"}, exitThreshold, []string{"errors by status: "}},
				{nil, exitOK, nil},
			} {
				code, stdout, stderr := ratelab(t, append(load, tc.flags...)...)
				if code != tc.code || !strings.Contains(stdout, ": NO VERDICT: ") || !seen.MatchString(stdout) {
					t.Fatalf("%v: exit %d, want %d; stderr %q\n%s", tc.flags, code, tc.code, stderr, stdout)
				}
				for _, w := range tc.want {
					if !strings.Contains(stderr, w) || !seen.MatchString(stderr) {
						t.Errorf("%v: stderr %q lacks %q or the statuses", tc.flags, stderr, w)
					}
				}
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t) // nothing listens there
		code, stdout, stderr := ratelab(t, "bench", "http", "http://"+addr+"/", "--rate", "0", "--connections", "2", "--requests", "20",
			"--expect-limit", "10/1s", "--fail-on-leak", "--max-error-rate", "0.01")
		if code != exitError || !strings.Contains(stderr, "no request got a response: 20 of 20 failed: refused 20 (first: ") {
			t.Fatalf("exit %d, stderr %q; want 1 and the error kinds", code, stderr)
		}
		if !regexp.MustCompile(`all responses +│ 0 +│ –`).MatchString(stdout) ||
			!regexp.MustCompile(`no response \(time to fail\) +│ 20 `).MatchString(stdout) {
			t.Fatalf("the failed connections are not apart from the responses:\n%s", stdout)
		}
	})
}

// TestBenchUnderAdmission: a gateway that admits 2 a second to each
// consumer while the run expects 10 is reported as under-admitting, with
// the count, and --fail-on-under exits 3 on it; the two consumers together
// stay far below one consumer's limit, so it is no shared limit. The limit
// it claims was never reached (no denial was its own): --fail-on-leak
// says so.
func TestBenchUnderAdmission(t *testing.T) {
	t.Parallel()
	srv := slidingLog(t, 2, time.Second, false)
	code, stdout, stderr := ratelab(t, "bench", "http", srv.URL, "--rate", "40", "--duration", "2500ms", "--consumers", "2",
		"--expect-limit", "10/1s", "--no-probes", "--fail-on-leak", "--fail-on-under", "0.5", "-o", "json")
	var res bench.Result
	decodeJSON(t, stdout, &res)
	if res.Audit == nil || len(res.Audit.Limits) != 1 {
		t.Fatalf("audit %+v", res.Audit)
	}
	l := res.Audit.Limits[0]
	if res.Audit.Verdict != audit.NotReached || l.SharedLimit || l.UnderAdmitted == 0 || l.UnderAdmitted != l.DenialsJudged || l.DenialsAttributed != 0 {
		t.Fatalf("%s %q: %d of %d denials judged under-admitted (shared %v), %d its own; want not reached, every one under", res.Audit.Verdict,
			res.Audit.Reasons, l.UnderAdmitted, l.DenialsJudged, l.SharedLimit, l.DenialsAttributed)
	}
	want := "--fail-on-under: " + strconv.FormatInt(l.UnderAdmitted, 10) + " of the " + strconv.FormatInt(l.DenialsJudged, 10) + " denials judged (100.0%)"
	if code != exitThreshold || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--fail-on-leak: not reached: 2 of 10 in 1s: not tested") {
		t.Fatalf("exit %d, stderr %q; want 3, %q and not reached", code, stderr, want)
	}
	code, stdout, _ = ratelab(t, "bench", "http", srv.URL, "--rate", "40", "--duration", "2500ms", "--consumers", "2",
		"--expect-limit", "10/1s", "--no-probes")
	if code != exitOK || !regexp.MustCompile(`UNDER-ADMITTING: \d+ of the \d+ denials judged \(100\.0%\) would have been admitted`).MatchString(stdout) {
		t.Fatalf("exit %d:\n%s", code, stdout)
	}
}

// TestBenchSharedLimit: a gateway that limits every consumer together, on
// one key, is said to share one limit across the identities sent: not
// held, and --fail-on-leak exits 3 even with --allow-no-verdict.
func TestBenchSharedLimit(t *testing.T) {
	t.Parallel()
	srv := slidingLog(t, 10, time.Second, true)
	code, stdout, stderr := ratelab(t, "bench", "http", srv.URL, "--rate", "60", "--duration", "2500ms", "--consumers", "3",
		"--expect-limit", "10/1s", "--no-probes", "--fail-on-leak", "--allow-no-verdict")
	const said = "the gateway seems to share one limit across the identities sent"
	if code != exitThreshold || !strings.Contains(stderr, "--fail-on-leak: no verdict: "+said) || !strings.Contains(stdout, said) ||
		strings.Contains(stdout, "HELD") {
		t.Fatalf("exit %d, stderr %q\n%s", code, stderr, stdout)
	}
}

// TestEdgeNeverUnderAdmits: ratelab edge with each algorithm, over a real
// redis-server, audited as that algorithm under loads that push its
// consumers over the limit (four times it, just over it, and back to
// back), holds every time and never denies what its rule admits:
// --fail-on-under 0 passes. The loads run one after the other on one
// gateway, so each begins with the last one's state: denials a lookback
// into a run are not judged.
func TestEdgeNeverUnderAdmits(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	for _, name := range algorithms.Algorithms() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A database of its own: other tests' gateways send consumer-0 too.
			addr := serveEdge(t, "--redis", srv.URL()+"/7", "--key-by", "header:X-Consumer-Id", "--algorithm", name, "--limit", "5/500ms").addr
			for _, load := range [][]string{
				{"--rate", "40"}, // 20 a second each, where 10 are allowed
				{"--rate", "28"}, // 14 each
				{"--rate", "0", "--connections", "4"},
			} {
				args := append([]string{"bench", "http", "http://" + addr + "/", "--duration", "2500ms", "--consumers", "2",
					"--expect-limit", "5/500ms", "--expect-algorithm", name, "--no-probes", "--fail-on-leak", "--fail-on-under", "0",
					"--allow-untested", "5/500ms:" + name, "-o", "json"}, load...)
				code, stdout, stderr := ratelab(t, args...)
				var res bench.Result
				decodeJSON(t, stdout, &res)
				// Just over the limit, a loaded machine's flights may hide that a
				// window was full when a denial came: not reached, never accused.
				if code != exitOK || res.Audit == nil || res.Audit.Verdict != audit.Held && res.Audit.Verdict != audit.NotReached {
					t.Fatalf("%v: exit %d, stderr %q, audit %+v", load, code, stderr, res.Audit)
				}
				if l := res.Audit.Limits[0]; l.Denials == 0 || l.UnderAdmitted != 0 {
					t.Fatalf("%v: %d of %d denials judged under-admitted", load, l.UnderAdmitted, l.DenialsJudged)
				}
			}
		})
	}
}

// TestVerdictFlagsRefused: the verdict's flags are checked before anything
// is sent, and the message names the flag.
func TestVerdictFlagsRefused(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Add(1) }))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "http", srv.URL, "--expect-limit", "5/1s", "--allow-no-verdict"}, "--allow-no-verdict needs --fail-on-leak"},
		{[]string{"bench", "http", srv.URL, "--fail-on-under", "0.1"}, "--fail-on-under needs --expect-limit"},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "5/1s", "--fail-on-under", "1.5"}, "--fail-on-under must be between 0 and 1 (got 1.5)"},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "5/1s", "--fail-on-under", "some"}, `invalid argument "some" for "--fail-on-under"`},
		{[]string{"report", "merge", "a.json", "--allow-no-verdict"}, "--allow-no-verdict needs --fail-on-leak"},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "5/1s", "--allow-untested", "5/1s"}, "--allow-untested needs --fail-on-leak"},
		{[]string{"bench", "http", srv.URL, "--expect-limit", "5/1s,100/1h", "--fail-on-leak", "--allow-untested", "100/1h,5/2s"},
			`--allow-untested "5/2s" is not a limit the audit judges (its limits: 5/1s, 100/1h)`},
		{[]string{"bench", "rls", "127.0.0.1:1", "--domain", "d", "--descriptor", "user={consumer}", "--expect-limit", "5/1s", "--fail-on-leak",
			"--allow-untested", "user=x"}, `--allow-untested "user=x" is not a limit the audit judges (its limits: user={consumer})`},
		{[]string{"report", "merge", "a.json", "--allow-untested", "5/1s"}, "--allow-untested needs --fail-on-leak"},
		{[]string{"report", "merge", "a.json", "--fail-on-under", "-1"}, "--fail-on-under must be between 0 and 1 (got -1)"},
	} {
		code, stdout, stderr := ratelab(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}
