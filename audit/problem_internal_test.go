package audit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/rules"
)

// TestViolatedPolicies: each name of violated-policies becomes an advert,
// named when it is one of the audit's limits, with what the same
// response's RateLimit-Policy and RateLimit gave the policy of that name;
// a body without the member, or that does not parse, adds nothing.
func TestViolatedPolicies(t *testing.T) {
	f := &Fields{policy: `"per-second";q=5;w=1, "per-hour";q=100;w=3600`, rateLimit: `"per-second";r=0;t=1`}
	names := map[string]int16{"per-second": 0, "search": 1}
	got := violatedPolicies(nil, []byte(`{"type":"x","violated-policies":["per-second","per-hour","search","other"]}`), f, names)
	want := []advert{
		{name: 0, named: true, q: givenAs(5), w: givenAs(1), r: givenAs(0), t: givenAs(1)},
		{q: givenAs(100), w: givenAs(3600)},
		{name: 1, named: true},
		{},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, body := range []string{`{"type":"about:blank"}`, `{"violated-policies":"per-second"}`, `{"violated-policies":[`, ``} {
		if got := violatedPolicies(nil, []byte(body), f, names); len(got) != 0 {
			t.Errorf("%s: %v", body, got)
		}
	}
}

// TestCheckViolated: a 429 that names the limit that refused it, with
// nothing remaining of it, is counted and passes; one that names a limit
// its request did not meet, or one of which the same response said some
// remained (a whole request's cost), is a violation of that limit; a name
// the audit cannot place is no fault.
func TestCheckViolated(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`domain: shop
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: per-second, unit: second, requests_per_unit: 5}
      - {name: per-minute, unit: minute, requests_per_unit: 30, cost: 3}
    descriptors:
      - key: path
        value: /search
        rate_limit: {name: search, unit: second, requests_per_unit: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	exps := RulesExpectations(set)
	names := Names(exps)
	const items, search = 0b011, 0b111 // the limits a request to /items and to /search meet
	for _, tc := range []struct {
		name       string
		met        uint64
		policy, rl string // RateLimit-Policy and RateLimit
		violated   string
		named      [3]int64
		violation  string // in the example of the limit named; "" for none
	}{
		{"the limit that refused", items, `"per-second";q=5;w=1`, `"per-second";r=0;t=1`, `"per-second"`, [3]int64{1, 0, 0}, ""},
		{"two, nothing remaining", search, `"per-second";q=5;w=1, "search";q=2;w=1`, `"search";r=0;t=1`, `"search","per-second"`, [3]int64{1, 0, 1}, ""},
		{"a limit not met", items, `"per-second";q=5;w=1`, `"per-second";r=0;t=1`, `"search"`, [3]int64{0, 0, 1},
			`consumer-0 was refused with violated-policies naming "search", a limit its request did not meet`},
		{"some remaining", search, `"per-second";q=5;w=1, "search";q=2;w=1`, `"per-second";r=3;t=1`, `"per-second"`, [3]int64{1, 0, 0},
			`consumer-0 was refused with violated-policies naming "per-second", of which the same response said 3 remained`},
		{"less than its cost remaining", items, `"per-minute";q=30;w=60`, `"per-minute";r=2;t=9`, `"per-minute"`, [3]int64{0, 1, 0}, ""},
		{"its cost remaining", items, `"per-minute";q=30;w=60`, `"per-minute";r=3;t=9`, `"per-minute"`, [3]int64{0, 1, 0}, "said 3 remained"},
		{"placed by quota, some remaining", items, `"p1";q=5;w=1`, `"p1";r=4;t=1`, `"p1"`, [3]int64{1, 0, 0},
			`naming the policy of limit per-second, of which the same response said 4 remained`},
		{"a policy the audit was not told of", items, `"per-day";q=1000;w=86400`, `"per-day";r=7;t=9`, `"per-day","nowhere"`, [3]int64{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &Fields{policy: tc.policy, rateLimit: tc.rl}
			advs := parseAdverts(nil, f, names)
			s := Sample{Status: 429, advN: uint8(len(advs)), RetryAfter: -1, limit: -1, remaining: -1, Reset: -1, Sent: time.Millisecond, Done: 2 * time.Millisecond}
			advs = violatedPolicies(advs, []byte(`{"violated-policies":[`+tc.violated+`]}`), f, names)
			s.violated = uint8(len(advs) - int(s.advN))
			a := Audit{Limits: make([]LimitAudit, len(exps))}
			checkViolated(&a, []Sample{s}, advs, exps, Meeting{met: []uint64{tc.met}}, consumerName)
			for k, l := range a.Limits {
				h := l.Headers
				if h.Named != tc.named[k] {
					t.Errorf("%s named %d times, want %d", exps[k].ID, h.Named, tc.named[k])
				}
				if tc.violation != "" && tc.named[k] > 0 {
					if h.Violations != 1 || !strings.Contains(h.Example, tc.violation) {
						t.Errorf("%s: %d violations (%q), want one: %q", exps[k].ID, h.Violations, h.Example, tc.violation)
					}
				} else if h.Violations != 0 {
					t.Errorf("%s: %d violations (%q), want none", exps[k].ID, h.Violations, h.Example)
				}
			}
		})
	}
}
