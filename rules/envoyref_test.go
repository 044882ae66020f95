package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/envoyref"
)

// parseFixtures reads fixtures of dir together, as config_test.go loads
// them, for the rate limit service; several of one domain merged when
// merge says so.
func parseFixtures(t *testing.T, dir string, names []string, merge bool) (*Config, error) {
	t.Helper()
	files := make([]File, len(names))
	for i, name := range names {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files[i] = File{Name: name, Src: src}
	}
	opts := []Option{ForService()}
	if merge {
		opts = append(opts, MergeDomains())
	}
	return ParseConfig(files, opts...)
}

// TestEnvoyFixturesAccepted: every fixture of envoyproxy/ratelimit's
// config tests alone, and the files its tests load together, are accepted
// or refused as config_test.go says (its expectConfigPanic cases are
// refusals), each refusal naming file, line and field; what ratelab accepts
// without doing it as written is in a warning.
func TestEnvoyFixturesAccepted(t *testing.T) {
	dir := envoyref.Fixtures(t)
	for _, tc := range []struct {
		test     string   // the test of config_test.go that loads the files
		files    []string // loaded together, in order
		merge    bool     // MERGE_DOMAIN_CONFIG
		refused  string   // a mistake the error holds, by file, line and field; "" when accepted
		warnings []string // the start of each warning, in order
	}{
		{"TestBadLimitUnit", []string{"bad_limit_unit.yaml"}, false, `bad_limit_unit.yaml:6: descriptors[0].rate_limit.unit: "foo" is not a unit`, nil},
		{"TestBadYaml", []string{"bad_yaml.yaml"}, false, "bad_yaml.yaml:2: not valid YAML", nil},
		{"TestBasicConfig", []string{"basic_config.yaml"}, false, "", nil},
		// Loaded alone by no test; envoyproxy/ratelimit accepts it.
		{"duplicate_domain.yaml alone", []string{"duplicate_domain.yaml"}, false, "",
			[]string{`duplicate_domain.yaml:1: descriptors: no limits: every descriptor of domain "test-domain" is answered OK`}},
		{"TestDuplicateKey", []string{"duplicate_key.yaml"}, false,
			`duplicate_key.yaml:6: descriptors[1]: duplicate descriptor composite key "test-domain.key1_value1"`, nil},
		{"TestEmptyDomain", []string{"empty_domain.yaml"}, false, "empty_domain.yaml:1: domain: missing", nil},
		{"TestEmptyKey", []string{"empty_key.yaml"}, false, "empty_key.yaml:3: descriptors[0].key: missing", nil},
		// Each loaded alone by no test; envoyproxy/ratelimit accepts them.
		{"merge_domain_key1.yaml alone", []string{"merge_domain_key1.yaml"}, false, "", nil},
		{"merge_domain_key2.yaml alone", []string{"merge_domain_key2.yaml"}, false, "", nil},
		{"TestMisspelledKey", []string{"misspelled_key.yaml"}, false,
			"misspelled_key.yaml:5: descriptors[0].ratelimit: unknown field (did you mean rate_limit?)", nil},
		{"TestMisspelledKey", []string{"misspelled_key2.yaml"}, false,
			"misspelled_key2.yaml:7: descriptors[0].rate_limit.requestsperunit: unknown field (did you mean requests_per_unit?)", nil},
		{"TestNonMapList", []string{"non_map_list.yaml"}, false, `non_map_list.yaml:3: descriptors[0]: want a mapping of fields, got "a"`, nil},
		{"TestNonStringKey", []string{"non_string_key.yaml"}, false, `non_string_key.yaml:1: a field's name must be a string (got "0.25")`, nil},
		{"TestReplacesEmpty", []string{"replaces_empty.yaml"}, false,
			"replaces_empty.yaml:10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: is empty", nil},
		{"TestReplacesSelf", []string{"replaces_self.yaml"}, false,
			`replaces_self.yaml:10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: "self" is this limit's own name`, nil},
		{"TestShadowModeConfig", []string{"shadowmode_config.yaml"}, false, "", nil},
		{"TestShareThreshold", []string{"share_threshold.yaml"}, false, "",
			[]string{"share_threshold.yaml:34: descriptors[3].value_to_metric: ignored"}},
		{"TestUnlimitedWithRateLimitUnit", []string{"unlimited_with_unit.yaml"}, false,
			"unlimited_with_unit.yaml:6: descriptors[0].rate_limit.unit: an unlimited limit has no unit", nil},
		{"TestWildcardConfig", []string{"wildcard.yaml"}, false, "",
			[]string{`wildcard.yaml:19: descriptors[3].value: "bar*b": matched as written, * included`}},
		{"TestDuplicateDomain", []string{"basic_config.yaml", "duplicate_domain.yaml"}, false,
			`duplicate_domain.yaml:1: domain: "test-domain" is also the domain of basic_config.yaml`, nil},
		{"TestDomainMerge", []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, true, "", nil},
		// TestDomainMerge's files, without MERGE_DOMAIN_CONFIG: TestDuplicateDomain's case.
		{"TestDomainMerge without merging", []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, false,
			`merge_domain_key2.yaml:2: domain: "test-domain" is also the domain of merge_domain_key1.yaml`, nil},
		{"TestDuplicateKeyDomainMerge", []string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"}, true,
			`merge_domain_key1.yaml:5: descriptors[0]: duplicate descriptor composite key "test-domain.key1_value1"`, nil},
	} {
		t.Run(tc.test, func(t *testing.T) {
			c, err := parseFixtures(t, dir, tc.files, tc.merge)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("%v: refused: %v", tc.files, err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("%v: got %v\nwant %s", tc.files, err, tc.refused)
			case err == nil:
				checkWarnings(t, c.Warnings, tc.warnings)
			}
		})
	}
	// Every fixture is in the table alone: a new one in another version
	// fails here until it is.
	fixtures, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(fixtures) == 0 {
		t.Fatalf("no fixtures in %s", dir)
	}
	alone := map[string]bool{}
	for _, f := range []string{"bad_limit_unit", "bad_yaml", "basic_config", "duplicate_domain", "duplicate_key", "empty_domain",
		"empty_key", "merge_domain_key1", "merge_domain_key2", "misspelled_key", "misspelled_key2", "non_map_list", "non_string_key",
		"replaces_empty", "replaces_self", "shadowmode_config", "share_threshold", "unlimited_with_unit", "wildcard"} {
		alone[f+".yaml"] = true
	}
	for _, f := range fixtures {
		if !alone[filepath.Base(f)] {
			t.Errorf("%s: a fixture this test does not read alone", filepath.Base(f))
		}
	}
}

