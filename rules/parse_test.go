package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// consumer is a valid file to break in one place at a time.
const consumer = `domain: api
descriptors:
  - key: header:X-Consumer-Id
    rate_limit: {name: per-second, unit: second, requests_per_unit: 5}
`

// mustParse parses src for the gateway, failing the test on an error.
func mustParse(t *testing.T, src string, opts ...Option) *Set {
	t.Helper()
	s, err := Parse("rules.yaml", []byte(src), append([]Option{ForGateway()}, opts...)...)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return s
}

// TestParseMistakes holds each kind of mistake: the line, the field and
// what the message says, as *Error.
func TestParseMistakes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		src     string
		envoy   bool // parsed without ForGateway
		line    int
		field   string
		message string
	}{
		{"unknown field", `domain: api
descriptors:
  - key: path
    ratelimit: {unit: second, requests_per_unit: 5}
`, false, 4, "descriptors[0].ratelimit", "unknown field (did you mean rate_limit?)"},
		{"unknown top-level field", "domain: api\ndescriptor: []\n", false, 2, "descriptor", "unknown field (did you mean descriptors?)"},
		{"bad window", `domain: api
descriptors:
  - key: path
    rate_limit: {window: 10 seconds, requests_per_unit: 5}
`, false, 4, "descriptors[0].rate_limit.window", `"10 seconds" is not a duration`},
		{"bad unit", `domain: api
descriptors:
  - key: path
    rate_limit:
      unit: secnd
      requests_per_unit: 5
`, false, 5, "descriptors[0].rate_limit.unit", `"secnd" is not a unit (want second, minute, hour, day, week, month, year)`},
		{"requests_per_unit 0", strings.Replace(consumer, "requests_per_unit: 5", "requests_per_unit: 0", 1), false, 4,
			"descriptors[0].rate_limit.requests_per_unit", "must be at least 1 (got 0)"},
		{"requests_per_unit negative", strings.Replace(consumer, "requests_per_unit: 5", "requests_per_unit: -3", 1), false, 4,
			"descriptors[0].rate_limit.requests_per_unit", "must be at least 1 (got -3)"},
		{"requests_per_unit not whole", strings.Replace(consumer, "requests_per_unit: 5", "requests_per_unit: 2.5", 1), false, 4,
			"descriptors[0].rate_limit.requests_per_unit", `"2.5" is not a whole number`},
		{"requests_per_unit a string", strings.Replace(consumer, "requests_per_unit: 5", `requests_per_unit: "5"`, 1), false, 4,
			"descriptors[0].rate_limit.requests_per_unit", `"5" is not a whole number`},
		{"requests_per_unit missing", strings.Replace(consumer, ", requests_per_unit: 5", "", 1), false, 4,
			"descriptors[0].rate_limit.requests_per_unit", "missing"},
		{"requests_per_unit × window beyond 2^53", strings.Replace(consumer, "unit: second, requests_per_unit: 5", "unit: year, requests_per_unit: 4000000000", 1), false, 4,
			"descriptors[0].rate_limit.requests_per_unit", "must be below 2^53"},
		{"duplicate limit name", `domain: api
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: per-second, unit: second, requests_per_unit: 5}
      - name: per-second
        unit: minute
        requests_per_unit: 50
`, false, 6, "descriptors[0].rate_limits[1].name", `"per-second" is also the name of the limit at line 5`},
		{"replaces an unknown name", `domain: api
descriptors:
  - key: header:X-Consumer-Id
    rate_limit: {name: per-second, unit: second, requests_per_unit: 5}
  - key: header:X-Plan
    value: gold
    rate_limit:
      unit: second
      requests_per_unit: 50
      replaces:
        - name: per-secnd
`, false, 11, "descriptors[1].rate_limit.replaces[0].name", `no limit is named "per-secnd" (did you mean per-second?)`},
		{"replaces itself", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, replaces: [{name: per-second}]}", 1), false, 4,
			"descriptors[0].rate_limit.replaces[0].name", "a limit cannot replace itself"},
		{"replaces an empty name", strings.Replace(consumer, "requests_per_unit: 5}", `requests_per_unit: 5, replaces: [{name: ""}]}`, 1), false, 4,
			"descriptors[0].rate_limit.replaces[0].name", "is empty"},
		{"wildcard in the middle of a value", `domain: api
descriptors:
  - key: path
    value: /api/*/items
    rate_limit: {unit: second, requests_per_unit: 5}
`, false, 4, "descriptors[0].value", `"/api/*/items": a wildcard (*) may only end a value`},
		{"wildcard in a key", `domain: api
descriptors:
  - key: "route*"
    rate_limit: {unit: second, requests_per_unit: 5}
`, true, 3, "descriptors[0].key", "a wildcard (*) may only end a value, never be in a key"},
		{"YAML syntax", "domain: api\ndescriptors:\n  - key: path\n    value: a: b\n", false, 4, "", "not valid YAML: mapping values are not allowed"},
		{"YAML syntax without a line", "domain: \"\\q\"\n", false, 0, "", "not valid YAML: found unknown escape character"},
		{"missing domain", "descriptors:\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 5}\n", false, 1, "domain", "missing"},
		{"empty domain", "domain: \"\"\n" + strings.TrimPrefix(consumer, "domain: api\n"), false, 1, "domain", "is empty"},
		{"duplicate key and value", `domain: api
descriptors:
  - key: path
    value: /search
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: /search
    rate_limit: {unit: minute, requests_per_unit: 50}
`, false, 6, "descriptors[1]", `duplicate descriptor composite key "api.path_/search"`},
		{"duplicate header in another case", `domain: api
descriptors:
  - key: header:x-plan
    value: gold
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: header:X-Plan
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 50}
`, false, 6, "descriptors[1]", "matches the same requests as descriptors[0] (line 3)"},
		{"rate_limit with rate_limits", `domain: api
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 5}
    rate_limits:
      - {unit: minute, requests_per_unit: 50}
`, false, 5, "descriptors[0].rate_limits", "give rate_limit or rate_limits, not both"},
		{"unlimited with a unit", `domain: api
descriptors:
  - key: path
    rate_limit: {unlimited: true, unit: second}
`, false, 4, "descriptors[0].rate_limit.unit", "an unlimited limit has no unit"},
		{"unlimited with requests", `domain: api
descriptors:
  - key: path
    rate_limit: {unlimited: true, requests_per_unit: 5}
`, false, 4, "descriptors[0].rate_limit.requests_per_unit", "an unlimited limit has no requests per unit"},
		{"unknown algorithm", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, algorithm: leaky-bucket}", 1), false, 4,
			"descriptors[0].rate_limit.algorithm", `"leaky-bucket" is not an algorithm (want fixed-window, sliding-log`},
		{"cost below 0", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, cost: -1}", 1), false, 4,
			"descriptors[0].rate_limit.cost", "must be 0 or more (got -1)"},
		{"cost above the limit", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, cost: 6}", 1), false, 4,
			"descriptors[0].rate_limit.cost", "6 is more than requests_per_unit (5)"},
		{"empty key", "domain: api\ndescriptors:\n  - key: \"\"\n    rate_limit: {unit: second, requests_per_unit: 5}\n", true, 3,
			"descriptors[0].key", "is empty"},
		{"missing key", "domain: api\ndescriptors:\n  - value: x\n    rate_limit: {unit: second, requests_per_unit: 5}\n", true, 3,
			"descriptors[0].key", "missing"},
		{"a key the gateway cannot read", "domain: api\ndescriptors:\n  - key: database\n    rate_limit: {unit: second, requests_per_unit: 5}\n", false, 3,
			"descriptors[0].key", `"database" is not a key the gateway reads`},
		{"a header name that is not one", "domain: api\ndescriptors:\n  - key: \"header:X Plan\"\n    rate_limit: {unit: second, requests_per_unit: 5}\n", false, 3,
			"descriptors[0].key", `"X Plan" is not a header name`},
		{"a path value not starting with /", "domain: api\ndescriptors:\n  - key: path\n    value: search\n    rate_limit: {unit: second, requests_per_unit: 5}\n", false, 4,
			"descriptors[0].value", "a path starts with /"},
		{"unit_multiplier without unit", strings.Replace(consumer, "unit: second, requests_per_unit: 5}", "window: 1s, unit_multiplier: 5, requests_per_unit: 5}", 1), false, 4,
			"descriptors[0].rate_limit.unit_multiplier", "needs unit"},
		{"window and unit", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, window: 1s}", 1), false, 4,
			"descriptors[0].rate_limit.window", "give window or unit, not both"},
		{"neither window nor unit", strings.Replace(consumer, "unit: second, ", "", 1), false, 4,
			"descriptors[0].rate_limit", "needs a unit"},
		{"window not a whole millisecond", strings.Replace(consumer, "unit: second", "window: 1500us", 1), false, 4,
			"descriptors[0].rate_limit.window", "a whole number of milliseconds"},
		{"window over a year", strings.Replace(consumer, "unit: second", "window: 8761h", 1), false, 4,
			"descriptors[0].rate_limit.window", "at most a year"},
		{"window negative", strings.Replace(consumer, "unit: second", "window: -1s", 1), false, 4,
			"descriptors[0].rate_limit.window", "a window is positive"},
		{"unit_multiplier over a year", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, unit_multiplier: 40000000}", 1), false, 4,
			"descriptors[0].rate_limit.unit_multiplier", "must be between 1 and 31536000"},
		{"quota_mode not a boolean", "domain: api\ndescriptors:\n  - key: path\n    quota_mode: 1\n    rate_limit: {unit: second, requests_per_unit: 5}\n", true, 4,
			"descriptors[0].quota_mode", `want true or false, got "1"`},
		{"share_threshold on an exact value", "domain: api\ndescriptors:\n  - key: path\n    value: /a\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 5}\n", true, 5,
			"descriptors[0].share_threshold", `only a value ending in * shares one counter among the values it matches (this descriptor's value is "/a")`},
		{"share_threshold on a key alone", "domain: api\ndescriptors:\n  - key: path\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 5}\n", false, 4,
			"descriptors[0].share_threshold", `only a value ending in *`},
		{"no limits", "domain: api\ndescriptors:\n  - key: path\n    value: /health\n", false, 1, "descriptors", "no limits"},
		{"no descriptors", "domain: api\n", false, 1, "descriptors", "no limits"},
		{"empty file", "# nothing\n", false, 0, "", "empty"},
		{"a field given twice", "domain: api\ndomain: web\ndescriptors: []\n", false, 2, "domain", "given twice (first at line 1)"},
		{"descriptors not a list", "domain: api\ndescriptors: {key: path}\n", false, 2, "descriptors", "want a list, got a mapping"},
		{"a descriptor not a mapping", "domain: api\ndescriptors:\n  - a\n", false, 3, "descriptors[0]", `want a mapping of fields, got "a"`},
		{"a field name not a string", "domain: api\n0.25: x\n", false, 2, "", "a field's name must be a string (got \"0.25\")"},
		{"shadow_mode not a boolean", strings.Replace(consumer, "    rate_limit", "    shadow_mode: yes\n    rate_limit", 1), false, 4,
			"descriptors[0].shadow_mode", `want true or false, got "yes"`},
		{"a name with a quote", strings.Replace(consumer, "name: per-second", `name: 'per "second"'`, 1), false, 4,
			"descriptors[0].rate_limit.name", "a name is 1 to 64 printable ASCII characters"},
		{"a second document", consumer + "---\ndomain: web\n", false, 5, "", "a second YAML document"},
		{"fallback_key on a value", `domain: api
descriptors:
  - key: header:X-Plan
    value: gold
    fallback_key: remote_address
    rate_limit: {unit: second, requests_per_unit: 5}
`, false, 5, "descriptors[0].fallback_key", "only a descriptor with no value has a fallback"},
		{"fallback_key outside the gateway", `domain: api
descriptors:
  - key: header:X-Consumer-Id
    fallback_key: remote_address
    rate_limit: {unit: second, requests_per_unit: 5}
`, true, 4, "descriptors[0].fallback_key", "is read only by the gateway"},
		{"nested too deep", "domain: api\ndescriptors:\n" + deep(maxDepth+1), false, 0, "descriptors", "nested deeper than 16 levels"},
		{"a merge key", "domain: api\nbase: &b {key: path}\n", false, 2, "base", "unknown field"},
		{"burst of an algorithm without one", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, burst: 8}", 1), false, 4,
			"descriptors[0].rate_limit.burst", "sliding-log has no burst: a burst is for algorithm: token-bucket or gcra"},
		{"burst of a fixed window", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, algorithm: fixed-window, burst: 8}", 1), true, 4,
			"descriptors[0].rate_limit.burst", "fixed-window has no burst"},
		{"burst 0", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, algorithm: gcra, burst: 0}", 1), false, 4,
			"descriptors[0].rate_limit.burst", "must be at least 1 (got 0)"},
		{"burst not whole", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, algorithm: gcra, burst: 1.5}", 1), false, 4,
			"descriptors[0].rate_limit.burst", `"1.5" is not a whole number`},
		{"burst × window beyond 2^53", strings.Replace(consumer, "unit: second, requests_per_unit: 5}",
			"unit: year, requests_per_unit: 5, algorithm: token-bucket, burst: 4000000000}", 1), false, 4,
			"descriptors[0].rate_limit.burst", "must be below 2^53"},
		{"cost above the burst", strings.Replace(consumer, "requests_per_unit: 5}", "requests_per_unit: 5, algorithm: gcra, burst: 2, cost: 3}", 1), false, 4,
			"descriptors[0].rate_limit.cost", "3 is more than the burst (2): no request could be admitted"},
		{"burst of an unlimited limit", strings.Replace(consumer, "{name: per-second, unit: second, requests_per_unit: 5}", "{unlimited: true, burst: 3}", 1), false, 4,
			"descriptors[0].rate_limit.burst", "an unlimited limit has no burst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			if !tc.envoy {
				opts = append(opts, ForGateway())
			}
			_, err := Parse("rules.yaml", []byte(tc.src), opts...)
			if err == nil {
				t.Fatalf("no error for\n%s", tc.src)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is not a *rules.Error", err)
			}
			if e.File != "rules.yaml" || (tc.line > 0 && e.Line != tc.line) || !strings.HasPrefix(e.Field, tc.field) ||
				!strings.Contains(e.Message, tc.message) {
				t.Errorf("got %q (line %d, field %q)\nwant line %d, field %q, message containing %q", err, e.Line, e.Field, tc.line, tc.field, tc.message)
			}
			if tc.line > 0 && !strings.HasPrefix(e.Error(), "rules.yaml:") {
				t.Errorf("%q does not start with the file and line", e.Error())
			}
		})
	}
}

