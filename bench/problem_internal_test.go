package bench

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/rules"
)

// TestReadProblemBody: the body of a 429 whose Content-Type is
// application/problem+json is kept, up to maxProblem bytes, however it is
// framed (a length, chunks, the close), and counted whole; no other body
// is kept, nor any when not auditing. The connection's buffer is reused:
// after the first, a problem costs no allocation.
func TestReadProblemBody(t *testing.T) {
	const problem = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","violated-policies":["per-second"]}`
	long := `{"violated-policies":["a"],"pad":"` + strings.Repeat("x", 2*maxProblem) + `"}`
	for _, tc := range []struct {
		name, resp string
		audit      bool
		kept       string
	}{
		{"by length", "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: " +
			fmt.Sprint(len(problem)) + "\r\n\r\n" + problem, true, problem},
		{"chunked, with parameters", "HTTP/1.1 429 Too Many Requests\r\ncontent-type: Application/Problem+JSON ; charset=utf-8\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", 10, problem[:10], len(problem)-10, problem[10:]),
			true, problem},
		{"to the close", "HTTP/1.0 429 Too Many Requests\r\nContent-Type: application/problem+json\r\n\r\n" + problem, true, problem},
		{"bounded", "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: " +
			fmt.Sprint(len(long)) + "\r\n\r\n" + long, true, long[:maxProblem]},
		{"not a problem", "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: " +
			fmt.Sprint(len(problem)) + "\r\n\r\n" + problem, true, ""},
		{"not a 429", "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nContent-Length: " +
			fmt.Sprint(len(problem)) + "\r\n\r\n" + problem, true, ""},
		{"not auditing", "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: " +
			fmt.Sprint(len(problem)) + "\r\n\r\n" + problem, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The response twice on one connection, then a 200 after it.
			stream := tc.resp
			if !strings.HasPrefix(tc.resp, "HTTP/1.0") {
				stream += tc.resp + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
			}
			br := bufio.NewReader(strings.NewReader(stream))
			var r response
			for i := range 2 {
				if err := readResponse(br, false, tc.audit, &r); err != nil {
					t.Fatal(err)
				}
				_, body, _ := strings.Cut(tc.resp, "\r\n\r\n")
				if strings.Contains(tc.resp, "chunked") {
					body = problem
				}
				if string(r.kept) != tc.kept || r.body != int64(len(body)) {
					t.Fatalf("response %d: kept %q of a body of %d bytes, want %q of %d", i, r.kept, r.body, tc.kept, len(body))
				}
				if r.close {
					return
				}
			}
			if err := readResponse(br, false, tc.audit, &r); err != nil || r.status != 200 || r.problem || len(r.kept) != 0 || r.body != 2 {
				t.Fatalf("the 200 after: %v, status %d, problem %v, kept %q", err, r.status, r.problem, r.kept)
			}
		})
	}
	resp := "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: " + fmt.Sprint(len(problem)) +
		"\r\n\r\n" + problem
	sr := strings.NewReader(resp)
	br := bufio.NewReader(sr)
	var r response
	if err := readResponse(br, false, true, &r); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		sr.Reset(resp)
		br.Reset(sr)
		if err := readResponse(br, false, true, &r); err != nil || len(r.kept) != len(problem) {
			t.Fatalf("%v, kept %d", err, len(r.kept))
		}
	}); n != 0 {
		t.Errorf("%v allocations per problem", n)
	}
}

// TestViolatedPolicies: each name of violated-policies becomes an advert,
// named when it is one of the audit's limits, with what the same
// response's RateLimit-Policy and RateLimit gave the policy of that name;
// a body without the member, or that does not parse, adds nothing.
func TestViolatedPolicies(t *testing.T) {
	f := &limitFields{policy: `"per-second";q=5;w=1, "per-hour";q=100;w=3600`, rateLimit: `"per-second";r=0;t=1`}
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
	exps := rulesExpectations(set)
	names := map[string]int16{}
	for k, e := range exps {
		for _, n := range e.names {
			names[n] = int16(k)
		}
	}
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
			f := &limitFields{policy: tc.policy, rateLimit: tc.rl}
			advs := parseAdverts(nil, f, names)
			s := sample{status: 429, advN: uint8(len(advs)), retryAfter: -1, limit: -1, remaining: -1, reset: -1, sent: time.Millisecond, done: 2 * time.Millisecond}
			advs = violatedPolicies(advs, []byte(`{"violated-policies":[`+tc.violated+`]}`), f, names)
			s.violated = uint8(len(advs) - int(s.advN))
			a := audit.Audit{Limits: make([]audit.LimitAudit, len(exps))}
			checkViolated(&a, []sample{s}, advs, exps, meeting{met: []uint64{tc.met}}, consumerName)
			for k, l := range a.Limits {
				h := l.Headers
				if h.Named != tc.named[k] {
					t.Errorf("%s named %d times, want %d", exps[k].id, h.Named, tc.named[k])
				}
				if tc.violation != "" && tc.named[k] > 0 {
					if h.Violations != 1 || !strings.Contains(h.Example, tc.violation) {
						t.Errorf("%s: %d violations (%q), want one: %q", exps[k].id, h.Violations, h.Example, tc.violation)
					}
				} else if h.Violations != 0 {
					t.Errorf("%s: %d violations (%q), want none", exps[k].id, h.Violations, h.Example)
				}
			}
		})
	}
}
