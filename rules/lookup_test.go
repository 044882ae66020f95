package rules

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// These tests port envoyproxy/ratelimit's test/config/config_test.go at
// 3fb702589d36: the same files and descriptors, the same decisions.

// parseEnvoy parses src as the rate limit service reads files: any key.
func parseEnvoy(t *testing.T, name, src string) *Set {
	t.Helper()
	s, err := Parse(name, []byte(src))
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return s
}

// entries makes a descriptor from key, value pairs.
func entries(kv ...string) []Entry {
	es := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{kv[i], kv[i+1]})
	}
	return es
}

// want is what one lookup should find: nothing, or one limit.
type want struct {
	none      bool
	limit     int64
	window    time.Duration
	name      string
	shadow    bool
	unlimited bool
}

func (w want) check(t *testing.T, s *Set, es []Entry) {
	t.Helper()
	hits := s.Lookup(es)
	if w.none {
		if len(hits) != 0 {
			t.Errorf("%v: got %s, want no limit", es, hits[0].Limit)
		}
		return
	}
	if len(hits) != 1 {
		t.Errorf("%v: %d hits, want 1", es, len(hits))
		return
	}
	l := hits[0].Limit
	if l.Policy.Limit != w.limit || l.Policy.Window != w.window || l.Name != w.name || l.Shadow != w.shadow || l.Unlimited != w.unlimited {
		t.Errorf("%v: got %d/%s name %q shadow %v unlimited %v, want %+v", es, l.Policy.Limit, l.Policy.Window, l.Name, l.Shadow, l.Unlimited, w)
	}
	if len(hits[0].Entries) != len(es) {
		t.Errorf("%v: hit entries %v", es, hits[0].Entries)
	}
}

const basicConfig = `# Basic configuration for testing.
domain: test-domain
descriptors:
  # Top level key/value with no default rate limit.
  - key: key1
    value: value1
    descriptors:
      # 2nd level key only with default rate limit.
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5

      # 2nd level key/value with limit. Specific override at 2nd level.
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10

  # Top level key only with default rate limit.
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20

  # Top level key/value with limit. Specific override at 1st level.
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30

  # First level override with no limit. This effectively whitelists the value.
  - key: key2
    value: value3

  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1

  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1

  - key: key5
    value: value5
    rate_limit:
      unit: day
      requests_per_unit: 15
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit:
          unit: day
          requests_per_unit: 25

  - key: key6
    rate_limit:
      unlimited: true

  # Top level key only with default rate limit.

  - key: key7
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 70
`

func TestLookupBasicConfig(t *testing.T) {
	s := parseEnvoy(t, "basic_config.yaml", basicConfig)
	day := 24 * time.Hour
	for _, tc := range []struct {
		es []Entry
		w  want
	}{
		{nil, want{none: true}},
		{entries("key1", "something"), want{none: true}},
		{entries("key1", "value1"), want{none: true}},
		{entries("key2", "value2", "subkey", "subvalue"), want{none: true}},
		{entries("key5", "value5", "subkey5", "subvalue"), want{none: true}},
		{entries("key1", "value1", "subkey1", "something"), want{limit: 5, window: time.Second}},
		{entries("key1", "value1", "subkey1", "subvalue1"), want{limit: 10, window: time.Second}},
		{entries("key2", "something"), want{limit: 20, window: time.Minute}},
		{entries("key2", "value2"), want{limit: 30, window: time.Minute}},
		{entries("key2", "value3"), want{none: true}},
		{entries("key3", "foo"), want{limit: 1, window: time.Hour}},
		{entries("key4", "foo"), want{limit: 1, window: day, name: "key4_rate_limit"}},
		{entries("key5", "value5"), want{limit: 15, window: day}},
		{entries("key5", "value5", "subkey5", "subvalue5"), want{limit: 25, window: day}},
		{entries("key6", "foo"), want{unlimited: true}},
		{entries("key7", "unspecified_value"), want{limit: 70, window: time.Minute}},
		{entries("key7", "another_value"), want{limit: 70, window: time.Minute}},
	} {
		tc.w.check(t, s, tc.es)
	}
	// detailed_metric is kept for the service's statistics.
	if d := s.Lookup(entries("key7", "x"))[0].Limit.Descriptor; !d.DetailedMetric {
		t.Error("key7: detailed_metric lost")
	}
}