// TestParseBurst: burst reads into the limit's policy, in rules files and
// in envoyproxy/ratelimit's files for the service alike (where, as
// algorithm and window, it extends Envoy's format), and is said in words.
func TestParseBurst(t *testing.T) {
	src := `domain: api
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: nginx-like, unit: second, requests_per_unit: 10, algorithm: gcra, burst: 6}
      - {name: deep, window: 1m, requests_per_unit: 100, algorithm: token-bucket, burst: 250}
      - {name: plain, unit: hour, requests_per_unit: 1000, algorithm: gcra}
`
	for _, opts := range [][]Option{{ForGateway()}, {ForService()}} {
		s, err := Parse("rules.yaml", []byte(src), opts...)
		if err != nil {
			t.Fatal(err)
		}
		ls := s.Limits()
		if ls[0].Policy.Burst != 6 || ls[0].Policy.Capacity() != 6 || ls[1].Policy.Burst != 250 || ls[2].Policy.Burst != 0 || ls[2].Policy.Capacity() != 1000 {
			t.Fatalf("bursts %+v %+v %+v", ls[0].Policy, ls[1].Policy, ls[2].Policy)
		}
		var b strings.Builder
		if err := s.Describe(&b); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"a burst of 6, then 10 per 1s (gcra)", "a burst of 250, then 100 per 1m (token-bucket)", "at most 1000 per 1h (gcra)"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("described as\n%s\nwithout %q", b.String(), want)
			}
		}
	}
}

