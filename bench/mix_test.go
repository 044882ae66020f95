package bench

import (
	"bufio"
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/audit"
)

// A mix sends each route its share by weight, to every consumer alike,
// and each consumer the value its place among the weights gives it; every
// request is one that net/http reads, rendered before the run without an
// allocation per request.
func TestMix(t *testing.T) {
	cfg := HTTPConfig{Target: "http://127.0.0.1:8080/ignored?x=1", Method: "GET", Requests: 1, Consumers: 10, ConsumerHeader: "X-Consumer-Id",
		Header: http.Header{"Authorization": {"Bearer a"}},
		Routes: []Route{ParseRoute("/search?q=redis:1"), ParseRoute("/items:3")},
		ConsumerValues: []ConsumerValues{{Header: "X-Plan", Values: []WeightedValue{{"gold", 1}, {"free", 4}}},
			{Header: "X-Region", Values: []WeightedValue{{"eu", 1}, {"us", 1}}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.defaults()
	m, _, err := newMix(cfg)
	if err != nil {
		t.Fatal(err)
	}
	routes := map[int]map[string]int{}
	buf := make([]byte, 0, 512)
	for j := range int64(400) {
		consumer := int(j % 10)
		r := m.route(j, consumer, 10)
		raw := m.request(r, consumer).render(&buf, consumer)
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if routes[consumer] == nil {
			routes[consumer] = map[string]int{}
		}
		routes[consumer][req.URL.RequestURI()]++
		plan, region := "free", "us"
		if consumer%5 == 0 {
			plan = "gold"
		}
		if consumer%2 == 0 {
			region = "eu"
		}
		if req.Header.Get("X-Consumer-Id") != consumerName(int32(consumer)) || req.Header.Get("X-Plan") != plan ||
			req.Header.Get("X-Region") != region || req.Header.Get("Authorization") != "Bearer a" {
			t.Fatalf("consumer %d sent %q", consumer, raw)
		}
	}
	for c, got := range routes {
		if got["/search?q=redis"] != 10 || got["/items?x=1"] != 30 {
			t.Errorf("consumer %d sent %v: want 10 to /search?q=redis and 30 to /items?x=1 (the URL's query kept)", c, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { m.request(m.route(7, 7, 10), 7).render(&buf, 7) }); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}

// Bad routes and consumer values are refused, naming the field.
func TestMixRefused(t *testing.T) {
	base := HTTPConfig{Target: "http://h/", Requests: 1, Consumers: 2, ConsumerHeader: "X-Consumer-Id"}
	for name, change := range map[string]func(*HTTPConfig){
		"not a path":   func(c *HTTPConfig) { c.Routes = []Route{{Path: "search", Weight: 1}} },
		"a line break": func(c *HTTPConfig) { c.Routes = []Route{{Path: "/a\r\nX: 1", Weight: 1}} },
		"weight 0":     func(c *HTTPConfig) { c.Routes = []Route{{Path: "/a", Weight: 0}} },
		"no consumers": func(c *HTTPConfig) {
			c.Consumers, c.ConsumerHeader = 0, ""
			c.ConsumerValues = []ConsumerValues{{"X-Plan", []WeightedValue{{"a", 1}}}}
		},
		"consumer header":  func(c *HTTPConfig) { c.ConsumerValues = []ConsumerValues{{"x-consumer-id", []WeightedValue{{"a", 1}}}} },
		"empty value":      func(c *HTTPConfig) { c.ConsumerValues = []ConsumerValues{{"X-Plan", []WeightedValue{{"", 1}}}} },
		"too many to send": func(c *HTTPConfig) { c.ConsumerValues = make([]ConsumerValues, 11); manyValues(c.ConsumerValues) },
	} {
		c := base
		change(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: %+v validated", name, c)
		}
	}
	if _, err := ParseConsumerValues("X-Plan gold"); err == nil {
		t.Error("a value list without a colon parsed")
	}
	if cv, err := ParseConsumerValues("X-Plan: gold:1, free:9,trial"); err != nil || len(cv.Values) != 3 || cv.Values[1] != (WeightedValue{"free", 9}) ||
		cv.Values[2] != (WeightedValue{"trial", 1}) {
		t.Errorf("parsed %+v, %v", cv, err)
	}
}

func manyValues(cvs []ConsumerValues) {
	for i := range cvs {
		cvs[i] = ConsumerValues{Header: "X-H" + string(rune('a'+i)), Values: []WeightedValue{{"a", 1}, {"b", 1}}}
	}
}

// Every policy of a response is read and held to the limit it names: by
// name, or by quota and window; a response whose policies are none of its
// limits' holds its first to the tightest (the lowest rate); legacy
// fields go to the limit their quota is, else the tightest.
func TestProject(t *testing.T) {
	exps := []expectation{
		{policy: policyOf(5, time.Second), quota: 5, cost: 1, names: []string{"per-second"}},
		{policy: policyOf(12, 10*time.Second), quota: 12, cost: 1, names: []string{"per-10s"}},
	}
	names := map[string]int16{"per-second": 0, "per-10s": 1}
	for _, tc := range []struct {
		name  string
		f     limitFields
		names map[string]int16
		want  [2][2]int64 // per limit: limit, remaining
	}{
		{"by name", limitFields{policy: `"per-second";q=5;w=1, "per-10s";q=12;w=10`, rateLimit: `"per-10s";r=7;t=4, "per-second";r=2;t=1`},
			names, [2][2]int64{{5, 2}, {12, 7}}},
		{"by quota and window", limitFields{policy: `"a";q=12;w=10, "b";q=5;w=1`, rateLimit: `"b";r=1;t=1, "a";r=3;t=9`},
			nil, [2][2]int64{{5, 1}, {12, 3}}},
		{"one of them", limitFields{policy: `"b";q=5;w=1`, rateLimit: `"b";r=1;t=1`}, nil, [2][2]int64{{5, 1}, {-1, -1}}},
		{"none of them", limitFields{policy: `"x";q=7;w=1`, rateLimit: `"x";r=6;t=1`}, nil, [2][2]int64{{-1, -1}, {7, 6}}}, // 12 per 10 s is the lower rate
		{"legacy", limitFields{limit: "12", remaining: "4"}, nil, [2][2]int64{{-1, -1}, {12, 4}}},
		{"legacy of no limit", limitFields{xLimit: "100", xRemaining: "99"}, nil, [2][2]int64{{-1, -1}, {100, 99}}},
		{"the tightest alone", limitFields{policy: `"per-second";q=5;w=1, "per-10s";q=12;w=10`, rateLimit: `"per-10s";r=0;t=7`, limit: "12", remaining: "0"},
			names, [2][2]int64{{5, -1}, {12, 0}}},
	} {
		advs := parseAdverts(nil, &tc.f, tc.names)
		if tc.name == "legacy" {
			// Two limits of one quota: the legacy fields could be either's.
			same := []expectation{exps[1], exps[1]}
			same[0].policy.Window = 60 * time.Second
			s := sample{status: 200, advN: uint8(len(advs)), limit: -1, remaining: -1, reset: -1}
			project(&s, advs, 0, 3, 3, same)
			if s.limit != -1 || s.remaining != -1 {
				t.Errorf("legacy fields of two limits of one quota held to the first: %d, %d", s.limit, s.remaining)
			}
		}
		if tc.name == "by quota and window" {
			// Held to 12 per 10 s alone, the response's other policy is
			// one the audit was not told of: not a wrong one.
			s := sample{status: 200, advN: uint8(len(advs)), limit: -1, remaining: -1, reset: -1}
			project(&s, advs, 0, 1, 1, exps[1:])
			if s.limit != 12 || s.remaining != 3 {
				t.Errorf("12/10s alone: read as %d, %d", s.limit, s.remaining)
			}
		}
		for k := range exps {
			s := sample{status: 200, advN: uint8(len(advs)), limit: -1, remaining: -1, reset: -1}
			project(&s, advs, k, 3, 3, exps)
			if got := [2]int64{s.limit, s.remaining}; got != tc.want[k] {
				t.Errorf("%s: limit %d read as %v, want %v (adverts %+v)", tc.name, k, got, tc.want[k], advs)
			}
		}
	}
}

// A conflicting or mixed expectation is refused before anything is sent.
func TestExpectRefused(t *testing.T) {
	base := HTTPConfig{Target: "http://h/", Requests: 1, Consumers: 2, ConsumerHeader: "X-Consumer-Id"}
	for name, ls := range map[string][]ExpectedLimit{
		"one window twice": {{Limit: 5, Window: time.Second}, {Limit: 6, Window: time.Second}},
		"no algorithm":     {{Limit: 5, Window: time.Second, Algorithm: "naive"}},
		"bad window":       {{Limit: 5, Window: 0}},
	} {
		c := base
		c.ExpectLimits = ls
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
	if _, err := ParseExpectedLimits("5/1s,12/10s:gcra", ""); err != nil {
		t.Error(err)
	}
	for bad, want := range map[string]string{
		"5/1s,":                     `ExpectLimits "": want requests/window, such as 100/1m`,
		"5/1s:nope":                 `ExpectLimits "5/1s:nope": "nope" is not an algorithm`,
		"x/1s":                      `ExpectLimits "x/1s": "x" is not a whole number`,
		"0/1s":                      `ExpectLimits "0/1s": limit must be at least 1 (got 0)`,
		"0/1s:gcra":                 `ExpectLimits "0/1s:gcra": limit must be at least 1 (got 0)`,
		"5/1s,0/10s":                `ExpectLimits "0/10s": limit must be at least 1 (got 0)`,
		"10/s":                      `ExpectLimits "10/s": the window "s" needs a number: a window such as 1s`,
		"10/1s:sliding-log:burst=6": `ExpectLimits "10/1s:sliding-log:burst=6": burst is for token-bucket and gcra: sliding-log has none`,
		"10/1s:burst=6": `ExpectLimits "10/1s:burst=6": a burst is for token-bucket and gcra, and it names no algorithm: ` +
			`name one, as in 10/1s:gcra:burst=6`,
		"10/1s:gcra:burst=0": `ExpectLimits "10/1s:gcra:burst=0": burst must be at least 1 (got 0)`,
	} {
		_, err := ParseExpectedLimits(bad, "")
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", bad, err, want)
		}
	}
	if _, err := ParseExpectedLimits("10/1s:burst=6", "fixed-window"); err == nil ||
		err.Error() != `ExpectLimits "10/1s:burst=6": a burst is for token-bucket and gcra, and ExpectAlgorithm is fixed-window: name one, as in 10/1s:gcra:burst=6` {
		t.Errorf("a burst for --expect-algorithm fixed-window: %v", err)
	}
	// nginx's rate=10r/s burst=5, stated as gateways state it.
	for in, want := range map[string]ExpectedLimit{
		"10/1s:gcra:burst=6": {Limit: 10, Window: time.Second, Algorithm: "gcra", Burst: 6},
		"10r/s:burst=6":      {Limit: 10, Window: time.Second, Algorithm: "token-bucket", Burst: 6},
	} {
		ls, err := ParseExpectedLimits(in, "token-bucket")
		if err != nil || len(ls) != 1 || ls[0] != want {
			t.Errorf("%q: %+v, %v; want %+v", in, ls, err, want)
		}
	}
	if got := (ExpectedLimit{Limit: 10, Window: time.Second, Algorithm: "gcra", Burst: 6}).String(); got != "10/1s:gcra:burst=6" {
		t.Errorf("written %q", got)
	}
}

func policyOf(limit int64, window time.Duration) algorithms.Policy {
	return algorithms.Policy{Limit: limit, Window: window}
}

// A denial is the limit's own when its window alone was full; it is
// under-admission only when every limit its request met would surely have
// admitted it; shadow limits are reported and never judged, and never
// make the run's verdict.
func TestDenialsAttributedConservatively(t *testing.T) {
	search := expectation{policy: policyOf(2, time.Second), guarantee: algorithms.SlidingWindow, quota: 2, cost: 1, id: "search"}
	all := expectation{policy: policyOf(5, time.Second), guarantee: algorithms.SlidingWindow, quota: 5, cost: 1, id: "all"}
	shadow := expectation{policy: policyOf(1, time.Second), guarantee: algorithms.SlidingWindow, quota: 1, cost: 1, id: "trial", shadow: true}
	at := func(ms int, status int16) sample {
		d := time.Duration(ms) * time.Millisecond
		return sample{status: status, sent: d, done: d + time.Millisecond, retryAfter: -1, limit: -1, remaining: -1, reset: -1}
	}
	// To /search: two admitted, then a denial (search was full; all was
	// not). To /items: a denial when nothing had been admitted for a
	// second (neither was full: all denied it wrongly).
	samples := []sample{at(1500, 200), at(1600, 200), at(1700, 429), at(3500, 429)}
	onSearch := limitCounters{idx: []int32{0, 1, 2}, counter: []int32{0, 0, 0}, names: []string{"consumer-0"}}
	every := limitCounters{idx: []int32{0, 1, 2, 3}, counter: []int32{0, 0, 0, 0}, names: []string{"consumer-0"}}
	m := meeting{met: []uint64{0b111, 0b111, 0b111, 0b110}, of: []limitCounters{onSearch, every, every}}
	a := auditLimits(samples, nil, []expectation{search, all, shadow}, m, coverage{horizon: -1})
	s, e, sh := a.Limits[0], a.Limits[1], a.Limits[2]
	if s.DenialsJudged != 1 || s.UnderAdmitted != 0 || s.DenialsAttributed != 1 {
		t.Errorf("search: %d judged, %d under, %d its own: want 1, 0 and 1", s.DenialsJudged, s.UnderAdmitted, s.DenialsAttributed)
	}
	if e.DenialsJudged != 2 || e.UnderAdmitted != 1 || e.DenialsElsewhere != 1 || e.DenialsAttributed != 0 {
		t.Errorf("all: %d judged, %d under, %d elsewhere, %d its own: want 2, 1, 1 and 0", e.DenialsJudged, e.UnderAdmitted,
			e.DenialsElsewhere, e.DenialsAttributed)
	}
	// all never denied a request of its own: it was never tested.
	if sh.Verdict != audit.NotJudged || sh.Admitted != 2 || sh.Requests != 4 || s.Verdict != audit.Held || e.Verdict != audit.NotReached ||
		a.Verdict != audit.NotReached || !slices.Equal(a.Reasons, []string{"all: 2 of 5 in 1s: not tested"}) {
		t.Errorf("verdicts %s, %s, %s (shadow: %d of %d admitted), run %s %q", s.Verdict, e.Verdict, sh.Verdict, sh.Admitted, sh.Requests,
			a.Verdict, a.Reasons)
	}
}

// A route replaces the URL's path and keeps its query, where {consumer}
// may stand, unless it has a query of its own; a placeholder in the
// URL's path, which every route would drop, is refused.
func TestRoutesKeepTheQuery(t *testing.T) {
	for _, c := range []struct{ target, path, want string }{
		{"http://h:1/?key={consumer}", "/search", "http://h:1/search?key={consumer}"},
		{"http://h:1/a?key={consumer}", "/search?q=1", "http://h:1/search?q=1"},
		{"http://h:1", "/items", "http://h:1/items"},
		{"http://h:1/x", "/items", "http://h:1/items"},
	} {
		if got := withPath(c.target, c.path); got != c.want {
			t.Errorf("withPath(%q, %q) = %q, want %q", c.target, c.path, got, c.want)
		}
	}
	cfg := HTTPConfig{Target: "http://127.0.0.1:8080/users/{consumer}", Method: "GET", Requests: 1, Consumers: 2,
		Routes: []Route{ParseRoute("/search:1")}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "{consumer} in the URL's query") {
		t.Errorf("a placeholder in the URL's path with --path: %v, want it refused", err)
	}
	cfg.Target = "http://127.0.0.1:8080/?key={consumer}"
	if err := cfg.Validate(); err != nil {
		t.Errorf("{consumer} in the URL's query with --path: %v", err)
	}
}
