package rules

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// envoyFile reads one of envoyproxy/ratelimit's own files
// (testdata/envoy/README.md).
func envoyFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "envoy", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEnvoyFilesParse: every example of envoyproxy/ratelimit's README and
// examples/ parses unchanged as the rate limit service reads files, but
// those that use what ratelab refuses, each refused by line and field; and
// what ratelab accepts without doing it is said in a warning.
func TestEnvoyFilesParse(t *testing.T) {
	type want struct {
		refused  string   // the error's start; "" when the file parses
		warnings []string // each warning's start, in order
	}
	files := map[string]want{
		// A limit of 0 refuses every request: ratelab's limits admit at least one.
		"readme-example-3.yaml": {refused: "readme-example-3.yaml:13: descriptors[1].rate_limit.requests_per_unit: must be at least 1 (got 0)"},
		"examples-example.yaml": {refused: "examples-example.yaml:60: descriptors[2].descriptors[2].rate_limit.requests_per_unit: must be at least 1 (got 0)"},
		"readme-example-10a.yaml": {warnings: []string{"readme-example-10a.yaml:4: descriptors[0].value_to_metric: ignored",
			"readme-example-10a.yaml:7: descriptors[0].descriptors[0].value_to_metric: ignored"}},
		"readme-example-10b.yaml": {warnings: []string{"readme-example-10b.yaml:4: descriptors[0].value_to_metric: ignored",
			"readme-example-10b.yaml:8: descriptors[0].descriptors[0].value_to_metric: ignored"}},
		"readme-example-11a.yaml": {},
		"readme-example-11b.yaml": {warnings: []string{"readme-example-11b.yaml:6: descriptors[0].value_to_metric: ignored"}},
		"examples-config.yaml":    {},
		"readme-example-1.yaml":   {},
		"readme-example-2.yaml":   {},
		"readme-example-4a.yaml":  {},
		"readme-example-4b.yaml":  {},
		"readme-example-5.yaml":   {},
		"readme-example-6.yaml":   {},
		"readme-example-7.yaml":   {},
		"readme-example-8.yaml":   {},
		"readme-example-9.yaml":   {},
	}
	paths, _ := filepath.Glob(filepath.Join("testdata", "envoy", "*.yaml"))
	if len(paths) != len(files) {
		t.Errorf("%d files in testdata/envoy, %d in this test", len(paths), len(files))
	}
	for _, f := range paths {
		name := filepath.Base(f)
		w, ok := files[name]
		if !ok {
			t.Errorf("%s: not in this test", name)
			continue
		}
		s, err := Parse(name, envoyFile(t, name))
		switch {
		case w.refused == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case w.refused != "" && (err == nil || !strings.HasPrefix(err.Error(), w.refused)):
			t.Errorf("%s: got %v\nwant %s", name, err, w.refused)
		case err == nil:
			checkWarnings(t, s.Warnings, w.warnings)
		}
	}
}

// checkWarnings holds warnings to the starts of their texts, in order.
func checkWarnings(t *testing.T, got []*Error, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := range got {
		ok = ok && strings.HasPrefix(got[i].Error(), want[i])
	}
	if !ok {
		t.Errorf("warnings %q\nwant %q", got, want)
	}
}

// envoyLookup parses a file of testdata/envoy, with its text replaced as
// pairs of old, new strings.
func envoyLookup(t *testing.T, name string, replace ...string) *Set {
	t.Helper()
	src := string(envoyFile(t, name))
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(src, replace[i]) {
			t.Fatalf("%s holds no %q", name, replace[i])
		}
		src = strings.ReplaceAll(src, replace[i], replace[i+1])
	}
	return parseEnvoy(t, name, src)
}