// deep is n levels of nested descriptors, the last with a limit.
func deep(n int) string {
	var b strings.Builder
	for i := range n {
		ind := strings.Repeat("    ", i)
		b.WriteString(ind + "  - key: path\n")
		if i == n-1 {
			b.WriteString(ind + "    rate_limit: {unit: second, requests_per_unit: 5}\n")
		} else {
			b.WriteString(ind + "    descriptors:\n")
		}
	}
	return b.String()
}

func TestErrorReadsAsFileLineField(t *testing.T) {
	src := strings.Replace(consumer, "unit: second", "unit: secnd", 1)
	_, err := Parse("rules.yaml", []byte(src))
	want := `rules.yaml:4: descriptors[0].rate_limit.unit: "secnd" is not a unit (want second, minute, hour, day, week, month, year)`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// TestParseCollectsMistakes: mistakes in different places are reported
// together, in line order, each an *Error.
func TestParseCollectsMistakes(t *testing.T) {
	src := `domain: api
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {unit: secnd, requests_per_unit: 5}
      - {window: 10s, requests_per_unit: 0, algorithm: leaky}
  - key: database
    value: /a*b
`
	_, err := Parse("rules.yaml", []byte(src), ForGateway())
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("got %v, want several errors joined", err)
	}
	var lines []int
	for _, e := range joined.Unwrap() {
		var re *Error
		if !errors.As(e, &re) {
			t.Fatalf("%v is not a *rules.Error", e)
		}
		lines = append(lines, re.Line)
	}
	if want := []int{5, 6, 6, 7, 8}; !equalInts(lines, want) {
		t.Errorf("lines %v, want %v:\n%v", lines, want, err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestParseManyMistakesBounded: a file of many mistakes reports a bounded
// number of them.
func TestParseManyMistakesBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: api\ndescriptors:\n")
	for range 100 {
		b.WriteString("  - key: path\n    rate_limit: {unit: secnd, requests_per_unit: 5}\n")
	}
	_, err := Parse("rules.yaml", []byte(b.String()))
	errs := err.(interface{ Unwrap() []error }).Unwrap()
	if len(errs) != maxErrors+1 || !strings.Contains(errs[maxErrors].Error(), "and 80 more mistakes") {
		t.Errorf("%d errors, the last %v", len(errs), errs[len(errs)-1])
	}
}

// TestParseAliasBomb: YAML aliases that repeat a list many times over are
// refused after a bounded amount of work, not expanded.
func TestParseAliasBomb(t *testing.T) {
	src := `domain: api
descriptors: &a9
  - key: k
    descriptors: &a8
      - key: k
        descriptors: &a7
          - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}
          - {key: l, descriptors: *a7}
      - {key: l, descriptors: *a8}
  - {key: l, descriptors: *a9}
`
	_, err := Parse("rules.yaml", []byte(src))
	if err == nil {
		t.Fatal("a self-referencing alias parsed")
	}
	// Without a cycle: each list holds the one before ten times over.
	var b strings.Builder
	b.WriteString("domain: api\ndescriptors:\n  - key: k\n    descriptors: &a0 [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	for i := 1; i < 12; i++ {
		fmt.Fprintf(&b, "  - key: k%d\n    descriptors: &a%d [", i, i)
		for j := range 10 {
			fmt.Fprintf(&b, "{key: k%d, descriptors: *a%d}, ", j, i-1)
		}
		b.WriteString("]\n")
	}
	_, err = Parse("rules.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "more than 10000 descriptors") {
		t.Errorf("10^11 descriptors through aliases: %v", err)
	}
}

func TestParseReadsTheModel(t *testing.T) {
	s := mustParse(t, `domain: api
descriptors:
  - key: header:x-consumer-id
    rate_limits:
      - {name: per-second, unit: Second, requests_per_unit: 5}
      - {name: per-10s, window: 10s, requests_per_unit: 12, algorithm: gcra, cost: 2}
      - {unit: minute, unit_multiplier: 5, requests_per_unit: 100, shadow_mode: true}
    descriptors:
      - key: path
        value: /search
        shadow_mode: true
        rate_limit: {name: search, unit: second, requests_per_unit: 2}
  - key: generic_key
    value: global
    rate_limit: {unlimited: true}
`, WithDefaultAlgorithm("token-bucket"))
	if s.Domain != "api" || len(s.Version) != 12 || len(s.Descriptors) != 2 {
		t.Fatalf("domain %q, version %q, %d descriptors", s.Domain, s.Version, len(s.Descriptors))
	}
	ls := s.Limits()
	type want struct {
		id, unit, alg   string
		limit           int64
		window          time.Duration
		cost            int64
		shadow, unlimit bool
		tagKey          string
	}
	wants := []want{
		{"per-second", "second", "token-bucket", 5, time.Second, 1, false, false, "header:X-Consumer-Id"},
		{"per-10s", "", "gcra", 12, 10 * time.Second, 2, false, false, "header:X-Consumer-Id"},
		{"header:x-consumer-id#2", "", "token-bucket", 100, 5 * time.Minute, 1, true, false, "header:X-Consumer-Id"},
		{"search", "second", "token-bucket", 2, time.Second, 1, true, false, "header:X-Consumer-Id"},
		{"generic_key_global", "", "token-bucket", 0, 0, 1, false, true, ""},
	}
	if len(ls) != len(wants) {
		t.Fatalf("%d limits, want %d", len(ls), len(wants))
	}
	for i, w := range wants {
		l := ls[i]
		got := want{l.ID, l.Unit, l.Algorithm, l.Policy.Limit, l.Policy.Window, l.Cost, l.Shadow, l.Unlimited, l.TagKey()}
		if got != w {
			t.Errorf("limit %d: got %+v\nwant %+v", i, got, w)
		}
	}
	if !ls[4].Global() || ls[0].Global() {
		t.Error("Global: want the generic_key limit only")
	}
	if d := s.Descriptors[0].Descriptors[0]; d.Parent != s.Descriptors[0] || d.Line != 9 || d.Field != "descriptors[0].descriptors[0]" {
		t.Errorf("nested descriptor: parent %p, line %d, field %q", d.Parent, d.Line, d.Field)
	}
	if a := s.Descriptors[0].Attribute(); a != (Attribute{Kind: KindHeader, Name: "X-Consumer-Id"}) {
		t.Errorf("attribute %+v", a)
	}
}

func TestVersionIsTheSourceHash(t *testing.T) {
	a, b := mustParse(t, consumer), mustParse(t, consumer)
	c := mustParse(t, consumer+"# a comment\n")
	if a.Version != b.Version || a.Version == c.Version {
		t.Errorf("versions %s %s %s: want the same bytes alike, others apart", a.Version, b.Version, c.Version)
	}
}

func TestParseDefaultAlgorithmChecked(t *testing.T) {
	if _, err := Parse("rules.yaml", []byte(consumer), WithDefaultAlgorithm("naive")); err == nil {
		t.Error("naive accepted as the default algorithm")
	}
}

// TestParseLimitBounds: no file makes Parse read limits without end. A
// rate_limits list and a replaces list are bounded, and so is every limit of
// a file, each repetition of an alias counted.
func TestParseLimitBounds(t *testing.T) {
	// aliased is levels of descriptors, each holding the one below ten
	// times over, the deepest a rate_limits list of n limits repeated
	// through an alias: 10^levels × n limits from a few lines.
	aliased := func(levels, n int) string {
		var b strings.Builder
		b.WriteString("domain: d\ndescriptors:\n  - key: l\n    rate_limits: &l [")
		for range n {
			b.WriteString("{unit: second, requests_per_unit: 1}, ")
		}
		b.WriteString("]\n  - key: a\n    descriptors: &a0 [{key: k, rate_limits: *l}]\n")
		for i := 1; i <= levels; i++ {
			fmt.Fprintf(&b, "  - key: a%d\n    descriptors: &a%d [", i, i)
			for j := range 10 {
				fmt.Fprintf(&b, "{key: k%d, descriptors: *a%d}, ", j, i-1)
			}
			b.WriteString("]\n")
		}
		return b.String()
	}
	replaces := func(n int) string {
		var b strings.Builder
		b.WriteString("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n")
		for i := range n {
			fmt.Fprintf(&b, "        - name: l%d\n", i)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name, src string
		line      int
		field     string
		message   string
	}{
		{"a rate_limits list repeated through aliases", aliased(3, 1000), 0, "rate_limits",
			fmt.Sprintf("more than %d limits in the file (each repetition of an alias counts)", maxLimits)},
		{"one rate_limits list too long", unnamed(maxRateLimits + 1), 4, "descriptors[0].rate_limits",
			fmt.Sprintf("%d limits: a list holds at most %d", maxRateLimits+1, maxRateLimits)},
		{"a replaces list too long", replaces(maxReplaces + 1), 7, "descriptors[0].rate_limit.replaces",
			fmt.Sprintf("%d names: a limit replaces at most %d", maxReplaces+1, maxReplaces)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tc.src))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want a *rules.Error", err)
			}
			if (tc.line > 0 && e.Line != tc.line) || !strings.HasSuffix(e.Field, tc.field) || !strings.Contains(e.Message, tc.message) {
				t.Errorf("got %v\nwant line %d, field %s, message containing %q", err, tc.line, tc.field, tc.message)
			}
			if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > maxErrors+1 {
				t.Errorf("%d errors", len(j.Unwrap()))
			}
		})
	}
}

