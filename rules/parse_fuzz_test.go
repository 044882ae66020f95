package rules

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/algorithms"
)

// FuzzParse: whatever the bytes, Parse returns a set or *Errors (never
// panics, never works without end); a set holds only limits the algorithms
// can enforce, with unique printable IDs, and matching and looking up any
// of its own paths gives bounded keys.
func FuzzParse(f *testing.F) {
	f.Add([]byte(gateway))
	f.Add([]byte(basicConfig))
	f.Add([]byte(wildcardConfig))
	files, _ := filepath.Glob(filepath.Join("testdata", "envoy", "*.yaml"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		for _, opts := range [][]Option{nil, {ForGateway()}, {ForService()}} {
			s, err := Parse("f.yaml", src, opts...)
			if err != nil {
				checkErrors(t, err, src)
				continue
			}
			checkErrors(t, errors.Join(toErrors(s.Warnings)...), src)
			checkSet(t, s)
			again, err := Parse("f.yaml", src, opts...)
			if err != nil || describeSet(t, again) != describeSet(t, s) {
				t.Fatalf("a second parse differs: %v", err)
			}
		}
	})
}

func toErrors(es []*Error) []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// checkErrors holds err's mistakes (or warnings joined) to the file and
// its lines; nil holds nothing.
func checkErrors(t *testing.T, err error, src []byte) {
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	if len(errs) > maxErrors+1 {
		t.Fatalf("%d errors", len(errs))
	}
	// YAML breaks lines at \n, \r, \r\n, NEL, LS and PS.
	lines := 2
	for _, brk := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
		lines += bytes.Count(src, []byte(brk))
	}
	for _, e := range errs {
		var re *Error
		if !errors.As(e, &re) {
			t.Fatalf("%T %v is not a *rules.Error", e, e)
		}
		if re.File != "f.yaml" || re.Line < 0 || re.Line > lines || re.Message == "" {
			t.Fatalf("error %+v", re)
		}
	}
}

func describeSet(t *testing.T, s *Set) string {
	var b strings.Builder
	if err := s.Describe(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func checkSet(t *testing.T, s *Set) {
	if s.Domain == "" || len(s.Version) != 12 || (len(s.Limits()) == 0 && len(s.Warnings) == 0) {
		t.Fatalf("domain %q, version %q, %d limits, %d warnings", s.Domain, s.Version, len(s.Limits()), len(s.Warnings))
	}
	ids := map[string]bool{}
	for _, l := range s.Limits() {
		if ids[l.ID] || !nameOK.MatchString(l.ID) {
			t.Fatalf("ID %q: repeated or not printable ASCII of at most 64 bytes", l.ID)
		}
		ids[l.ID] = true
		if l.Unlimited {
			continue
		}
		if l.Blocks {
			if l.Policy.Limit != 0 || l.Policy.Window <= 0 || l.Policy.Window > maxWindow {
				t.Fatalf("%s: blocks, with policy %s", l.ID, l.Policy)
			}
			continue
		}
		if err := l.Policy.Validate(); err != nil || l.Policy.Window > maxWindow {
			t.Fatalf("%s: policy %s: %v", l.ID, l.Policy, err)
		}
		if l.Cost < 0 || l.Cost > l.Policy.Limit || !slices.Contains(algorithms.Algorithms(), l.Algorithm) {
			t.Fatalf("%s: cost %d, algorithm %q", l.ID, l.Cost, l.Algorithm)
		}
		if l.String() == "" {
			t.Fatal("a limit with no words")
		}
	}
	describeSet(t, s)
	walk(s.Descriptors, func(d *Descriptor) {
		var es []Entry
		r := Request{Header: map[string][]string{}}
		for n := d; n != nil; n = n.Parent {
			v, _ := n.Prefix()
			if v == "" {
				v = "x"
			}
			es = append([]Entry{{n.Key, v}}, es...)
			switch n.attr.Kind {
			case KindRemoteAddress:
				r.RemoteAddress = v
			case KindMethod:
				r.Method = v
			case KindPath:
				r.Path = v
			case KindHost:
				r.Host = v
			case KindHeader:
				r.Header[n.attr.Name] = []string{v}
			case KindQuery:
				r.Query = n.attr.Name + "=" + v
			}
		}
		checkHits(t, s.Lookup(es))
		applied, replaced := s.Explain(r)
		checkHits(t, applied)
		checkHits(t, replaced)
	})
}

func checkHits(t *testing.T, hits []Hit) {
	for _, h := range hits {
		if len(h.Label()) > 160 {
			t.Fatalf("label of %d bytes", len(h.Label()))
		}
		if h.Limit.Unlimited {
			continue
		}
		if len(h.Key) > 4+16+2+32+1+64+1+20 || !strings.HasPrefix(h.Key, "rl:{"+h.Tag+"}:") || len(h.Tag) != 16 {
			t.Fatalf("key %q, tag %q", h.Key, h.Tag)
		}
	}
}
