package bench

import (
	"slices"
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
