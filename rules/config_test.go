package rules

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func file(name, src string) File { return File{Name: name, Src: []byte(src)} }

// refusedAs holds err to the mistakes want: each the start of one error's
// text, in order.
func refusedAs(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	ok := len(errs) == len(want)
	for i, e := range errs {
		var re *Error
		ok = ok && errors.As(e, &re) && strings.HasPrefix(e.Error(), want[i])
	}
	if !ok {
		t.Errorf("got %v\nwant %q", err, want)
	}
}

// TestParseConfig: a configuration of several files, one domain each, or
// a domain's files merged.
func TestParseConfig(t *testing.T) {
	users := file("config/users.yaml", "domain: users\ndescriptors:\n  - key: user\n    rate_limit: {name: per-user, unit: second, requests_per_unit: 5}\n")
	orders := file("config/orders.yaml", "domain: orders\ndescriptors:\n  - key: order\n    rate_limit: {unit: minute, requests_per_unit: 50}\n")
	c, err := ParseConfig([]File{users, orders}, ForService())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sets) != 2 || c.Sets["users"].File != users.Name || !slices.Equal(c.Sets["orders"].Files, []string{orders.Name}) ||
		len(c.Version) != 12 || len(c.Warnings) != 0 {
		t.Fatalf("sets %v, version %q, warnings %v", c.Sets, c.Version, c.Warnings)
	}
	alone, _ := Parse(users.Name, users.Src, ForService())
	if c.Sets["users"].Version != alone.Version {
		t.Errorf("a set of one file: version %s, Parse's %s", c.Sets["users"].Version, alone.Version)
	}
	moved, _ := ParseConfig([]File{file("elsewhere/orders.yaml", string(orders.Src)), file("elsewhere/users.yaml", string(users.Src))})
	changed, _ := ParseConfig([]File{users, file(orders.Name, string(orders.Src)+"# changed\n")})
	if moved.Version != c.Version || changed.Version == c.Version {
		t.Errorf("versions %s, moved %s, changed %s: want the same files alike wherever they are, others apart", c.Version, moved.Version, changed.Version)
	}

	t.Run("a domain in two files", func(t *testing.T) {
		again := file("config/users-2.yaml", "# more\ndomain: users\ndescriptors:\n  - key: plan\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
		_, err := ParseConfig([]File{users, orders, again})
		refusedAs(t, err, []string{`config/users-2.yaml:2: domain: "users" is also the domain of config/users.yaml: a domain is in one file`})
	})
	t.Run("mistakes of several files", func(t *testing.T) {
		bad1 := file("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: secnd, requests_per_unit: 5}\n")
		bad2 := file("b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n")
		_, err := ParseConfig([]File{bad1, users, bad2, file("c.yaml", "domain: users\n")})
		refusedAs(t, err, []string{"a.yaml:4: descriptors[0].rate_limit.unit:", "b.yaml:4: descriptors[0].rate_limit.requests_per_unit: missing",
			`c.yaml:1: domain: "users" is also the domain of config/users.yaml`})
	})
	t.Run("warnings of every file", func(t *testing.T) {
		c, err := ParseConfig([]File{file("empty.yaml", "domain: empty\ndescriptors:\n"), users,
			file("metric.yaml", "domain: m\ndescriptors:\n  - key: k\n    value_to_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
			ForService())
		if err != nil {
			t.Fatal(err)
		}
		checkWarnings(t, c.Warnings, []string{"empty.yaml:1: descriptors: no limits", "metric.yaml:4: descriptors[0].value_to_metric: ignored"})
		if len(c.Sets["empty"].Limits()) != 0 || c.Sets["empty"].Lookup(entries("k", "v")) != nil {
			t.Error("a domain with no limits meets some")
		}
	})
	t.Run("no files", func(t *testing.T) {
		c, err := ParseConfig(nil)
		if err != nil || len(c.Sets) != 0 {
			t.Errorf("got %v, %v", c, err)
		}
	})
}

// TestParseConfigMergeDomains: with MergeDomains, a domain's later files
// add their top-level descriptors to the first's, and the set is checked
// as one: a key and value, or a name, in two files is a mistake naming
// both; replaces may name a limit of another file.
func TestParseConfigMergeDomains(t *testing.T) {
	first := file("a.yaml", `domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: second, requests_per_unit: 5}
  - key: plan
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 50}
`)
	second := file("b.yaml", `domain: api
descriptors:
  - key: plan
    value: silver
    rate_limit: {name: silver, unit: second, requests_per_unit: 20, replaces: [{name: per-user}]}
`)
	c, err := ParseConfig([]File{first, second}, MergeDomains())
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sets["api"]
	a, _ := Parse(first.Name, first.Src)
	if len(c.Sets) != 1 || !slices.Equal(s.Files, []string{"a.yaml", "b.yaml"}) || s.File != "a.yaml" || len(s.Limits()) != 3 ||
		s.Version == a.Version || len(s.Version) != 12 {
		t.Fatalf("sets %d, files %v, %d limits, version %s", len(c.Sets), s.Files, len(s.Limits()), s.Version)
	}
	silver := s.Descriptors[2]
	if silver.File != "b.yaml" || silver.Line != 3 || silver.Field != "descriptors[0]" || s.Descriptors[0].File != "a.yaml" {
		t.Errorf("the merged descriptor: %s:%d %s", silver.File, silver.Line, silver.Field)
	}
	want{limit: 5, window: time.Second, name: "per-user"}.check(t, s, entries("user", "alice"))
	want{limit: 20, window: time.Second, name: "silver"}.check(t, s, entries("plan", "silver"))
	want{limit: 50, window: time.Second}.check(t, s, entries("plan", "gold", "user", "alice"))
	kept, replaced := Replace(append(s.Lookup(entries("user", "alice")), s.Lookup(entries("plan", "silver"))...))
	if !slices.Equal(ids(kept), []string{"silver"}) || !slices.Equal(ids(replaced), []string{"per-user"}) {
		t.Errorf("replaces across the files: kept %v, replaced %v", ids(kept), ids(replaced))
	}

	for _, tc := range []struct {
		name  string
		files []File
		want  []string
	}{
		{"a key and value in two files", []File{first, file("c.yaml", "domain: api\ndescriptors:\n  - key: plan\n    value: gold\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
			[]string{`c.yaml:3: descriptors[0]: duplicate descriptor composite key "api.plan_gold" (descriptors[1], line 5 of a.yaml, has the same key and value)`}},
		{"a file merged with itself", []File{first, first},
			[]string{`a.yaml:3: descriptors[0]: duplicate descriptor composite key "api.user"`, `a.yaml:5: descriptors[1]: duplicate descriptor composite key "api.plan_gold"`}},
		{"a name in two files", []File{first, file("d.yaml", "domain: api\ndescriptors:\n  - key: other\n    rate_limit: {name: per-user, unit: second, requests_per_unit: 1}\n")},
			[]string{`d.yaml:4: descriptors[0].rate_limit.name: "per-user" is also the name of the limit at line 4 of a.yaml (descriptors[0].rate_limit)`}},
		{"a nested key and value in two files is no mistake", []File{first, file("e.yaml", "domain: api\ndescriptors:\n  - key: plan\n    value: bronze\n    descriptors:\n      - key: user\n        rate_limit: {unit: second, requests_per_unit: 2}\n")},
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(tc.files, MergeDomains())
			if tc.want == nil {
				if err != nil {
					t.Error(err)
				}
				return
			}
			refusedAs(t, err, tc.want)
		})
	}
}