// refLookup is one GetLimit of config_test.go and what it asserts.
type refLookup struct {
	domain    string
	entries   []Entry
	none      bool // GetLimit returns nil
	requests  int64
	unit      string
	name      string
	shadow    bool
	unlimited bool
	replaces  []string
	// counted is the hit's entries, where they are not the descriptor's: a
	// share_threshold's pattern (its ShareThresholdKeyPattern).
	counted []Entry
	// counter names the lookup's counter: lookups of one test with one
	// name share it (equal Hit.Key), with two names do not; "" for none.
	counter string
}

// TestEnvoyFixturesLookups: the lookups of config_test.go on its fixtures,
// transcribed, find the limits it asserts. Its assertions on the names of
// its statistics (Stats.Key, FullKey, the counters' names) are left out:
// ratelab's metrics are its own, by limit. Of TestShareThreshold, the
// patterns of the cache key (ShareThresholdKeyPattern) are the hits'
// entries, and sharing one is sharing a counter.
func TestEnvoyFixturesLookups(t *testing.T) {
	dir := envoyref.Fixtures(t)
	const td = "test-domain"
	sec, min, hour, day := "second", "minute", "hour", "day"
	for _, tc := range []struct {
		test    string
		files   []string
		lookups []refLookup
	}{
		{"TestBasicConfig", []string{"basic_config.yaml"}, []refLookup{
			{domain: "foo_domain", none: true},
			{domain: td, none: true},
			{domain: td, entries: entries("key1", "something"), none: true},
			{domain: td, entries: entries("key1", "value1"), none: true},
			{domain: td, entries: entries("key2", "value2", "subkey", "subvalue"), none: true},
			{domain: td, entries: entries("key5", "value5", "subkey5", "subvalue"), none: true},
			{domain: td, entries: entries("key1", "value1", "subkey1", "something"), requests: 5, unit: sec},
			{domain: td, entries: entries("key1", "value1", "subkey1", "subvalue1"), requests: 10, unit: sec},
			{domain: td, entries: entries("key2", "something"), requests: 20, unit: min},
			{domain: td, entries: entries("key2", "value2"), requests: 30, unit: min},
			{domain: td, entries: entries("key2", "value3"), none: true},
			{domain: td, entries: entries("key3", "foo"), requests: 1, unit: hour},
			{domain: td, entries: entries("key4", "foo"), requests: 1, unit: day, name: "key4_rate_limit"},
			{domain: td, entries: entries("key6", "foo"), unlimited: true},
			{domain: td, entries: entries("key7", "unspecified_value"), requests: 70, unit: min},
			{domain: td, entries: entries("key7", "another_value"), requests: 70, unit: min},
		}},
		{"TestShadowModeConfig", []string{"shadowmode_config.yaml"}, []refLookup{
			{domain: td, entries: entries("key1", "value1", "subkey1", "something"), requests: 5, unit: sec},
			{domain: td, entries: entries("key1", "value1", "subkey1", "subvalue1"), requests: 10, unit: sec, shadow: true},
			{domain: td, entries: entries("key2", "something"), requests: 20, unit: min, shadow: true},
			{domain: td, entries: entries("key2", "value2"), requests: 30, unit: min},
		}},
		{"TestWildcardConfig", []string{"wildcard.yaml"}, []refLookup{
			// Its cache keys hold the values: a counter each.
			{domain: td, entries: entries("noVal", "foo1"), requests: 20, unit: min, counter: "noVal foo1"},
			{domain: td, entries: entries("noVal", "foo2"), requests: 20, unit: min, counter: "noVal foo2"},
			{domain: td, entries: entries("wild", "foo1"), requests: 20, unit: min, counter: "wild foo1"},
			{domain: td, entries: entries("wild", "foo2"), requests: 20, unit: min, counter: "wild foo2"},
			{domain: td, entries: entries("nestedWild", "val1", "wild", "goo2"), requests: 20, unit: min},
			{domain: td, entries: entries("wild", "bar"), none: true},
			{domain: td, entries: entries("noWild", "foo1"), none: true},
			// "Wildcard in the middle of value is not supported."
			{domain: td, entries: entries("midWildcard", "barab"), none: true},
		}},
		{"TestShareThreshold", []string{"share_threshold.yaml"}, []refLookup{
			// Basic share_threshold
			{domain: td, entries: entries("files", "files/a.pdf"), requests: 100, unit: min, counted: entries("files", "files/*"), counter: "files/*"},
			{domain: td, entries: entries("files", "files/b.csv"), requests: 100, unit: min, counted: entries("files", "files/*"), counter: "files/*"},
			{domain: td, entries: entries("files", "files/c.txt"), requests: 100, unit: min, counted: entries("files", "files/*"), counter: "files/*"},
			// share_threshold with metrics
			{domain: td, entries: entries("route", "api/v1", "method", "GET"), requests: 60, unit: min,
				counted: entries("route", "api/*", "method", "GET")},
			{domain: td, entries: entries("service", "svc/user", "endpoint", "get"), requests: 80, unit: min,
				counted: entries("service", "svc/*", "endpoint", "get")},
			// Nested wildcards
			{domain: td, entries: entries("nested", "parent", "files", "nested/file1.txt"), requests: 200, unit: min,
				counted: entries("nested", "parent", "files", "nested/*")},
			{domain: td, entries: entries("files", "top/file1.txt", "files", "nested/file1.txt"), requests: 300, unit: min,
				counted: entries("files", "top/*", "files", "nested/*")},
			{domain: td, entries: entries("path", "path/foo", "file", "file/doc1", "type", "pdf"), requests: 120, unit: min,
				counted: entries("path", "path/*", "file", "file/doc1", "type", "pdf")},
			{domain: td, entries: entries("user", "user/alice", "resource", "res/file1", "action", "read"), requests: 150, unit: min,
				counted: entries("user", "user/*", "resource", "res/*", "action", "read")},
			// Explicit value precedence over wildcard
			{domain: td, entries: entries("file", "test1"), requests: 50, unit: min, counter: "test1"},
			{domain: td, entries: entries("file", "test2"), requests: 100, unit: min, counted: entries("file", "test*"), counter: "test*"},
			{domain: td, entries: entries("file", "test23"), requests: 100, unit: min, counted: entries("file", "test*"), counter: "test*"},
			{domain: td, entries: entries("file", "test123"), requests: 100, unit: min, counted: entries("file", "test*"), counter: "test*"},
		}},
		{"TestDomainMerge", []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, []refLookup{
			{domain: "foo_domain", none: true},
			{domain: td, none: true},
			{domain: td, entries: entries("key1", "value1"), requests: 10, unit: min},
			{domain: td, entries: entries("key2", "value2"), requests: 20, unit: min},
		}},
	} {
		t.Run(tc.test, func(t *testing.T) {
			c, err := parseFixtures(t, dir, tc.files, len(tc.files) > 1)
			if err != nil {
				t.Fatal(err)
			}
			keys := map[string]string{} // counter name: key
			names := map[string]string{}
			for _, l := range tc.lookups {
				var hits []Hit
				if s := c.Sets[l.domain]; s != nil {
					hits = s.Lookup(l.entries)
				}
				if l.none {
					if len(hits) != 0 {
						t.Errorf("%s %v: got %s, want none", l.domain, l.entries, hits[0].Limit)
					}
					continue
				}
				if len(hits) != 1 {
					t.Errorf("%s %v: %d limits, want 1", l.domain, l.entries, len(hits))
					continue
				}
				h := hits[0]
				got := refLookup{domain: l.domain, entries: l.entries, requests: h.Limit.Policy.Limit, unit: h.Limit.Unit, name: h.Limit.Name,
					shadow: h.Limit.Shadow, unlimited: h.Limit.Unlimited, replaces: h.Limit.Replaces, counted: l.counted, counter: l.counter}
				if !slices.Equal(h.Entries, l.entries) {
					got.counted = h.Entries
				}
				if fmt.Sprint(got) != fmt.Sprint(l) {
					t.Errorf("%s %v:\n got %+v\nwant %+v", l.domain, l.entries, got, l)
				}
				if l.counter == "" {
					continue
				}
				if k, ok := keys[l.counter]; ok && k != h.Key {
					t.Errorf("%v: counter %s, not %s's %s", l.entries, h.Key, l.counter, k)
				}
				if other, ok := names[h.Key]; ok && other != l.counter {
					t.Errorf("%v: counter %s, %s's too", l.entries, h.Key, other)
				}
				keys[l.counter], names[h.Key] = h.Key, l.counter
			}
		})
	}
}
