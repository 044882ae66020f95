package rules

import (
	"strings"
	"testing"
	"time"
)

func TestLimitInWords(t *testing.T) {
	s := mustParse(t, gateway+`  - key: header:X-Tenant
    fallback_key: remote_address
    descriptors:
      - key: path
        value: /export*
        rate_limit: {name: export, window: 90s, requests_per_unit: 3, algorithm: gcra, cost: 2, shadow_mode: true}
  - key: path
    value: /health
    rate_limit: {name: health, unlimited: true}
`)
	want := map[string]string{
		"per-second":  "all requests: per value of header X-Consumer-Id, at most 5 per 1s (sliding-log)",
		"search":      "requests with path = /search: per value of header X-Consumer-Id, at most 2 per 1s (sliding-log)",
		"api":         "requests with path starting with /api/: per value of header X-Consumer-Id and path, at most 3 per 1s (sliding-log)",
		"gold-second": "requests with header X-Plan = gold: per value of header X-Consumer-Id, at most 50 per 1s (sliding-log); replaces per-second",
		"global":      "all requests: one shared counter, at most 1000 per 1s (sliding-log); shadow: counted, never blocks",
		"banned-ish":  "requests with client address = 10.0.0.9: one shared counter, at most 1 per 1m (sliding-log)",
		"post-page":   "requests with method = POST and host = API.example.com: per value of query parameter page, at most 7 per 1s (sliding-log)",
		"export": "requests with path starting with /export: per value of header X-Tenant (else of client address) and path, " +
			"at most 3 per 1m30s (gcra), each request costs 2; shadow: counted, never blocks",
		"health": "requests with path = /health: one shared counter, unlimited (answered without Redis)",
	}
	for _, l := range s.Limits() {
		if w, ok := want[l.ID]; ok && l.String() != w {
			t.Errorf("%s:\n got %s\nwant %s", l.ID, l, w)
		}
	}
}

func TestDescribe(t *testing.T) {
	s := mustParse(t, `domain: api
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: per-second, unit: second, requests_per_unit: 5}
      - {name: per-hour, unit: hour, requests_per_unit: 1000, algorithm: fixed-window}
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 1000, cost: 0}
`)
	var b strings.Builder
	if err := s.Describe(&b); err != nil {
		t.Fatal(err)
	}
	want := `domain api, version ` + s.Version + ` (rules.yaml): 3 limits
  per-second          all requests: per value of header X-Consumer-Id, at most 5 per 1s (sliding-log)
  per-hour            all requests: per value of header X-Consumer-Id, at most 1000 per 1h (fixed-window)
  generic_key_global  all requests: one shared counter, at most 1000 per 1s (sliding-log), checked and never consumed
A request without a header or query parameter that a limit counts per value of does not meet that limit
(unless its descriptor names a fallback_key).
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestWindow(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1s", 10 * time.Second: "10s", time.Minute: "1m", 90 * time.Minute: "1h30m", 24 * time.Hour: "24h",
		1500 * time.Millisecond: "1.5s", 250 * time.Millisecond: "250ms", time.Hour + time.Second: "1h0m1s",
	} {
		if got := Window(d); got != want {
			t.Errorf("Window(%s) = %s, want %s", d, got, want)
		}
	}
}
