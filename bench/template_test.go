package bench

import (
	"strings"
	"testing"
)

// TestParseTemplate: {consumer} and {jwt} are placeholders, {{ is a
// literal {, a brace that does not begin a placeholder is text, and an
// unknown placeholder is refused, named.
func TestParseTemplate(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string // want: rendered with consumer C and token J
	}{
		{in: "", want: ""},
		{in: "plain", want: "plain"},
		{in: "{consumer}", want: "C"},
		{in: "Bearer {jwt}", want: "Bearer J"},
		{in: "/k/{consumer}?apikey={consumer}", want: "/k/C?apikey=C"},
		{in: `{"id":"{consumer}","a":{"b":1}}`, want: `{"id":"C","a":{"b":1}}`},
		{in: "{{consumer}", want: "{consumer}"},
		{in: "{{{consumer}}", want: "{C}"},
		{in: "{ consumer }", want: "{ consumer }"},
		{in: "{consumer", want: "{consumer"},
		{in: "{}", want: "{}"},
		{in: "{1x}", want: "{1x}"},
		{in: "{user}", err: "unknown placeholder {user}: want {consumer} or {jwt} (write {{ for a literal {)"},
		{in: "a {Consumer} b", err: "unknown placeholder {Consumer}"},
		{in: "query{user{id}}", err: "unknown placeholder {id}"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			tm, err := parseTemplate(tc.in)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("parseTemplate(%q) = %v, want %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tm.render(fill); got != tc.want {
				t.Fatalf("parseTemplate(%q) renders %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func fill(p placeholder) string {
	if p == jwtPlaceholder {
		return "J"
	}
	return "C"
}

// FuzzTemplate: whatever the text, a template either is refused for an
// unknown placeholder that the text holds, or renders as the plain
// replacement of {{, {consumer} and {jwt} from left to right.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"", "{consumer}", "a{{b", "{{consumer}}", `{"k":"{jwt}"}`, "{x}", "{", "}{consumer"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := parseTemplate(s)
		if err != nil {
			name := strings.TrimSuffix(strings.TrimPrefix(err.Error(), "unknown placeholder {"), "}: want {consumer} or {jwt} (write {{ for a literal {)")
			if !strings.Contains(s, "{"+name+"}") || name == "consumer" || name == "jwt" {
				t.Fatalf("parseTemplate(%q): %v", s, err)
			}
			return
		}
		want := strings.NewReplacer("{{", "{", "{consumer}", "C", "{jwt}", "J").Replace(s)
		if got := tm.render(fill); got != want {
			t.Fatalf("parseTemplate(%q) renders %q, want %q", s, got, want)
		}
		for _, p := range tm.parts {
			if (p.placeholder == noPlaceholder) == (p.text == "") {
				t.Fatalf("parseTemplate(%q): part %+v", s, p)
			}
		}
	})
}
