package algorithms_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/algorithms"
)

// TestScriptsSharePreamble: every script of this package (decide.lua,
// slidinglog.lua and its broken variant) begins with the same lines, Redis
// 7's shebang and what it means, and decide.lua's embedded source, which
// the nginx engine is given, is its file, byte for byte. The preamble is
// repeated rather than assembled in Go because each .lua file is itself a
// script that runs outside Go: edge/openresty's README has users copy
// decide.lua beside ratelimit.lua, and race --script runs slidinglog.lua,
// so the shebang has to be the first line of the file. A change to the
// preamble is made to every file, or this fails.
func TestScriptsSharePreamble(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.lua")
	if err != nil || len(files) < 3 {
		t.Fatalf("scripts %v (%v): want this package's three", files, err)
	}
	preamble := func(src string) string {
		lines := strings.SplitAfter(src, "\n")
		return strings.Join(lines[:min(5, len(lines))], "")
	}
	var first string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := preamble(string(b))
		if !strings.HasPrefix(p, "#!lua\n") {
			t.Errorf("%s does not begin with Redis 7's shebang: %q", f, p)
		}
		if first == "" {
			first = p
		} else if p != first {
			t.Errorf("%s begins\n%s\nand %s\n%s", f, p, files[0], first)
		}
		if f == "decide.lua" && string(b) != algorithms.DecideSource() {
			t.Error("DecideSource is not decide.lua as it is in the tree")
		}
	}
}
