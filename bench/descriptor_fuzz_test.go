package bench

import (
	"slices"
	"strings"
	"testing"
)

// FuzzDescriptor writes any valid descriptor, of one or two entries, and
// reads it back: ParseDescriptor(d.String()) == d, whatever commas,
// backslashes, = and {consumer} its values hold. A key is valid when it
// is not empty, has no spaces around it and holds no = (the first = of an
// entry ends its key).
func FuzzDescriptor(f *testing.F) {
	f.Add("path", `/a,b`, "user", `{consumer}`, true)
	f.Add("k", `a\b\\`, "", "", false)
	f.Add(`we\ird,key`, `=x=,\,\`, "generic_key", "", true)
	f.Add("user", " spaced ", "k", "", true)
	f.Add("a", "", "b", `\`, true)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, two bool) {
		d := Descriptor{{Key: k1, Value: v1}}
		if two {
			d = append(d, DescriptorEntry{Key: k2, Value: v2})
		}
		for _, e := range d {
			if e.Key == "" || strings.TrimSpace(e.Key) != e.Key || strings.Contains(e.Key, "=") {
				return
			}
		}
		again, err := ParseDescriptor(d.String())
		if err != nil || !slices.Equal(again, d) {
			t.Fatalf("%q written %q, read back as %q (%v)", d, d.String(), again, err)
		}
	})
}

// FuzzParseDescriptor parses any --descriptor value. A descriptor it
// accepts has entries, each with a key, and reads back from its own
// String as itself; a value it refuses is said to be bad in words, never
// a panic.
func FuzzParseDescriptor(f *testing.F) {
	for _, s := range []string{"user=a", `path=/a\,b`, `k=a\\b`, `k=a\x`, `k=a\`, "a=1,b=2", " k =v ", "k", "=v", ",", "",
		`k=\,\\\,`, "k=a=b", `\,=v`, "k={consumer}", `k=\é`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDescriptor(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: an empty error", s)
			}
			return
		}
		if len(d) == 0 {
			t.Fatalf("%q: a descriptor with no entries", s)
		}
		for _, e := range d {
			if e.Key == "" || strings.TrimSpace(e.Key) != e.Key {
				t.Fatalf("%q: entry %q", s, e)
			}
		}
		again, err := ParseDescriptor(d.String())
		if err != nil || !slices.Equal(again, d) {
			t.Fatalf("%q parsed as %q, written %q, read back as %q (%v)", s, d, d.String(), again, err)
		}
	})
}

// FuzzParseDescriptorSet parses any --call value. A set it accepts has a
// weight and descriptors, and reads back from its own String as itself; a
// value it refuses is said to be bad in words, never a panic.
func FuzzParseDescriptorSet(f *testing.F) {
	for _, s := range []string{"1:user=a", `3:path=/a\,b;k=v`, `2:k=a\;b`, `2:k=a\\;j=c`, `2:k=a\\\;j`, "1:", "1:;", "x:k=v", "k=v:1",
		`1:k=a\`, `1:k=\;\,\\`, "9999999999999999999999:k=v"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseDescriptorSet(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: an empty error", s)
			}
			return
		}
		if len(set.Descriptors) == 0 {
			t.Fatalf("%q: a set with no descriptors", s)
		}
		again, err := ParseDescriptorSet(set.String())
		if err != nil || again.Weight != set.Weight || !slices.EqualFunc(again.Descriptors, set.Descriptors, slices.Equal) {
			t.Fatalf("%q parsed as %+v, written %q, read back as %+v (%v)", s, set, set.String(), again, err)
		}
	})
}
