package audit

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/rules"
)

// Each request meets the limits of the rules that its route, headers and
// consumer reach, on the counter of its values: a consumer's own, or one
// that every consumer shares (a global cap), named by its label.
func TestRulesMeeting(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`domain: api
descriptors:
  - key: header:X-Consumer-Id
    rate_limit: {name: per-consumer, unit: second, requests_per_unit: 5}
    descriptors:
      - key: path
        value: /search
        rate_limit: {name: search, unit: second, requests_per_unit: 2}
  - key: generic_key
    value: global
    rate_limit: {name: global, unit: second, requests_per_unit: 100}
  - key: header:X-Plan
    value: gold
    rate_limit: {name: gold, unlimited: true}
`), rules.ForGateway())
	if err != nil {
		t.Fatal(err)
	}
	// The requests as the engine sends them: a route of /search and
	// /items, each consumer's identity, and its plan.
	req := func(route, consumer int) rules.Request {
		h := http.Header{}
		h.Set("X-Consumer-Id", consumerName(int32(consumer)))
		h.Set("X-Plan", []string{"gold", "free"}[consumer])
		return rules.Request{Method: "GET", Path: []string{"/search", "/items"}[route], Host: "127.0.0.1:8080",
			RemoteAddress: "127.0.0.1", Header: h}
	}
	// consumer-0 (gold) and consumer-1 (free), each to /search and /items.
	samples := []Sample{{Consumer: 0, Route: 0}, {Consumer: 0, Route: 1}, {Consumer: 1, Route: 0}, {Consumer: 1, Route: 1}}
	met := RulesMeeting(samples, set, req, consumerName)
	for k, want := range []struct {
		idx   []int32
		names string
	}{
		{[]int32{0, 1, 2, 3}, "consumer-0 consumer-1"},
		{[]int32{0, 2}, "consumer-0 consumer-1"},
		{[]int32{0, 1, 2, 3}, "api/generic_key=global/global"},
		{[]int32{0, 1}, "consumer-0"},
	} {
		lc := met.of[k]
		if got := strings.Join(lc.names, " "); got != want.names || !slices.Equal(lc.idx, want.idx) {
			t.Errorf("%s: samples %v on counters %v named %q: want samples %v named %q", set.Limits()[k].ID, lc.idx, lc.counter, got,
				want.idx, want.names)
		}
	}
	if met.met[1] != 0b1101 || met.met[3] != 0b0101 {
		t.Errorf("met %b", met.met)
	}
}