func TestLookupShadowMode(t *testing.T) {
	s := parseEnvoy(t, "shadowmode_config.yaml", `domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
        shadow_mode: true
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
    shadow_mode: true
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
`)
	want{limit: 5, window: time.Second}.check(t, s, entries("key1", "value1", "subkey1", "something"))
	want{limit: 10, window: time.Second, shadow: true}.check(t, s, entries("key1", "value1", "subkey1", "subvalue1"))
	want{limit: 20, window: time.Minute, shadow: true}.check(t, s, entries("key2", "something"))
	want{limit: 30, window: time.Minute}.check(t, s, entries("key2", "value2"))
}

// wildcardConfig is envoyproxy/ratelimit's wildcard.yaml without midWild,
// whose value bar*b only the rate limit service accepts
// (TestLookupMidWildcard).
const wildcardConfig = `domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noWild
    value: foo
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noVal
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit:
          unit: minute
          requests_per_unit: 20
`

func TestLookupWildcard(t *testing.T) {
	s := parseEnvoy(t, "wildcard.yaml", wildcardConfig)
	twenty := want{limit: 20, window: time.Minute}
	for _, es := range [][]Entry{
		entries("noVal", "foo1"), entries("noVal", "foo2"),
		entries("wild", "foo1"), entries("wild", "foo2"), entries("wild", "foo"),
		entries("nestedWild", "val1", "wild", "goo2"),
	} {
		twenty.check(t, s, es)
	}
	for _, es := range [][]Entry{entries("wild", "bar"), entries("noWild", "foo1"), entries("midWildcard", "barab")} {
		want{none: true}.check(t, s, es)
	}
	// Each value matched by a prefix or by the key alone has a counter of
	// its own (envoyproxy/ratelimit without share_threshold).
	a, b := s.Lookup(entries("wild", "foo1"))[0], s.Lookup(entries("wild", "foo2"))[0]
	if a.Limit != b.Limit || a.Key == b.Key || a.Tag == b.Tag {
		t.Errorf("wild foo1 and foo2: one limit, two counters in two slots; got keys %s %s", a.Key, b.Key)
	}
	c, d := s.Lookup(entries("noWild", "foo"))[0], s.Lookup(entries("noWild", "foo"))[0]
	if c.Key != d.Key || !c.Limit.Global() {
		t.Errorf("noWild foo: one global counter; got %s %s", c.Key, d.Key)
	}
}

// TestLookupMidWildcard: as envoyproxy/ratelimit, the rate limit service
// accepts a * inside a value and matches it as itself, with a warning; a
// file read otherwise refuses it.
func TestLookupMidWildcard(t *testing.T) {
	src := wildcardConfig + `  - key: midWild
    value: bar*b
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: midPrefix
    value: a*b*
    rate_limit:
      unit: minute
      requests_per_unit: 30
`
	_, err := Parse("wildcard.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), `wildcard.yaml:26: descriptors[4].value: "bar*b": a wildcard (*) may only end a value`) {
		t.Errorf("without ForService: got %v", err)
	}
	s, err := Parse("wildcard.yaml", []byte(src), ForService())
	if err != nil {
		t.Fatal(err)
	}
	checkWarnings(t, s.Warnings, []string{
		`wildcard.yaml:26: descriptors[4].value: "bar*b": matched as written, * included, as envoyproxy/ratelimit matches it`,
		`wildcard.yaml:31: descriptors[5].value: "a*b*": matched as written, * included`,
	})
	for _, tc := range []struct {
		es []Entry
		w  want
	}{
		{entries("midWild", "bar*b"), want{limit: 20, window: time.Minute}},
		{entries("midWild", "barab"), want{none: true}},
		{entries("midWild", "bar"), want{none: true}},
		{entries("midWildcard", "barab"), want{none: true}},
		{entries("midPrefix", "a*b"), want{limit: 30, window: time.Minute}},
		{entries("midPrefix", "a*bcd"), want{limit: 30, window: time.Minute}},
		{entries("midPrefix", "axbcd"), want{none: true}},
	} {
		tc.w.check(t, s, tc.es)
	}
}