// unnamed is a file of one descriptor with n unnamed limits.
func unnamed(n int) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n")
	for i := range n {
		fmt.Fprintf(&b, "      - {unit: second, requests_per_unit: %d}\n", i+1)
	}
	return b.String()
}

// TestParseManyLimitsOnOneDescriptor: the most limits a descriptor may hold
// parse, each named by its place in the list.
func TestParseManyLimitsOnOneDescriptor(t *testing.T) {
	s, err := Parse("rules.yaml", []byte(unnamed(maxRateLimits)))
	if err != nil {
		t.Fatal(err)
	}
	ls := s.Limits()
	if len(ls) != maxRateLimits {
		t.Fatalf("%d limits, want %d", len(ls), maxRateLimits)
	}
	for i, l := range ls {
		if want := fmt.Sprintf("k#%d", i); l.ID != want || l.Policy.Limit != int64(i+1) {
			t.Fatalf("limit %d: ID %q, limit %d; want %s, %d", i, l.ID, l.Policy.Limit, want, i+1)
		}
	}
}

// TestParseWarnings: what envoyproxy/ratelimit accepts and ratelab does not
// do as written is accepted with a warning naming the line and field, only
// where it would have an effect; ForService alone accepts what ratelab's
// own files refuse.
func TestParseWarnings(t *testing.T) {
	const service, other = true, false
	for _, tc := range []struct {
		name    string
		src     string
		service bool     // parsed ForService, else without options
		want    []string // each warning's start, in order
	}{
		{"value_to_metric", "domain: api\ndescriptors:\n  - key: path\n    value_to_metric: true\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
			other, []string{"rules.yaml:4: descriptors[0].value_to_metric: ignored: it names envoyproxy/ratelimit's statistics"}},
		{"value_to_metric false", "domain: api\ndescriptors:\n  - key: path\n    value_to_metric: false\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
			other, nil},
		{"no descriptors", "domain: test-domain\ndescriptors:\n", service,
			[]string{`rules.yaml:1: descriptors: no limits: every descriptor of domain "test-domain" is answered OK`}},
		{"descriptors without limits", "domain: d\ndescriptors:\n  - key: k\n    value: v\n", service,
			[]string{`rules.yaml:1: descriptors: no limits`}},
		{"a field envoyproxy/ratelimit ignores there", `domain: d
key: k
descriptors:
  - key: k
    name: n
    unit: second
    rate_limit:
      unit: second
      requests_per_unit: 5
      detailed_metric: true
      quota_mode: false
      replaces: [{name: other, unit: day}]
  - key: other
    rate_limit: {name: other, unit: second, requests_per_unit: 1}
`, service, []string{
			"rules.yaml:2: key: ignored: envoyproxy/ratelimit accepts key here and does nothing with it",
			"rules.yaml:5: descriptors[0].name: ignored",
			"rules.yaml:6: descriptors[0].unit: ignored",
			"rules.yaml:10: descriptors[0].rate_limit.detailed_metric: ignored",
			"rules.yaml:12: descriptors[0].rate_limit.replaces[0].unit: ignored",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			if tc.service {
				opts = append(opts, ForService())
			}
			s, err := Parse("rules.yaml", []byte(tc.src), opts...)
			if err != nil {
				t.Fatal(err)
			}
			checkWarnings(t, s.Warnings, tc.want)
			if tc.service {
				if _, err := Parse("rules.yaml", []byte(tc.src)); err == nil {
					t.Error("accepted without ForService")
				}
			}
		})
	}
}

