package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/bench"
)

// keyedGateway is a gateway ratelab did not write that admits limit
// requests a second for each value of key(r), an exact sliding log, and
// answers the rest 429 with a Retry-After; a request with no value passes.
func keyedGateway(t *testing.T, limit int, key func(*http.Request) string) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	logs := map[string][]time.Time{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := key(r)
		if k == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		log := logs[k]
		for len(log) > 0 && !log[0].After(now.Add(-time.Second)) {
			log = log[1:]
		}
		if len(log) >= limit {
			logs[k] = log
			w.Header().Set("Retry-After", strconv.Itoa(ceilSecs(log[len(log)-limit].Add(time.Second).Sub(now))))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		logs[k] = append(log, now)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestAuditHintsIdentityPlace: when the load sends the identities where
// the gateway (and its rules) do not read them, the audit says where they
// went and where they could go: a rules file keyed on X-Api-Key while the
// identities went in X-Consumer-Id (no verdict, exit 3, the message naming
// both), a fixed ?key= that every consumer sent alike, and a gateway that
// keys on ?key= while --expect-limit holds each consumer to its own limit
// (shared: no verdict, and the URL with {consumer} in place). The same
// gateways with the identities where they read them pass, with no hint.
func TestAuditHintsIdentityPlace(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	byAPIKey := writeRules(t, "api-key.yaml", "domain: api\ndescriptors:\n  - key: header:X-Api-Key\n"+
		"    rate_limit: {name: per-key, unit: second, requests_per_unit: 5}\n")
	byQuery := writeRules(t, "query.yaml", "domain: api\ndescriptors:\n  - key: query:key\n"+
		"    rate_limit: {name: by-key, unit: second, requests_per_unit: 5}\n")
	apiKeyed := keyedGateway(t, 5, func(r *http.Request) string { return r.Header.Get("X-Api-Key") })
	queryKeyed := keyedGateway(t, 5, func(r *http.Request) string { return r.URL.Query().Get("key") })
	load := []string{"--rate", "100", "--duration", "2500ms", "--consumers", "4", "--no-probes", "--fail-on-leak"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in the output; "" for no hint at all
	}{
		{"rules on X-Api-Key, identities in X-Consumer-Id", []string{apiKeyed.URL, "--expect-rules", byAPIKey}, exitThreshold,
			"no request sent met it: the rules key on header X-Api-Key, which no request sent; the identities went in header X-Consumer-Id " +
				"(--consumer-header): --consumer-header X-Api-Key sends them there"},
		{"rules on X-Api-Key, identities in X-Api-Key", []string{apiKeyed.URL, "--expect-rules", byAPIKey, "--consumer-header", "X-Api-Key"}, exitOK, ""},
		{"rules on ?key=, one key for all", []string{queryKeyed.URL + "/?key=abc", "--expect-rules", byQuery}, exitOK,
			"Hint: every request sent query parameter key as abc, so the 4 consumers met by-key on one counter; the identities went in header " +
				"X-Consumer-Id (--consumer-header): put {consumer} in the URL: " + queryKeyed.URL + "/?key={consumer}."},
		{"rules on ?key=, a key each", []string{queryKeyed.URL + "/?key=r-{consumer}", "--expect-rules", byQuery}, exitOK, ""},
		// A key of its own: the subtests share the gateway, and the one
		// above sends abc at the same time.
		{"gateway on ?key=, one key for all", []string{queryKeyed.URL + "/?key=xyz", "--expect-limit", "5/1s"}, exitThreshold,
			"Hint: 5/1s seemed shared across the identities, which went in header X-Consumer-Id (--consumer-header): if the gateway keys on " +
				"the URL's query parameter key, put {consumer} in the URL: " + queryKeyed.URL + "/?key={consumer}."},
		{"gateway on ?key=, a key each", []string{queryKeyed.URL + "/?key=g-{consumer}", "--expect-limit", "5/1s"}, exitOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := ratelab(t, append(append([]string{"bench", "http"}, tc.args...), load...)...)
			out := stdout + stderr
			hinted := strings.Contains(out, "Hint:") || strings.Contains(out, "no request sent met it")
			if code != tc.code || tc.want != "" && !strings.Contains(out, tc.want) || tc.want == "" && hinted {
				t.Fatalf("exit %d, want %d and %q (or no hint):\n%s", code, tc.code, tc.want, out)
			}
		})
	}
	// The hints are in the JSON result too.
	code, stdout, stderr := ratelab(t, append([]string{"bench", "http", queryKeyed.URL + "/?key=abc", "--expect-rules", byQuery, "-o", "json"}, load...)...)
	var res bench.Result
	decodeJSON(t, stdout, &res)
	if code != exitOK || len(res.AuditHints) != 1 || !strings.Contains(res.AuditHints[0], "put {consumer} in the URL") {
		t.Fatalf("exit %d (%s): audit hints %q", code, stderr, res.AuditHints)
	}
}
