package rules

import (
	"slices"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/algorithms"
)

// gateway is the design's example: per consumer 5/1s and 12/10s, /search
// stricter, a gold tier by header that replaces both, and a global cap in
// shadow mode.
const gateway = `domain: api
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: per-second, unit: second, requests_per_unit: 5}
      - {name: per-10s, window: 10s, requests_per_unit: 12}
    descriptors:
      - key: path
        value: /search
        rate_limit: {name: search, unit: second, requests_per_unit: 2}
      - key: path
        value: /api/*
        rate_limit: {name: api, unit: second, requests_per_unit: 3}
  - key: header:X-Plan
    value: gold
    descriptors:
      - key: header:X-Consumer-Id
        rate_limits:
          - {name: gold-second, unit: second, requests_per_unit: 50, replaces: [{name: per-second}]}
          - {name: gold-10s, window: 10s, requests_per_unit: 120, replaces: [{name: per-10s}]}
  - key: generic_key
    value: global
    shadow_mode: true
    rate_limit: {name: global, unit: second, requests_per_unit: 1000}
  - key: remote_address
    value: 10.0.0.9
    rate_limit: {name: banned-ish, unit: minute, requests_per_unit: 1}
  - key: method
    value: POST
    descriptors:
      - key: host
        value: API.example.com
        descriptors:
          - key: query:page
            rate_limit: {name: post-page, unit: second, requests_per_unit: 7}
`

func ids(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Limit.ID
	}
	return out
}

func hdr(kv ...string) map[string][]string {
	h := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return h
}