// TestQuotaMode: quota_mode puts the limits of its descriptor, and only
// those, in quota mode, which is shadow mode told apart.
func TestQuotaMode(t *testing.T) {
	s, err := Parse("rules.yaml", []byte(`domain: d
descriptors:
  - key: tenant
    quota_mode: true
    rate_limits:
      - {name: quota, unit: day, requests_per_unit: 1000}
      - {name: quota-hour, unit: hour, requests_per_unit: 100}
    descriptors:
      - key: user
        rate_limit: {name: nested, unit: second, requests_per_unit: 5}
  - key: trial
    shadow_mode: true
    quota_mode: false
    rate_limit: {name: shadow, unit: second, requests_per_unit: 5}
  - key: plain
    rate_limit: {name: plain, unit: second, requests_per_unit: 5, shadow_mode: true}
`), ForService())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Warnings) != 0 {
		t.Errorf("warnings %v", s.Warnings)
	}
	want := map[string][2]bool{"quota": {true, true}, "quota-hour": {true, true}, "nested": {false, false},
		"shadow": {true, false}, "plain": {true, false}}
	for _, l := range s.Limits() {
		if got := [2]bool{l.Shadow, l.Quota}; got != want[l.ID] {
			t.Errorf("%s: shadow, quota %v, want %v", l.ID, got, want[l.ID])
		}
		if words := l.String(); strings.Contains(words, "quota mode") != l.Quota {
			t.Errorf("%s: %s", l.ID, words)
		}
	}
}

