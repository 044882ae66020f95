package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// searchRules limits each consumer to 10 a second, and 2 a second of
// those on /search.
const searchRules = `domain: DOMAIN
descriptors:
  - key: header:X-Consumer-Id
    rate_limit: {name: per-second, unit: second, requests_per_unit: 10}
    descriptors:
      - key: path
        value: /search
        rate_limit: {name: search, unit: second, requests_per_unit: 2}
`

// problemAudit is the audit of a gateway at url by searchRules' file:
// two consumers, half of the requests to /search, 50 a second each, five
// times the per-second limit: of the 10 a second each is admitted, half
// go to /search, over its 2, so that both limits deny.
func problemAudit(url, file string) []string {
	return []string{"bench", "http", url, "--rate", "100", "--duration", "2s", "--consumers", "2", "--expect-rules", file,
		"--path", "/search:1", "--path", "/items:1", "--no-probes", "--fail-on-leak", "-o", "json"}
}

// TestViolatedPoliciesEdge: ratelab edge's 429s name, in their problem
// body's violated-policies, the limits that refused, with nothing
// remaining of them: the audit checks every one and finds no fault, on
// either engine.
func TestViolatedPoliciesEdge(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	for _, engine := range []string{"go", "openresty"} {
		t.Run(engine, func(t *testing.T) {
			needNginx(t, engine)
			t.Parallel()
			file := writeRules(t, "rules.yaml", strings.ReplaceAll(searchRules, "DOMAIN", redistest.Prefix(t)))
			url := serveRules(t, engine, file)
			code, stdout, stderr := ratelab(t, problemAudit(url, file)...)
			var res bench.Result
			decodeJSON(t, stdout, &res)
			if res.Audit == nil || len(res.Audit.Limits) != 2 {
				t.Fatalf("exit %d, stderr %q, audit %+v", code, stderr, res.Audit)
			}
			for _, l := range res.Audit.Limits {
				if l.Denials == 0 || l.Headers.Named == 0 || l.Headers.Violations != 0 {
					t.Errorf("%s: %d denials, named in %d 429s, %d header violations (%s)", l.ID, l.Denials, l.Headers.Named,
						l.Headers.Violations, l.Headers.Example)
				}
			}
			if code != exitOK {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
		})
	}
}

// problemGateway is a gateway ratelab did not write that keeps
// searchRules exactly (a sliding log per consumer for each limit, decided
// all at once) and answers a denial with draft-10 headers for every limit
// the request met and a problem body of quota-exceeded, whose
// violated-policies names says; with lie, its RateLimit says 1 remains of
// each limit that denied.
func problemGateway(t *testing.T, names func(path string, denied []string) []string, lie bool) *httptest.Server {
	t.Helper()
	type limit struct {
		name  string
		admit int
	}
	var mu sync.Mutex
	logs := map[string][]time.Time{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		met := []limit{{"per-second", 10}}
		if r.URL.Path == "/search" {
			met = append(met, limit{"search", 2})
		}
		var denied, pol, rl []string
		for _, l := range met {
			key := l.name + "/" + r.Header.Get("X-Consumer-Id")
			log := logs[key]
			for len(log) > 0 && !log[0].After(now.Add(-time.Second)) {
				log = log[1:]
			}
			logs[key] = log
			if len(log) >= l.admit {
				denied = append(denied, l.name)
			}
		}
		for _, l := range met {
			key := l.name + "/" + r.Header.Get("X-Consumer-Id")
			if len(denied) == 0 {
				logs[key] = append(logs[key], now)
			}
			remaining := l.admit - len(logs[key])
			if lie && len(denied) > 0 && remaining == 0 {
				remaining = 1
			}
			pol = append(pol, fmt.Sprintf("%q;q=%d;w=1", l.name, l.admit))
			rl = append(rl, fmt.Sprintf("%q;r=%d;t=1", l.name, remaining))
		}
		w.Header().Set("RateLimit-Policy", strings.Join(pol, ", "))
		w.Header().Set("RateLimit", strings.Join(rl, ", "))
		if len(denied) == 0 {
			return
		}
		w.Header().Set("Retry-After", strconv.Itoa(1))
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": edge.QuotaExceeded, "status": 429, "violated-policies": names(r.URL.Path, denied)})
	}))
	t.Cleanup(s.Close)
	return s
}

