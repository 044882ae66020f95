package bench

import (
	"cmp"
	"slices"
	"strings"
	"testing"
)

// TestParseDescriptorEscapes: \, is a comma inside a key or value and \\ a
// backslash; String writes them back. Any other backslash is refused,
// naming the escape.
func TestParseDescriptorEscapes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Descriptor
		out  string // String, when not in
	}{
		{`path=/a\,b`, Descriptor{{"path", "/a,b"}}, ""},
		{`k=a\\b`, Descriptor{{"k", `a\b`}}, ""},
		{`k=a\\,j=2`, Descriptor{{"k", `a\`}, {"j", "2"}}, ""},
		{`k=\,\\\,`, Descriptor{{"k", `,\,`}}, ""},
		{`k=a=b,j`, Descriptor{{"k", "a=b"}, {"j", ""}}, `k=a=b,j=`},
		{`we\,ird=v`, Descriptor{{"we,ird", "v"}}, ""},
		{` user = a `, Descriptor{{"user", " a "}}, `user= a `},
		{`user={consumer}\,x`, Descriptor{{"user", "{consumer},x"}}, ""},
	} {
		d, err := ParseDescriptor(tc.in)
		if err != nil || !slices.Equal(d, tc.want) {
			t.Errorf("%s: %q (%v), want %q", tc.in, d, err, tc.want)
			continue
		}
		out := tc.out
		if out == "" {
			out = tc.in
		}
		if d.String() != out {
			t.Errorf("%s: written %s, want %s", tc.in, d.String(), out)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{`path=/a\x`, `Descriptors path=/a\x: \x is not an escape: \, is a comma and \\ a backslash`},
		{`path=/a\`, `Descriptors path=/a\ ends in a lone backslash: \, is a comma and \\ a backslash`},
		{`k\=v`, `Descriptors k\=v: \= is not an escape`},
		{`k=\é`, `Descriptors k=\é: \é is not an escape`},
		{"k=\\\x01", `Descriptors "k=\\\x01": \`},
		{`a=1,,b=2`, `Descriptors "a=1,,b=2": an entry with no key`},
	} {
		_, err := ParseDescriptor(tc.in)
		if err == nil || len(err.Error()) < len(tc.want) || err.Error()[:len(tc.want)] != tc.want {
			t.Errorf("%s: %v, want %s", tc.in, err, tc.want)
		}
	}
}

// TestDescriptorNamesConsumer: a descriptor names its consumer where its
// template reads {consumer}, never where {{ makes it literal text.
func TestDescriptorNamesConsumer(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`user={consumer}`, true},
		{`path=/a,user=k-{consumer}-x`, true},
		{`user={{consumer}`, false},
		{`user={{consumer}}`, false},
		{`user={{{consumer}`, true}, // a literal {, then the placeholder
		{`user=consumer`, false},
		{`{consumer}=a`, false}, // a key is never a template
		{`user={ consumer }`, false},
	} {
		d, err := ParseDescriptor(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.namesConsumer(); got != tc.want {
			t.Errorf("%s: names its consumer: %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestParseDescriptorSet: a --call value is WEIGHT:, then descriptors
// between semicolons, \; a semicolon inside one; String writes it back.
// No descriptor's text can be taken for the weight, which is required,
// and a bad descriptor is refused as --descriptor refuses it, naming the
// whole value.
func TestParseDescriptorSet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want DescriptorSet
		out  string // String, when not in
	}{
		{`1:path=/search,user={consumer}`, DescriptorSet{Weight: 1, Descriptors: []Descriptor{{{"path", "/search"}, {"user", "{consumer}"}}}}, ""},
		{`3:path=/items;generic_key=global`, DescriptorSet{Weight: 3, Descriptors: []Descriptor{{{"path", "/items"}}, {{"generic_key", "global"}}}}, ""},
		{`2:k=a\;b;j=c`, DescriptorSet{Weight: 2, Descriptors: []Descriptor{{{"k", "a;b"}}, {{"j", "c"}}}}, ""},
		{`2:k=a\\;j=c`, DescriptorSet{Weight: 2, Descriptors: []Descriptor{{{"k", `a\`}}, {{"j", "c"}}}}, ""},
		{`2:k=a\\\;j=c`, DescriptorSet{Weight: 2, Descriptors: []Descriptor{{{"k", `a\;j=c`}}}}, ""},
		{`1:k=a\,b:7;t=10:30`, DescriptorSet{Weight: 1, Descriptors: []Descriptor{{{"k", "a,b:7"}}, {{"t", "10:30"}}}}, ""},
		{`1:email=a@3`, DescriptorSet{Weight: 1, Descriptors: []Descriptor{{{"email", "a@3"}}}}, ""},
		{`007:k=v`, DescriptorSet{Weight: 7, Descriptors: []Descriptor{{{"k", "v"}}}}, `7:k=v`},
	} {
		set, err := ParseDescriptorSet(tc.in)
		if err != nil || set.Weight != tc.want.Weight || !slices.EqualFunc(set.Descriptors, tc.want.Descriptors, slices.Equal) {
			t.Errorf("%s: %+v (%v), want %+v", tc.in, set, err, tc.want)
			continue
		}
		out := cmp.Or(tc.out, tc.in)
		if set.String() != out {
			t.Errorf("%s: written %s, want %s", tc.in, set.String(), out)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{`path=/search`, `Sets "path=/search": want WEIGHT:DESCRIPTOR[;DESCRIPTOR…]`},
		{`user=a:3`, `Sets "user=a:3": want WEIGHT:`},
		{`x:k=v`, `Sets "x:k=v": want WEIGHT:`},
		{`-1:k=v`, `Sets "-1:k=v": want WEIGHT:`},
		{`+1:k=v`, `Sets "+1:k=v": want WEIGHT:`},
		{`:k=v`, `Sets ":k=v": want WEIGHT:`},
		{`1:`, `Sets 1:: "": an entry with no key`},
		{`1:k=v;`, `Sets 1:k=v;: "": an entry with no key`},
		{`1:k=v;;j=w`, `Sets 1:k=v;;j=w: "": an entry with no key`},
		{`1:k=a\x`, `Sets 1:k=a\x: k=a\x: \x is not an escape`},
		{`1:k=a\`, `Sets 1:k=a\: k=a\ ends in a lone backslash`},
	} {
		_, err := ParseDescriptorSet(tc.in)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s", tc.in, err, tc.want)
		}
	}
}

// TestSetsValidated: a mix of sets is checked as descriptors are, and
// never with --descriptor; a weight out of 1 to 1000 is refused.
func TestSetsValidated(t *testing.T) {
	base := RLSConfig{Target: "127.0.0.1:8081", Domain: "d", Rate: 10, Connections: 1, Requests: 1, Consumers: 2}
	set := func(s string) DescriptorSet {
		t.Helper()
		ds, err := ParseDescriptorSet(s)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	for _, tc := range []struct {
		name string
		edit func(c *RLSConfig)
		want string
	}{
		{"both", func(c *RLSConfig) {
			c.Descriptors, c.Sets = []Descriptor{{{"k", "v"}}}, []DescriptorSet{set("1:k=v")}
		}, "Sets and Descriptors are two ways"},
		{"neither", func(*RLSConfig) {}, "Descriptors must be given at least once (or Sets)"},
		{"weight 0", func(c *RLSConfig) { c.Sets = []DescriptorSet{set("0:k=v")} }, "Sets 0:k=v: the weight must be between 1 and 1000 (got 0)"},
		{"weight 1001", func(c *RLSConfig) { c.Sets = []DescriptorSet{set("1:k=v"), set("1001:k=v")} }, "Sets 1001:k=v: the weight must be between 1 and 1000"},
		{"no descriptor", func(c *RLSConfig) { c.Sets = []DescriptorSet{{Weight: 1}} }, "Sets 1:: a call with no descriptor"},
		{"bad placeholder", func(c *RLSConfig) { c.Sets = []DescriptorSet{set("1:k=v"), set("2:k={user}")} }, "Sets k={user}: unknown placeholder {user}"},
		{"identities sent nowhere", func(c *RLSConfig) {
			c.Sets, c.Identities = []DescriptorSet{set("1:k=a"), set("2:k=b")}, []string{"x", "y"}
		}, "Identities names the consumers where {consumer} stands, and no value of Sets holds it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
	c := base
	c.Sets = []DescriptorSet{set("1:k=a"), set("2:k={consumer}")}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	other := c
	other.Sets = []DescriptorSet{set("2:k=a"), set("1:k={consumer}")}
	if c.runID() == other.runID() {
		t.Errorf("run id %q for other weights too", c.runID())
	}
}