// TestEnvoyReadmeDecisions: Lookup decides as envoyproxy/ratelimit's README
// says of each example.
func TestEnvoyReadmeDecisions(t *testing.T) {
	day := 24 * time.Hour
	t.Run("1: two values of one key", func(t *testing.T) {
		s := envoyLookup(t, "readme-example-1.yaml")
		want{limit: 500, window: time.Second}.check(t, s, entries("database", "users"))
		want{limit: 500, window: time.Second}.check(t, s, entries("database", "default"))
		want{none: true}.check(t, s, entries("database", "orders"))
	})
	t.Run("2: nested descriptors, and a key alone", func(t *testing.T) {
		s := envoyLookup(t, "readme-example-2.yaml")
		want{limit: 5, window: day}.check(t, s, entries("message_type", "marketing", "to_number", "2061111111"))
		want{limit: 100, window: day}.check(t, s, entries("to_number", "2061111111"))
		want{none: true}.check(t, s, entries("message_type", "marketing"))
		// "(…, 2061111111) and (…, 2062222222) will each get 5 requests per day"
		a := s.Lookup(entries("message_type", "marketing", "to_number", "2061111111"))[0]
		b := s.Lookup(entries("message_type", "marketing", "to_number", "2062222222"))[0]
		c := s.Lookup(entries("to_number", "2061111111"))[0]
		if a.Key == b.Key || a.Key == c.Key || a.Tag != c.Tag {
			t.Errorf("counters: %s %s %s: want one per number and rule, one slot per number", a.Key, b.Key, c.Key)
		}
	})
	t.Run("3: the most specific match first", func(t *testing.T) {
		// ratelab refuses the 0 (TestEnvoyFilesParse); with 1, the order shows.
		s := envoyLookup(t, "readme-example-3.yaml", "requests_per_unit: 0", "requests_per_unit: 1")
		want{limit: 10, window: time.Second}.check(t, s, entries("remote_address", "50.0.0.1"))
		want{limit: 1, window: time.Second}.check(t, s, entries("remote_address", "50.0.0.5"))
	})
	t.Run("4: depth", func(t *testing.T) {
		req := entries("key", "value", "subkey", "subvalue")
		want{none: true}.check(t, envoyLookup(t, "readme-example-4a.yaml"), req)
		want{limit: 300, window: time.Second}.check(t, envoyLookup(t, "readme-example-4b.yaml"), req)
	})
	t.Run("5: unlimited", func(t *testing.T) {
		s := envoyLookup(t, "readme-example-5.yaml")
		want{unlimited: true}.check(t, s, entries("ldap", "x"))
		want{limit: 100, window: time.Minute}.check(t, s, entries("azure", "x"))
		if h := s.Lookup(entries("ldap", "x")); h[0].Key != "" {
			t.Errorf("an unlimited limit has a key %s", h[0].Key)
		}
	})
	t.Run("6: shadow mode", func(t *testing.T) {
		s := envoyLookup(t, "readme-example-6.yaml")
		want{limit: 10, window: time.Second, shadow: true}.check(t, s, entries("service", "auth-service", "user", "user-a"))
		want{limit: 20, window: time.Second}.check(t, s, entries("service", "auth-service", "user", "user-b"))
	})
	t.Run("7: replaces", func(t *testing.T) {
		s := envoyLookup(t, "readme-example-7.yaml")
		one := entries("key_1", "value_1", "user", "bkthomps")
		two := entries("key_2", "value_2", "user", "bkthomps")
		want{limit: 5, window: time.Second, name: "specific_limit"}.check(t, s, one)
		want{limit: 10, window: time.Second}.check(t, s, two)
		kept, replaced := Replace(append(s.Lookup(one), s.Lookup(two)...))
		if len(kept) != 1 || kept[0].Limit.Policy.Limit != 10 || len(replaced) != 1 || replaced[0].Limit.Name != "specific_limit" {
			t.Errorf("both descriptors: kept %v, replaced %v; want the 10/s alone", ids(kept), ids(replaced))
		}
		if call := s.LookupCall([][]Entry{one, two}); len(call[0]) != 0 || len(call[1]) != 1 || call[1][0].Limit.Policy.Limit != 10 {
			t.Errorf("one call of both: %v and %v; want the 10/s alone, on the second", ids(call[0]), ids(call[1]))
		}
	})
	t.Run("8: detailed metric", func(t *testing.T) {
		s := envoyLookup(t, "readme-example-8.yaml")
		want{limit: 10, window: time.Minute}.check(t, s, entries("key1", "unspecified_value"))
		want{limit: 10, window: time.Minute}.check(t, s, entries("key1", "unspecified_value2"))
		want{limit: 20, window: time.Minute}.check(t, s, entries("key1", "value1"))
	})
	t.Run("11: share_threshold", func(t *testing.T) {
		s := envoyLookup(t, "readme-example-11a.yaml")
		// "all files/* matches share the same threshold"
		a, b := s.Lookup(entries("files", "files/a.pdf"))[0], s.Lookup(entries("files", "files/b.csv"))[0]
		if a.Key != b.Key || !a.Limit.Global() || a.Label() != "example11/files=files/*/files_files/*" {
			t.Errorf("files/*: keys %s and %s, label %s: want one global counter", a.Key, b.Key, a.Label())
		}
		// "each files_no_share/* match has its own isolated threshold"
		c, d := s.Lookup(entries("files_no_share", "files_no_share/a.pdf"))[0], s.Lookup(entries("files_no_share", "files_no_share/b.csv"))[0]
		if c.Key == d.Key {
			t.Errorf("files_no_share/*: one counter %s, want one per value", c.Key)
		}
	})
	t.Run("9: wildcard", func(t *testing.T) {
		s := envoyLookup(t, "readme-example-9.yaml")
		want{limit: 20, window: time.Minute}.check(t, s, entries("key1", "value_1"))
		want{limit: 20, window: time.Minute}.check(t, s, entries("key1", "value_2"))
		want{none: true}.check(t, s, entries("key1", "other"))
	})
}