// TestViolatedPoliciesWrong: a gateway whose 429s name the limits that
// refused passes (as does one naming a policy the audit was not told of);
// one that names a limit the request did not meet, or one of which its
// own RateLimit says something remains, is caught (exit 3), the fault
// counted against the limit named.
func TestViolatedPoliciesWrong(t *testing.T) {
	t.Parallel()
	file := writeRules(t, "rules.yaml", strings.ReplaceAll(searchRules, "DOMAIN", "shop"))
	honest := func(_ string, denied []string) []string { return denied }
	for _, tc := range []struct {
		name    string
		names   func(path string, denied []string) []string
		lie     bool
		named   bool // each limit is named in some 429
		code    int
		faulted []string // the limits whose headers are faulted
		example string
	}{
		{"names the limits that refused", honest, false, true, exitOK, nil, ""},
		{"names a policy the audit was not told of", func(string, []string) []string { return []string{"per-day"} }, false, false, exitOK, nil, ""},
		{"names search for /items", func(path string, denied []string) []string {
			if path == "/items" {
				return []string{"search"}
			}
			return denied
		}, false, true, exitThreshold, []string{"search"}, "was refused with violated-policies naming \"search\", a limit its request did not meet"},
		{"says 1 remains of what it names", honest, true, true, exitThreshold, []string{"per-second", "search"},
			"was refused with violated-policies naming \"ID\", of which the same response said 1 remained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gw := problemGateway(t, tc.names, tc.lie)
			code, stdout, stderr := ratelab(t, problemAudit(gw.URL, file)...)
			var res bench.Result
			decodeJSON(t, stdout, &res)
			if code != tc.code || res.Audit == nil || len(res.Audit.Limits) != 2 {
				t.Fatalf("exit %d, stderr %q, audit %+v; want exit %d", code, stderr, res.Audit, tc.code)
			}
			for _, l := range res.Audit.Limits {
				if l.Verdict != audit.Held {
					t.Errorf("%s: %s %q", l.ID, l.Verdict, l.Reasons)
				}
				example := strings.ReplaceAll(tc.example, "ID", l.ID)
				if faulted := slices.Contains(tc.faulted, l.ID); faulted != (l.Headers.Violations > 0) || faulted && !strings.Contains(l.Headers.Example, example) {
					t.Errorf("%s: %d header violations (%s), named in %d 429s; want them %v: %q", l.ID, l.Headers.Violations, l.Headers.Example,
						l.Headers.Named, faulted, example)
				}
				if tc.named != (l.Headers.Named > 0) {
					t.Errorf("%s: named in %d 429s, want some: %v", l.ID, l.Headers.Named, tc.named)
				}
			}
			for _, id := range tc.faulted {
				if !strings.Contains(stderr, "--fail-on-leak: "+id+": ") {
					t.Errorf("stderr %q: want %s named", stderr, id)
				}
			}
			// report merge checks them again, from the samples the result keeps.
			file := filepath.Join(t.TempDir(), "run.json")
			if err := os.WriteFile(file, []byte(stdout), 0o644); err != nil {
				t.Fatal(err)
			}
			code, merged, stderr := ratelab(t, "report", "merge", file, "-o", "json")
			var again bench.Result
			decodeJSON(t, merged, &again)
			if code != exitOK || again.Audit == nil || len(again.Audit.Limits) != 2 {
				t.Fatalf("merge: exit %d, stderr %q", code, stderr)
			}
			for k, l := range again.Audit.Limits {
				if h := res.Audit.Limits[k].Headers; l.Headers.Named != h.Named || l.Headers.Violations != h.Violations {
					t.Errorf("merged, %s: named in %d 429s, %d header violations; the run's own audit: %d and %d", l.ID, l.Headers.Named,
						l.Headers.Violations, h.Named, h.Violations)
				}
			}
		})
	}
}