// TestLookupDepth: a limit applies only to a descriptor as long as the path
// to it, and a key alone with a limit of its own still leads deeper.
func TestLookupDepth(t *testing.T) {
	s := parseEnvoy(t, "nested.yaml", `domain: nested
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: key_2
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: key_2
    value: specific-id
    rate_limit: {unit: minute, requests_per_unit: 50000}
    descriptors:
      - key: key_3
        value: requested-key3-value
        rate_limit: {unit: minute, requests_per_unit: 100}
`)
	want{limit: 100, window: time.Minute}.check(t, s, entries("key-1", "value-1"))
	want{limit: 5, window: time.Minute}.check(t, s, entries("key-1", "value-1", "key-2", "value-2"))
	want{none: true}.check(t, s, entries("key-1", "value-1", "key-2", "value-2", "key-3", "x"))
	want{limit: 5000, window: time.Minute}.check(t, s, entries("key_2", "key-2-value"))
	want{limit: 5, window: time.Minute}.check(t, s, entries("key_2", "key-2-value", "key_3", "requested-key3-value"))
	want{none: true}.check(t, s, entries("key_2", "key-2-value", "key_3", "other"))
	want{limit: 50000, window: time.Minute}.check(t, s, entries("key_2", "specific-id"))
	want{limit: 100, window: time.Minute}.check(t, s, entries("key_2", "specific-id", "key_3", "requested-key3-value"))
	want{none: true}.check(t, s, entries("key_2", "specific-id", "key_3", "other"))
	want{none: true}.check(t, s, entries("key_3", "requested-key3-value"))
}

// TestLookupCompositeKeys: the walk compares key_value as one string, as
// envoyproxy/ratelimit does, quirks included.
func TestLookupCompositeKeys(t *testing.T) {
	s := parseEnvoy(t, "composite.yaml", `domain: d
descriptors:
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 2}
`)
	want{limit: 1, window: time.Second}.check(t, s, entries("a", "b"))
	want{limit: 2, window: time.Second}.check(t, s, entries("k", ""))
	if _, err := Parse("dup.yaml", []byte("domain: d\ndescriptors:\n  - {key: a_b, value: c}\n  - {key: a, value: b_c}\n")); err == nil ||
		!strings.Contains(err.Error(), `duplicate descriptor composite key "d.a_b_c"`) {
		t.Errorf("a_b/c and a/b_c: %v", err)
	}
}

// TestEnvoyMistakes ports the test files of mistakes: each is refused, by
// line and field where envoyproxy/ratelimit names only the file.
func TestEnvoyMistakes(t *testing.T) {
	for _, tc := range []struct{ file, src, want string }{
		{"bad_limit_unit.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
			`bad_limit_unit.yaml:6: descriptors[0].rate_limit.unit: "foo" is not a unit`},
		{"bad_yaml.yaml", "'''\n", "bad_yaml.yaml:2: not valid YAML"},
		{"duplicate_key.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n\n  - key: key1\n    value: value1\n",
			`duplicate_key.yaml:6: descriptors[1]: duplicate descriptor composite key "test-domain.key1_value1"`},
		{"empty_domain.yaml", "descriptors:\n", "empty_domain.yaml:1: domain: missing"},
		{"empty_key.yaml", "domain: test-domain\ndescriptors:\n  - value: value1\n", "empty_key.yaml:3: descriptors[0].key: missing"},
		{"misspelled_key.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    ratelimit:\n      unit: day\n      requests_per_unit: 5\n",
			"misspelled_key.yaml:5: descriptors[0].ratelimit: unknown field (did you mean rate_limit?)"},
		{"misspelled_key2.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
			"misspelled_key2.yaml:7: descriptors[0].rate_limit.requestsperunit: unknown field (did you mean requests_per_unit?)"},
		{"non_string_key.yaml", "0.25: test-domain\ndescriptors:\n  - key: key1\n", `non_string_key.yaml:1: a field's name must be a string (got "0.25")`},
		{"non_map_list.yaml", "domain: test-domain\ndescriptors:\n  - a\n  - b\n  - c\n", `non_map_list.yaml:3: descriptors[0]: want a mapping of fields, got "a"`},
		{"replaces_empty.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name:\n          unit: second\n          requests_per_unit: 5\n",
			"replaces_empty.yaml:10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: is empty"},
		{"replaces_self.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name: self\n          unit: second\n          requests_per_unit: 5\n",
			"replaces_self.yaml:10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: \"self\" is this limit's own name"},
		{"unlimited_with_unit.yaml", "domain: test-domain\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
			"unlimited_with_unit.yaml:6: descriptors[0].rate_limit.unit: an unlimited limit has no unit"},
	} {
		_, err := Parse(tc.file, []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v\nwant %s", tc.file, err, tc.want)
		}
	}
}

