package bench

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/rules"
)

// hintRules keys limits on a header, on a query parameter, on a plan
// header's value, on the consumer header, and on the client's address
// when X-Tenant is missing: what the hints read.
const hintRules = `domain: api
descriptors:
  - key: header:X-Api-Key
    rate_limit: {name: per-key, unit: second, requests_per_unit: 5}
  - key: query:key
    rate_limit: {name: by-query, unit: second, requests_per_unit: 5}
  - key: header:X-Plan
    value: gold
    rate_limit: {name: gold, unit: second, requests_per_unit: 50}
  - key: header:X-Consumer-Id
    rate_limit: {name: per-consumer, unit: second, requests_per_unit: 5}
  - key: header:X-Tenant
    fallback_key: remote_address
    rate_limit: {name: per-tenant, unit: second, requests_per_unit: 5}
`

// hintsOf runs the meeting of cfg's requests (every consumer, once to
// each route) with set, and returns the hint of each limit no request
// met, by ID, and the hints of limits met on one counter.
func hintsOf(t *testing.T, cfg HTTPConfig, set *rules.Set) (map[string]string, []string) {
	t.Helper()
	cfg.Method, cfg.Requests, cfg.ExpectRules = "GET", 1, set
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, _, err := newMix(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &sent{mix: m, consumers: cfg.Consumers, source: "127.0.0.1"}
	var samples []audit.Sample
	for c := range max(cfg.Consumers, 1) {
		for r := range max(len(cfg.Routes), 1) {
			samples = append(samples, audit.Sample{Consumer: int32(c), Route: uint16(r)})
		}
	}
	v := newSentValues(set)
	met := audit.RulesMeeting(samples, set, v.watch(s.request), consumerName)
	unmet := map[string]string{}
	for k, l := range set.Limits() {
		if met.Met(k) == 0 {
			unmet[l.ID] = v.unmetHint(cfg, l)
		}
	}
	return unmet, v.oneCounterHints(cfg, set, met)
}

// TestUnmetHints: a limit that no request met is explained when what was
// sent shows why (a header or query parameter it keys on that no request
// sent: where the identities went instead, and how to send them there),
// and only then: never for a key with a fallback, nor for a header sent
// with another value than the rule's.
func TestUnmetHints(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(hintRules), rules.ForGateway())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cfg   HTTPConfig
		unmet map[string]string
	}{
		{"identities in the consumer header", HTTPConfig{Target: "http://127.0.0.1:8080/", Consumers: 4, ConsumerHeader: "X-Consumer-Id",
			Header: map[string][]string{"X-Plan": {"free"}}}, map[string]string{
			"per-key": "the rules key on header X-Api-Key, which no request sent; the identities went in header X-Consumer-Id (--consumer-header): " +
				"--consumer-header X-Api-Key sends them there",
			"by-query": "the rules key on query parameter key, which no request sent; the identities went in header X-Consumer-Id " +
				"(--consumer-header): put {consumer} in the URL: http://127.0.0.1:8080/?key={consumer}",
			"gold": "", // X-Plan was sent, with another value
		}},
		{"identities in a header of -H, routes", HTTPConfig{Target: "http://127.0.0.1:8080/", Consumers: 2,
			Header: map[string][]string{"X-User": {"u-{consumer}"}}, Routes: []Route{{Path: "/search?q=a", Weight: 1}, {Path: "/items", Weight: 1}}},
			map[string]string{
				"per-key": "the rules key on header X-Api-Key, which no request sent; the identities went in header X-User: " +
					"send them there with -H 'X-Api-Key: {consumer}'",
				"by-query": "the rules key on query parameter key, which no request sent; the identities went in header X-User: " +
					"put {consumer} in the query of each --path, such as /search?q=a&key={consumer}",
				"gold": "the rules key on header X-Plan, which no request sent: send it, such as -H 'X-Plan: gold'",
				"per-consumer": "the rules key on header X-Consumer-Id, which no request sent; the identities went in header X-User: " +
					"send them there with -H 'X-Consumer-Id: {consumer}'",
			}},
		{"one anonymous client", HTTPConfig{Target: "http://127.0.0.1:8080/?key=k1"}, map[string]string{
			"per-key":      "the rules key on header X-Api-Key, which no request sent",
			"gold":         "the rules key on header X-Plan, which no request sent: send it, such as -H 'X-Plan: gold'",
			"per-consumer": "the rules key on header X-Consumer-Id, which no request sent",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unmet, _ := hintsOf(t, tc.cfg, set)
			for id, want := range tc.unmet {
				if got, ok := unmet[id]; !ok || got != want {
					t.Errorf("%s: met %v, hint %q; want unmet, %q", id, !ok, got, want)
				}
			}
			for id := range unmet {
				if _, ok := tc.unmet[id]; !ok {
					t.Errorf("%s: not met (%q)", id, unmet[id])
				}
			}
		})
	}
}

