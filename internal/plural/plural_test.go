package plural

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 consumers"}, {1, "1 consumer"}, {2, "2 consumers"}, {-1, "-1 consumers"}} {
		if got := Count(tc.n, "consumer"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := Count(1, "Poisson client"); got != "1 Poisson client" {
		t.Errorf("got %q", got)
	}
}

func TestList(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  string
	}{{nil, ""}, {[]string{"a"}, "a"}, {[]string{"a", "b"}, "a and b"}, {[]string{"a", "b", "c"}, "a, b and c"}} {
		if got := List(tc.words, "and"); got != tc.want {
			t.Errorf("List(%q) = %q, want %q", tc.words, got, tc.want)
		}
	}
	if got := List([]string{"a", "b", "c"}, "or"); got != "a, b or c" {
		t.Errorf("got %q", got)
	}
}

func TestTally(t *testing.T) {
	counts := map[string]int64{"503": 2, "400": 240, "200": 7, "429": 0}
	if got := Tally(counts, func(k string) bool { return k != "200" }); got != "400 × 240, 503 × 2" {
		t.Errorf("got %q", got)
	}
	if got := Tally(nil, func(string) bool { return true }); got != "" {
		t.Errorf("got %q", got)
	}
}