// shareConfig has prefixes that share their counter (share_threshold) at
// one level and at two, one that does not under one that does, and an
// exact value beside a shared prefix.
const shareConfig = `domain: d
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit: {unit: minute, requests_per_unit: 120}
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 150}
  - key: file
    value: test1
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// TestLookupShareThreshold: every value a shared prefix matches meets one
// counter, named by the prefix as written, in one slot unless a value
// below it is counted per value; an exact value keeps its own.
func TestLookupShareThreshold(t *testing.T) {
	s := parseEnvoy(t, "share.yaml", shareConfig)
	for _, tc := range []struct {
		name    string
		a, b    []Entry
		same    bool    // a and b meet one counter
		counted []Entry // a's hit's entries
		tagKey  string  // "" for the domain's slot
	}{
		{"one level", entries("files", "files/a.pdf"), entries("files", "files/b.csv"), true,
			entries("files", "files/*"), ""},
		{"shared above one per value", entries("path", "path/foo", "file", "file/doc1", "type", "pdf"),
			entries("path", "path/bar", "file", "file/doc1", "type", "pdf"), true,
			entries("path", "path/*", "file", "file/doc1", "type", "pdf"), "file"},
		{"the value below counts apart", entries("path", "path/foo", "file", "file/doc1", "type", "pdf"),
			entries("path", "path/foo", "file", "file/doc2", "type", "pdf"), false,
			entries("path", "path/*", "file", "file/doc1", "type", "pdf"), "file"},
		{"two levels", entries("user", "user/alice", "resource", "res/file1"), entries("user", "user/bob", "resource", "res/file2"), true,
			entries("user", "user/*", "resource", "res/*"), ""},
		{"an exact value apart", entries("file", "test1"), entries("file", "test2"), false,
			entries("file", "test1"), ""},
		{"values of the prefix", entries("file", "test2"), entries("file", "test123"), true,
			entries("file", "test*"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := s.Lookup(tc.a), s.Lookup(tc.b)
			if len(a) != 1 || len(b) != 1 {
				t.Fatalf("%d and %d hits, want 1 each", len(a), len(b))
			}
			if (a[0].Key == b[0].Key) != tc.same || (a[0].Tag == b[0].Tag) != (tc.same || tc.tagKey == "") {
				t.Errorf("keys %s and %s: want shared %v", a[0].Key, b[0].Key, tc.same)
			}
			if !slices.Equal(a[0].Entries, tc.counted) || a[0].Limit.TagKey() != tc.tagKey {
				t.Errorf("entries %v, tag key %q; want %v, %q", a[0].Entries, a[0].Limit.TagKey(), tc.counted, tc.tagKey)
			}
			if tc.tagKey == "" && (a[0].Tag != domainTag("d") || !a[0].Limit.Global()) {
				t.Errorf("tag %s: want the domain's", a[0].Tag)
			}
		})
	}
	if got := s.Lookup(entries("file", "test2"))[0].Label(); got != "d/file=test*/file_test*" {
		t.Errorf("label %s", got)
	}
}

// TestMatchShareThreshold: in the gateway, a shared prefix of a path
// gives every path it matches one counter; an exact path keeps its own.
func TestMatchShareThreshold(t *testing.T) {
	s := mustParse(t, `domain: api