// TestOneCounterHints: a limit kept per value of a header or query
// parameter, met by every consumer on one counter because every request
// sent it alike, is pointed out with where the identities could go; one
// whose key carries the identities, or a run of one consumer, is not.
func TestOneCounterHints(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(hintRules), rules.ForGateway())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  HTTPConfig
		want []string
	}{
		{"a fixed key in the query and a header", HTTPConfig{Target: "http://127.0.0.1:8080/?key=abc&page=2", Consumers: 3,
			ConsumerHeader: "X-Consumer-Id", Header: map[string][]string{"X-Api-Key": {"k1"}}}, []string{
			"every request sent header X-Api-Key as k1, so the 3 consumers met per-key on one counter; the identities went in header " +
				"X-Consumer-Id (--consumer-header): --consumer-header X-Api-Key sends them there",
			"every request sent query parameter key as abc, so the 3 consumers met by-query on one counter; the identities went in header " +
				"X-Consumer-Id (--consumer-header): put {consumer} in the URL: http://127.0.0.1:8080/?key={consumer}&page=2",
		}},
		{"the identities in the query", HTTPConfig{Target: "http://127.0.0.1:8080/?key={consumer}", Consumers: 3}, nil},
		{"one consumer", HTTPConfig{Target: "http://127.0.0.1:8080/?key=abc", Consumers: 1, ConsumerHeader: "X-Consumer-Id"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got := hintsOf(t, tc.cfg, set)
			if !slices.Equal(got, tc.want) {
				t.Errorf("hints\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestSharedHint: a limit that seems shared across the identities, sent
// apart from a URL whose query has parameters, gets where {consumer}
// could go in it; no such URL, identities in the URL, a single consumer or
// no shared limit, no hint.
func TestSharedHint(t *testing.T) {
	shared := audit.Audit{Limits: []audit.LimitAudit{{ID: "5/1s", Verdict: audit.NoVerdict, SharedLimit: true}}}
	for _, tc := range []struct {
		name string
		cfg  HTTPConfig
		a    audit.Audit
		want string
	}{
		{"one parameter", HTTPConfig{Target: "http://h/v1?key=abc", Consumers: 4, ConsumerHeader: "X-Consumer-Id"}, shared,
			"5/1s seemed shared across the identities, which went in header X-Consumer-Id (--consumer-header): if the gateway keys on the URL's " +
				"query parameter key, put {consumer} in the URL: http://h/v1?key={consumer}"},
		{"two parameters, identities by address", HTTPConfig{Target: "http://h/?page=2&key=abc", Consumers: 2,
			SourceIPs: []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")}}, shared,
			"5/1s seemed shared across the identities, which went in the source address (--source-ips): if the gateway keys on one of the URL's " +
				"query parameters (page, key), put {consumer} in that one's value; for page, put {consumer} in the URL: http://h/?page={consumer}&key=abc"},
		{"no query", HTTPConfig{Target: "http://h/", Consumers: 4, ConsumerHeader: "X-Consumer-Id"}, shared, ""},
		{"identities in the URL", HTTPConfig{Target: "http://h/{consumer}?key=abc", Consumers: 4}, shared, ""},
		{"one consumer", HTTPConfig{Target: "http://h/?key=abc", Consumers: 1, ConsumerHeader: "X-Consumer-Id"}, shared, ""},
		{"not shared", HTTPConfig{Target: "http://h/?key=abc", Consumers: 4, ConsumerHeader: "X-Consumer-Id"},
			audit.Audit{Limits: []audit.LimitAudit{{ID: "5/1s", Verdict: audit.Held}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.sharedHint(tc.a); got != tc.want {
				t.Errorf("%q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestWithQueryConsumer: {consumer} takes the value of the parameter
// named, its first occurrence (its name escaped or not), or is added.
func TestWithQueryConsumer(t *testing.T) {
	for _, tc := range []struct{ in, name, want string }{
		{"http://h/", "key", "http://h/?key={consumer}"},
		{"http://h/?key=abc", "key", "http://h/?key={consumer}"},
		{"http://h/p?a=1&key=x&key=y#top", "key", "http://h/p?a=1&key={consumer}&key=y#top"},
		{"http://h/p?k%65y=x", "key", "http://h/p?k%65y={consumer}"},
		{"http://h/p?a=1", "api key", "http://h/p?a=1&api+key={consumer}"},
		{"/search?", "key", "/search?key={consumer}"},
	} {
		if got := withQueryConsumer(tc.in, tc.name); got != tc.want {
			t.Errorf("%s, %s: %s, want %s", tc.in, tc.name, got, tc.want)
		}
	}
}

// TestRLSUnmetHint: a configuration no descriptor sent meets is explained
// when no descriptor begins with a key the configuration's begin with,
// and only then.
func TestRLSUnmetHint(t *testing.T) {
	set, err := rules.Parse("d.yaml", []byte("domain: d\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 5}\n"+
		"  - key: generic_key\n    value: global\n    rate_limit: {unit: second, requests_per_unit: 500}\n"), rules.ForService(), rules.WithDefaultAlgorithm("fixed-window"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		descriptors string
		consumers   int
		want        string
	}{
		{"user={consumer}", 3, "its descriptors begin with key api_key or generic_key, and those sent with user: send one that begins " +
			"with it, such as --descriptor api_key={consumer}"},
		{"user=a;tenant=b", 0, "its descriptors begin with key api_key or generic_key, and those sent with user or tenant: " +
			"send one that begins with it, such as --descriptor api_key=VALUE"},
		{"user=a;generic_key=local", 0, ""}, // generic_key is sent, with another value
	} {
		cfg := RLSConfig{Domain: "d", Consumers: tc.consumers, ExpectConfig: set}
		for _, s := range strings.Split(tc.descriptors, ";") {
			d, err := ParseDescriptor(s)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Descriptors = append(cfg.Descriptors, d)
		}
		if got := cfg.unmetHint(); got != tc.want {
			t.Errorf("%s: %q\nwant %q", tc.descriptors, got, tc.want)
		}
	}
}
