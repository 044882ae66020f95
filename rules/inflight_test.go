package rules

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// TestParseInFlight: an in-flight limit reads into the limit's policy (its
// slots and its lease), beside rate limits on the same key, and is said in
// words; its lease is 30s when it gives none.
func TestParseInFlight(t *testing.T) {
	s := mustParse(t, `domain: api
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: rate, unit: second, requests_per_unit: 10}
      - {name: conc, in_flight: 5, lease: 2m}
      - {name: plain, in_flight: 3}
`)
	ls := s.Limits()
	if ls[0].InFlight || !ls[1].InFlight || !ls[2].InFlight {
		t.Fatalf("in-flight: %v %v %v", ls[0].InFlight, ls[1].InFlight, ls[2].InFlight)
	}
	if p := ls[1].Policy; p.Limit != 5 || p.Window != 2*time.Minute || ls[1].Algorithm != algorithms.InFlight || ls[1].Cost != 1 {
		t.Errorf("conc: %+v %s cost %d", p, ls[1].Algorithm, ls[1].Cost)
	}
	if p := ls[2].Policy; p.Limit != 3 || p.Window != DefaultLease {
		t.Errorf("plain: %+v, want 3 with the default lease", p)
	}
	var b strings.Builder
	if err := s.Describe(&b); err != nil {
		t.Fatal(err)
	}
	if want := "at most 5 in flight at once (in-flight, each slot leased for 2m)"; !strings.Contains(b.String(), want) {
		t.Errorf("described as\n%s\nwithout %q", b.String(), want)
	}
	if want := "conc 5 in flight (lease 2m0s)"; !strings.Contains(s.Summary(), want) {
		t.Errorf("summary %q without %q", s.Summary(), want)
	}
	sh, err := Shorthand{Limits: []string{"10/1s"}, KeyBy: "header:X-Consumer-Id", InFlight: 4, Lease: 5 * time.Second}.Set()
	if err != nil {
		t.Fatal(err)
	}
	if ls := sh.Limits(); len(ls) != 2 || !ls[1].InFlight || ls[1].Policy.Limit != 4 || ls[1].Policy.Window != 5*time.Second {
		t.Errorf("shorthand: %s", sh.Summary())
	}
}

// TestParseInFlightMistakes: each mistake of an in-flight limit names its
// field; the fields of a rate limit are refused beside it; rls refuses it.
func TestParseInFlightMistakes(t *testing.T) {
	const head = "domain: api\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limit: "
	const at = "descriptors[0].rate_limit."
	for _, tc := range []struct {
		name, limit string
		service     bool
		field, msg  string
	}{
		{"zero slots", "{in_flight: 0}", false, "in_flight", "must be at least 1 (got 0)"},
		{"negative slots", "{in_flight: -2}", false, "in_flight", "must be at least 1 (got -2)"},
		{"zero lease", "{in_flight: 2, lease: 0s}", false, "lease", "a lease is positive"},
		{"negative lease", "{in_flight: 2, lease: -1s}", false, "lease", "a lease is positive"},
		{"bad lease", "{in_flight: 2, lease: soon}", false, "lease", `"soon" is not a duration`},
		{"with a rate", "{in_flight: 2, requests_per_unit: 5}", false, "requests_per_unit", "an in-flight limit has no requests per unit"},
		{"with a unit", "{in_flight: 2, unit: second}", false, "unit", "an in-flight limit has no unit"},
		{"with an algorithm", "{in_flight: 2, algorithm: gcra}", false, "algorithm", "an in-flight limit has no algorithm"},
		{"with a burst", "{in_flight: 2, burst: 3}", false, "burst", "an in-flight limit has no burst"},
		{"lease alone", "{unit: second, requests_per_unit: 5, lease: 3s}", false, "lease", "a lease is for an in-flight limit"},
		{"rls", "{in_flight: 2}", true, "in_flight", "Envoy's rate limit protocol has no call that ends a request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := ForGateway()
			if tc.service {
				opt = ForService()
			}
			_, err := Parse("rules.yaml", []byte(head+tc.limit+"\n"), opt)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%q: got %v, want a *rules.Error", tc.limit, err)
			}
			if e.Field != at+tc.field || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("%q: got %q (field %q), want field %q, message containing %q", tc.limit, e.Message, e.Field, at+tc.field, tc.msg)
			}
		})
	}
}