descriptors:
  - key: header:X-Consumer-Id
    descriptors:
      - key: path
        value: /export/*
        share_threshold: true
        rate_limit: {name: export, unit: minute, requests_per_unit: 3}
      - key: path
        value: /export/big
        rate_limit: {name: big, unit: minute, requests_per_unit: 1}
`)
	match := func(consumer, path string) Hit {
		t.Helper()
		hits := s.Match(Request{Path: path, Header: hdr("X-Consumer-Id", consumer)})
		if len(hits) != 1 {
			t.Fatalf("%s %s: %d hits", consumer, path, len(hits))
		}
		return hits[0]
	}
	a, b := match("alice", "/export/a.csv"), match("alice", "/export/b.csv")
	if a.Key != b.Key || a.Label() != "api/header:X-Consumer-Id=alice/path=/export/*/export" {
		t.Errorf("alice's exports: keys %s and %s, label %s: want one counter", a.Key, b.Key, a.Label())
	}
	if c := match("bob", "/export/a.csv"); c.Key == a.Key || c.Tag == a.Tag {
		t.Errorf("bob shares alice's counter %s", c.Key)
	}
	if big := match("alice", "/export/big"); big.Limit.ID != "big" || big.Key == a.Key {
		t.Errorf("/export/big: %s %s", big.Limit.ID, big.Key)
	}
	want := "requests with path starting with /export/: per value of header X-Consumer-Id, at most 3 per 1m (sliding-log)"
	if got := s.Limits()[0].String(); got != want {
		t.Errorf("in words: %s\nwant %s", got, want)
	}
}

// TestLookupCall: a call's descriptors are looked up each, and replaces
// applies across them as envoyproxy/ratelimit's constructLimitsToCheck
// applies it: a replaced limit's own replaces count, and an unlimited limit
// that is replaced is kept.
func TestLookupCall(t *testing.T) {
	s := parseEnvoy(t, "call.yaml", `domain: d
descriptors:
  - key: a
    rate_limit: {name: a, unit: second, requests_per_unit: 1, replaces: [{name: b}]}
  - key: b
    rate_limit: {name: b, unit: second, requests_per_unit: 2, replaces: [{name: c}]}
  - key: c
    rate_limit: {name: c, unit: second, requests_per_unit: 3}
  - key: free
    rate_limit: {name: free, unlimited: true, replaces: [{name: c}]}
  - key: vip
    rate_limit: {name: vip, unit: second, requests_per_unit: 4, replaces: [{name: free}]}
  - key: both
    rate_limits:
      - {name: low, unit: second, requests_per_unit: 5}
      - {name: high, unit: second, requests_per_unit: 50, replaces: [{name: low}]}
`)
	for _, tc := range []struct {
		name        string
		descriptors [][]Entry
		want        [][]string // each descriptor's limits met
	}{
		{"none replaces", [][]Entry{entries("c", "1"), entries("x", "1")}, [][]string{{"c"}, nil}},
		{"across descriptors", [][]Entry{entries("b", "1"), entries("c", "1")}, [][]string{{"b"}, nil}},
		{"a replaced limit still replaces", [][]Entry{entries("c", "1"), entries("a", "1"), entries("b", "1")}, [][]string{nil, {"a"}, nil}},
		{"an unlimited limit replaced is kept", [][]Entry{entries("free", "1"), entries("vip", "1")}, [][]string{{"free"}, {"vip"}}},
		{"an unlimited limit replaces", [][]Entry{entries("c", "1"), entries("free", "1")}, [][]string{nil, {"free"}}},
		{"within one descriptor", [][]Entry{entries("both", "1")}, [][]string{{"high"}}},
		{"a nil descriptor meets nothing", [][]Entry{nil, entries("c", "1")}, [][]string{nil, {"c"}}},
		{"no descriptors", nil, [][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := s.LookupCall(tc.descriptors)
			if len(got) != len(tc.want) {
				t.Fatalf("%d descriptors' hits, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if ids := ids(got[i]); !slices.Equal(ids, tc.want[i]) {
					t.Errorf("descriptor %d: %v, want %v", i, ids, tc.want[i])
				}
			}
		})
	}
	// Without replaces in the set, each descriptor's hits are Lookup's.
	plain := parseEnvoy(t, "plain.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	got := plain.LookupCall([][]Entry{entries("k", "1"), entries("k", "2")})
	if len(got) != 2 || len(got[0]) != 1 || got[1][0].Key != plain.Lookup(entries("k", "2"))[0].Key {
		t.Errorf("without replaces: %v", got)
	}
}
