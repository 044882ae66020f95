package main

import (
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/edits"
)

// TestMistypedFlagSuggested: an unknown flag exits 2 and names the flags
// of its command it most likely meant (the closest, else those it
// begins), a long flag given one dash is named with two, and a name near
// none is refused with no guess; a mistyped subcommand of a group is
// answered the same way.
func TestMistypedFlagSuggested(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "http", "http://127.0.0.1:1/", "--expect-limt", "5/1s"}, "unknown flag: --expect-limt (did you mean --expect-limit?)"},
		{[]string{"bench", "http", "http://127.0.0.1:1/", "--consumers-header=X-Api-Key"}, "unknown flag: --consumers-header (did you mean --consumer-header?)"},
		{[]string{"bench", "http", "http://127.0.0.1:1/", "--expect", "5/1s"},
			"unknown flag: --expect (did you mean --expect-algorithm, --expect-in-flight or --expect-limit?)"},
		{[]string{"bench", "http", "http://127.0.0.1:1/", "-expect-limit", "5/1s"}, "in -expect-limit (did you mean --expect-limit?)"},
		{[]string{"bench", "rls", "127.0.0.1:1", "--domian", "d"}, "unknown flag: --domian (did you mean --domain?)"},
		{[]string{"race", "--trails", "3"}, "unknown flag: --trails (did you mean --trials?)"},
		{[]string{"race", "--REDIS", "redis://127.0.0.1:1"}, "unknown flag: --REDIS (did you mean --redis?)"},
		{[]string{"bench", "htp"}, `unknown command "htp" for "ratelab bench" (did you mean http?)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := ratelab(t, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want+"\n") || stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want 2 and %q", code, stderr, stdout, tc.want)
			}
		})
	}
	code, _, stderr := ratelab(t, "race", "--zzzzzz")
	if code != exitUsage || !strings.Contains(stderr, "unknown flag: --zzzzzz\n") {
		t.Fatalf("exit %d, stderr %q; want 2, and no guess", code, stderr)
	}
}

func TestLevenshtein(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"trails", "trials", 2}, {"expect-limt", "expect-limit", 1}, {"kitten", "sitting", 3},
	} {
		if got := edits.Distance(tc.a, tc.b); got != tc.want || edits.Distance(tc.b, tc.a) != tc.want {
			t.Errorf("edits.Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
