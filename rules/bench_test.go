package rules

import "testing"

// BenchmarkMatch: a request against ten rules, as the gateway matches every
// request (make bench's numbers; no test asserts a time).
func BenchmarkMatch(b *testing.B) {
	s, err := Parse("rules.yaml", []byte(gateway+`  - key: path
    value: /login
    descriptors:
      - key: remote_address
        rate_limit: {name: login, unit: minute, requests_per_unit: 10}
  - key: header:X-Api-Key
    rate_limit: {name: api-key, unit: second, requests_per_unit: 100}
`), ForGateway())
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		r    Request
	}{
		{"consumer", Request{Method: "GET", Path: "/search", Host: "api.example.com", RemoteAddress: "203.0.113.7",
			Header: map[string][]string{"X-Consumer-Id": {"alice"}, "Accept": {"*/*"}, "User-Agent": {"bench"}}}},
		{"gold", Request{Method: "GET", Path: "/api/items", Host: "api.example.com", RemoteAddress: "203.0.113.7",
			Header: map[string][]string{"X-Consumer-Id": {"alice"}, "X-Plan": {"gold"}}}},
		{"anonymous", Request{Method: "GET", Path: "/", Host: "api.example.com", RemoteAddress: "203.0.113.7"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			hits := 0
			for b.Loop() {
				hits = len(s.Match(bc.r))
			}
			b.ReportMetric(float64(hits), "hits/op")
		})
	}
}

// BenchmarkLookup: one Envoy descriptor of two entries.
func BenchmarkLookup(b *testing.B) {
	s, err := Parse("basic_config.yaml", []byte(basicConfig))
	if err != nil {
		b.Fatal(err)
	}
	es := entries("key1", "value1", "subkey1", "something")
	b.ReportAllocs()
	for b.Loop() {
		s.Lookup(es)
	}
}