// TestParseServiceValues: the rate limit service reads values as
// envoyproxy/ratelimit's YAML 1.1 reads them, where ratelab's own files
// refuse them: yes, no, on and off as booleans and null as false, a null
// rate_limit as none, a missing requests_per_unit as 0, and an unlimited
// limit's requests_per_unit ignored.
func TestParseServiceValues(t *testing.T) {
	const limit = "    rate_limit: {unit: second, requests_per_unit: 5}\n"
	for _, tc := range []struct {
		name     string
		src      string // the descriptors
		check    func(*Set) bool
		warnings []string
	}{
		{"yes", "  - key: k\n    shadow_mode: yes\n" + limit, func(s *Set) bool { return s.Limits()[0].Shadow }, nil},
		{"On", "  - key: k\n    quota_mode: On\n" + limit, func(s *Set) bool { return s.Limits()[0].Quota }, nil},
		{"no", "  - key: k\n    shadow_mode: no\n" + limit, func(s *Set) bool { return !s.Limits()[0].Shadow }, nil},
		{"null", "  - key: k\n    shadow_mode:\n" + limit, func(s *Set) bool { return !s.Limits()[0].Shadow }, nil},
		{"a null rate_limit", "  - key: k\n    rate_limit:\n  - key: l\n" + limit,
			func(s *Set) bool { return len(s.Limits()) == 1 && s.Lookup(entries("k", "1")) == nil }, nil},
		{"no requests_per_unit", "  - key: k\n    rate_limit: {unit: hour}\n", func(s *Set) bool {
			l := s.Limits()[0]
			return l.Blocks && l.Policy.Window == time.Hour
		}, []string{"rules.yaml:4: descriptors[0].rate_limit.requests_per_unit: missing: read as 0"}},
		{"unlimited with requests_per_unit", "  - key: k\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n",
			func(s *Set) bool { return s.Limits()[0].Unlimited },
			[]string{"rules.yaml:4: descriptors[0].rate_limit.requests_per_unit: ignored: an unlimited limit has no requests per unit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "domain: d\ndescriptors:\n" + tc.src
			s, err := Parse("rules.yaml", []byte(src), ForService())
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("read otherwise:\n%s", src)
			}
			checkWarnings(t, s.Warnings, tc.warnings)
			if _, err := Parse("rules.yaml", []byte(src)); err == nil {
				t.Error("accepted without ForService")
			}
		})
	}
	// A quoted "yes" is a string in YAML 1.1 too.
	if _, err := Parse("rules.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: \"yes\"\n"+limit), ForService()); err == nil ||
		!strings.Contains(err.Error(), `descriptors[0].shadow_mode: want true or false, got "yes"`) {
		t.Errorf("a quoted yes: %v", err)
	}
}