// TestEnvoyExampleDecisions: examples/ratelimit/config/example.yaml, its
// 0 made 1, decides as the service would.
func TestEnvoyExampleDecisions(t *testing.T) {
	s := envoyLookup(t, "examples-example.yaml", "requests_per_unit: 0", "requests_per_unit: 1")
	min := time.Minute
	want{limit: 4, window: min}.check(t, s, entries("category", "account"))
	want{limit: 2, window: min}.check(t, s, entries("source_cluster", "proxy", "destination_cluster", "bkthomps"))
	want{limit: 1, window: min}.check(t, s, entries("source_cluster", "proxy", "destination_cluster", "mock"))
	want{limit: 2, window: min, name: "fake_name"}.check(t, s, entries("source_cluster", "proxy", "destination_cluster", "fake"))
	want{limit: 2, window: min}.check(t, s, entries("foo", "x"))
	want{limit: 3, window: min}.check(t, s, entries("foo", "x", "bar", "y"))
	want{limit: 1, window: min, name: "bkthomps"}.check(t, s, entries("foo", "x", "bar", "bkthomps"))
	want{limit: 1, window: time.Second}.check(t, s, entries("foo", "x", "baz", "y"))
	want{limit: 3, window: min, shadow: true}.check(t, s, entries("foo", "x", "baz", "shady"))
	want{unlimited: true}.check(t, s, entries("foo", "x", "bay", "y"))
	want{unlimited: true}.check(t, s, entries("qux", "y"))
	want{limit: 2, window: min}.check(t, s, entries("unspec", "y"))
	// category=account replaces bkthomps and fake_name when met together.
	var hits []Hit
	for _, d := range [][]Entry{entries("category", "account"), entries("foo", "x", "bar", "bkthomps"),
		entries("source_cluster", "proxy", "destination_cluster", "fake"), entries("foo", "x")} {
		hits = append(hits, s.Lookup(d)...)
	}
	kept, replaced := Replace(hits)
	if got := ids(replaced); !slices.Equal(got, []string{"bkthomps", "fake_name"}) || len(kept) != 2 {
		t.Errorf("replaced %v, kept %v", got, ids(kept))
	}
}
