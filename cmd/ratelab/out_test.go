package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestOutFile: --out FILE takes the report instead of standard output, as
// a container with no shell needs; report merge expands a pattern itself.
// A command refused before its report sends nothing, and leaves the file
// as it was (or none); a --out that cannot be written is refused first.
func TestOutFile(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) }))
	defer srv.Close()
	dir := t.TempDir()
	for _, shard := range []string{"0/2", "1/2"} {
		out := filepath.Join(dir, "shard-"+shard[:1]+".json")
		code, stdout, stderr := ratelab(t, "bench", "http", srv.URL, "--rate", "400", "--requests", "20", "--shard", shard, "--shared-consumers",
			"-o", "json", "--out", out)
		if code != exitOK || stdout != "" {
			t.Fatalf("bench http --out: exit %d, stdout %q, stderr %s", code, stdout, stderr)
		}
		var res struct{ Command string }
		if b, err := os.ReadFile(out); err != nil || json.Unmarshal(b, &res) != nil || res.Command != "bench_http" {
			t.Fatalf("%s: %v, %q", out, err, res.Command)
		}
	}
	merged := filepath.Join(dir, "merged.md")
	code, stdout, stderr := ratelab(t, "report", "merge", filepath.Join(dir, "shard-*.json"), "-o", "markdown", "--out", merged)
	if code != exitOK || stdout != "" {
		t.Fatalf("report merge --out: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(merged); err != nil || !strings.Contains(string(b), "| all responses | 20 |") {
		t.Fatalf("%s: %v\n%s", merged, err, b)
	}
	if err := os.WriteFile(merged, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "http", srv.URL, "--rate", "-5", "--out", merged}, "--rate must be between 0"},
		{[]string{"bench", "http", srv.URL, "--out", filepath.Join(dir, "nodir", "x.json")}, "--out: open " + dir},
		{[]string{"bench", "http", srv.URL, "--out", dir}, "--out: open " + dir},
		{[]string{"report", "merge", filepath.Join(dir, "none-*.json"), "--out", merged}, "none-*.json matches no file"},
	} {
		before := n.Load()
		code, stdout, stderr := ratelab(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, stdout, stderr, tc.want)
		}
		if n.Load() != before {
			t.Errorf("%v: requests were sent", tc.args)
		}
	}
	if b, err := os.ReadFile(merged); err != nil || string(b) != "kept" {
		t.Errorf("a refused command changed its --out file: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nodir")); err == nil {
		t.Error("a refused --out created its directory")
	}
}