func TestMatch(t *testing.T) {
	s := mustParse(t, gateway)
	for _, tc := range []struct {
		name string
		r    Request
		want []string
	}{
		{"no consumer: the global cap alone", Request{Method: "GET", Path: "/", RemoteAddress: "10.0.0.1"}, []string{"global"}},
		{"a consumer", Request{Method: "GET", Path: "/", Header: hdr("X-Consumer-Id", "alice")},
			[]string{"per-second", "per-10s", "global"}},
		{"an empty consumer is none", Request{Method: "GET", Path: "/", Header: hdr("X-Consumer-Id", "")}, []string{"global"}},
		{"a consumer on /search", Request{Method: "GET", Path: "/search", Header: hdr("X-Consumer-Id", "alice")},
			[]string{"per-second", "per-10s", "search", "global"}},
		{"/search is exact", Request{Method: "GET", Path: "/search/x", Header: hdr("X-Consumer-Id", "alice")},
			[]string{"per-second", "per-10s", "global"}},
		{"a prefix", Request{Method: "GET", Path: "/api/items", Header: hdr("X-Consumer-Id", "alice")},
			[]string{"per-second", "per-10s", "api", "global"}},
		{"gold replaces both per-consumer limits", Request{Method: "GET", Path: "/search", Header: hdr("X-Consumer-Id", "alice", "X-Plan", "gold")},
			[]string{"search", "gold-second", "gold-10s", "global"}},
		{"silver is no plan", Request{Method: "GET", Path: "/", Header: hdr("X-Consumer-Id", "alice", "X-Plan", "silver")},
			[]string{"per-second", "per-10s", "global"}},
		{"gold with no consumer", Request{Method: "GET", Path: "/", Header: hdr("X-Plan", "gold")}, []string{"global"}},
		{"an address", Request{Method: "GET", Path: "/", RemoteAddress: "10.0.0.9"}, []string{"global", "banned-ish"}},
		{"method, host and query", Request{Method: "POST", Path: "/", Host: "api.EXAMPLE.com:8443", Query: "a=1&page=3"},
			[]string{"global", "post-page"}},
		{"no query parameter", Request{Method: "POST", Path: "/", Host: "api.example.com", Query: "a=1"}, []string{"global"}},
		{"another host", Request{Method: "POST", Path: "/", Host: "www.example.com", Query: "page=3"}, []string{"global"}},
		{"GET is not POST", Request{Method: "GET", Path: "/", Host: "api.example.com", Query: "page=3"}, []string{"global"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(s.Match(tc.r)); !slices.Equal(got, tc.want) {
				t.Errorf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestExplainSaysWhatWasReplaced(t *testing.T) {
	s := mustParse(t, gateway)
	applied, replaced := s.Explain(Request{Method: "GET", Path: "/", Header: hdr("X-Consumer-Id", "alice", "X-Plan", "gold")})
	if got := ids(applied); !slices.Equal(got, []string{"gold-second", "gold-10s", "global"}) {
		t.Errorf("applied %v", got)
	}
	if len(replaced) != 2 || replaced[0].Limit.ID != "per-second" || replaced[0].ReplacedBy != "gold-second" ||
		replaced[1].Limit.ID != "per-10s" || replaced[1].ReplacedBy != "gold-10s" {
		t.Errorf("replaced %+v", replaced)
	}
}

// TestReplaceCountsReplacedLimits: as envoyproxy/ratelimit, a limit that is
// replaced still replaces the ones it names.
func TestReplaceCountsReplacedLimits(t *testing.T) {
	s := mustParse(t, `domain: api
descriptors:
  - key: header:A
    rate_limit: {name: a, unit: second, requests_per_unit: 1, replaces: [{name: b}]}
  - key: header:B
    rate_limit: {name: b, unit: second, requests_per_unit: 1, replaces: [{name: c}]}
  - key: header:C
    rate_limit: {name: c, unit: second, requests_per_unit: 1}
`)
	got := ids(s.Match(Request{Header: hdr("A", "1", "B", "1", "C", "1")}))
	if !slices.Equal(got, []string{"a"}) {
		t.Errorf("Match = %v, want [a]", got)
	}
	kept, replaced := Replace(s.Match(Request{Header: hdr("B", "1", "C", "1")}))
	if !slices.Equal(ids(kept), []string{"b"}) || !slices.Equal(ids(replaced), []string{}) {
		t.Errorf("Replace of already replaced hits: kept %v, replaced %v", ids(kept), ids(replaced))
	}
}

func TestMatchGenericKeyAlwaysPresent(t *testing.T) {
	s := mustParse(t, `domain: api
descriptors:
  - key: generic_key
    value: a
    rate_limit: {name: a, unit: second, requests_per_unit: 1}
  - key: generic_key
    value: b
    descriptors:
      - key: path
        value: /x
        rate_limit: {name: bx, unit: second, requests_per_unit: 1}
`)
	if got := ids(s.Match(Request{Path: "/x"})); !slices.Equal(got, []string{"a", "bx"}) {
		t.Errorf("Match = %v", got)
	}
	hits := s.Match(Request{Path: "/x"})
	if !hits[0].Limit.Global() || hits[0].Tag != hits[1].Tag || hits[0].Tag != domainTag("api") {
		t.Error("generic_key limits: want global, tagged by the domain")
	}
}

// TestMatchPrefixOrder: the first prefix in file order wins, as in
// envoyproxy/ratelimit, and an exact value beats every prefix.
func TestMatchPrefixOrder(t *testing.T) {
	s := mustParse(t, `domain: api
descriptors:
  - key: path
    value: /a*
    rate_limit: {name: a, unit: second, requests_per_unit: 1}
  - key: path
    value: /ab*
    rate_limit: {name: ab, unit: second, requests_per_unit: 1}
  - key: path
    value: /abc
    rate_limit: {name: abc, unit: second, requests_per_unit: 1}
  - key: path
    rate_limit: {name: any, unit: second, requests_per_unit: 1}
`)
	for path, want := range map[string]string{"/abd": "a", "/abc": "abc", "/x": "any"} {
		if got := ids(s.Match(Request{Path: path})); !slices.Equal(got, []string{want}) {
			t.Errorf("%s: Match = %v, want [%s]", path, got, want)
		}
	}
}

// TestMatchFallback: a node with a fallback_key counts a request without
// the header by its address, under an entry that says so.
func TestMatchFallback(t *testing.T) {
	s := mustParse(t, `domain: api
descriptors:
  - key: header:X-Consumer-Id
    fallback_key: remote_address
    rate_limit: {name: consumer, unit: second, requests_per_unit: 5}
`)
	with := s.Match(Request{RemoteAddress: "10.0.0.1", Header: hdr("X-Consumer-Id", "10.0.0.1")})
	without := s.Match(Request{RemoteAddress: "10.0.0.1"})
	if len(with) != 1 || len(without) != 1 {
		t.Fatalf("hits %d and %d, want 1 and 1", len(with), len(without))
	}
	if without[0].Entries[0] != (Entry{"remote_address", "10.0.0.1"}) {
		t.Errorf("fallback entry %+v", without[0].Entries[0])
	}
	// A client that sends another's address as its consumer id does not
	// share that address's counter.
	if with[0].Key == without[0].Key {
		t.Errorf("header and address share the key %s", with[0].Key)
	}
	if got := s.Match(Request{}); len(got) != 0 {
		t.Errorf("no header, no address: %v", ids(got))
	}
}

// TestCounterKeys: one consumer's counters share a hash tag, other
// consumers' do not; a global cap is tagged by the domain; keys are bounded
// whatever the values, and differ per value and per limit.
func TestCounterKeys(t *testing.T) {
	s := mustParse(t, gateway)
	alice := s.Match(Request{Path: "/search", Header: hdr("X-Consumer-Id", "alice")})
	bob := s.Match(Request{Path: "/search", Header: hdr("X-Consumer-Id", "bob")})
	for i := range 3 {
		if alice[i].Tag != alice[0].Tag || bob[i].Tag != bob[0].Tag {
			t.Errorf("hit %d: tags %s/%s, want one per consumer", i, alice[i].Tag, bob[i].Tag)
		}
		if alice[i].Key == bob[i].Key {
			t.Errorf("alice and bob share %s", alice[i].Key)
		}
		if !strings.HasPrefix(alice[i].Key, "rl:{"+alice[i].Tag+"}:") || !strings.HasSuffix(alice[i].Key, ":"+alice[i].Limit.ID+":sliding-log") {
			t.Errorf("key %s", alice[i].Key)
		}
	}
	if alice[0].Tag == bob[0].Tag {
		t.Error("alice and bob share a tag")
	}
	if g := alice[3]; g.Limit.ID != "global" || g.Tag != domainTag("api") || g.Key != bob[3].Key {
		t.Errorf("global: %+v", g)
	}
	seen := map[string]bool{}
	for _, h := range alice {
		if seen[h.Key] {
			t.Errorf("two hits share %s", h.Key)
		}
		seen[h.Key] = true
	}
	huge := s.Match(Request{Path: "/search", Header: hdr("X-Consumer-Id", strings.Repeat("{x}\n", 10000))})
	for _, h := range huge {
		if len(h.Key) > 128 || strings.Count(h.Key, "{") != 1 || len(h.Label()) > 160 || strings.ContainsAny(h.Label(), "{}\n") {
			t.Errorf("unbounded: key %q, label %q", h.Key, h.Label())
		}
	}
	if got := alice[2].Label(); got != "api/header:X-Consumer-Id=alice/path=/search/search" {
		t.Errorf("label %q", got)
	}
	// Keys come from the request's values with their keys, unambiguously.
	for _, h := range alice {
		if h.Key != algorithms.Key(h.Tag, strings.TrimPrefix(h.Key, "rl:{"+h.Tag+"}:")) {
			t.Errorf("%s is not shaped as algorithms.Key", h.Key)
		}
	}
	a := counterHash("d", []Entry{{"k", "ab"}, {"c", ""}})
	b := counterHash("d", []Entry{{"k", "a"}, {"bc", ""}})
	if a == b {
		t.Error("entries that join alike share a counter")
	}
}

// TestUnlimitedHasNoKey: an unlimited limit is met, and never reaches Redis.
func TestUnlimitedHasNoKey(t *testing.T) {
	s := mustParse(t, "domain: api\ndescriptors:\n  - key: path\n    value: /health\n    rate_limit: {unlimited: true}\n")
	hits := s.Match(Request{Path: "/health"})
	if len(hits) != 1 || !hits[0].Limit.Unlimited || hits[0].Key != "" {
		t.Errorf("hits %+v", hits)
	}
}

func domainTag(d string) string {
	t := tagOf(d)
	return string(t[:])
}

func TestQueryValue(t *testing.T) {
	for _, tc := range []struct{ raw, name, want string }{
		{"a=1&b=2", "b", "2"},
		{"a=1&a=2", "a", "1"},
		{"q=redis+labs&x", "q", "redis labs"},
		{"%70age=3", "page", "3"},
		{"page=%zz", "page", ""},
		{"page", "page", ""},
		{"", "page", ""},
	} {
		if got := queryValue(tc.raw, tc.name); got != tc.want {
			t.Errorf("queryValue(%q, %q) = %q, want %q", tc.raw, tc.name, got, tc.want)
		}
	}
}

func TestHostOnly(t *testing.T) {
	for in, want := range map[string]string{"Example.COM:8080": "example.com", "[::1]:80": "[::1]", "::1": "::1", "a.b": "a.b"} {
		if got := hostOnly(in); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMatchAllocations: a request's walk allocates its hits, one block for
// their entries and each hit's key, and nothing per node passed by.
func TestMatchAllocations(t *testing.T) {
	s := mustParse(t, gateway)
	for _, r := range []Request{
		{Method: "GET", Path: "/search", RemoteAddress: "10.0.0.1", Header: hdr("X-Consumer-Id", "alice")},
		{Method: "GET", Path: "/", RemoteAddress: "10.0.0.1"},
	} {
		n := len(s.Match(r))
		if allocs := testing.AllocsPerRun(100, func() { s.Match(r) }); allocs > float64(2+n) {
			t.Errorf("%s: Match allocates %.0f times for %d hits, want at most %d", r.Path, allocs, n, 2+n)
		}
	}
}
