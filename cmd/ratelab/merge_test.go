package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
)

// keyedOnce admits the first limit requests of each API key (the apikey
// query parameter) and denies every later one: it never admits more than
// limit in any span.
func keyedOnce(t *testing.T, limit int) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	count := map[string]int{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.URL.Query().Get("apikey")
		count[key]++
		if count[key] > limit {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestReportMergeOnlyMergesOneRun: five single-key runs, each of one
// consumer (consumer-0) held to 10, are five runs: report merge refuses
// them, exit 2, naming every file with its run id, and sends nothing;
// --as-one-run merges them as five consumers, each held, named by file.
func TestReportMergeOnlyMergesOneRun(t *testing.T) {
	t.Parallel()
	srv := keyedOnce(t, 10)
	dir := t.TempDir()
	var files []string
	for i := range 5 {
		file := filepath.Join(dir, fmt.Sprintf("key%d.json", i))
		code, stdout, stderr := ratelab(t, "bench", "http", fmt.Sprintf("%s/?apikey=k%d", srv.URL, i), "--rate", "60", "--requests", "30", "--duration", "0s",
			"--consumers", "1", "--expect-limit", "10/1s", "--no-probes", "--fail-on-leak", "-o", "json", "--out", file)
		if code != exitOK {
			t.Fatalf("key %d alone: exit %d (%s) %s", i, code, stderr, stdout)
		}
		files = append(files, file)
	}
	code, stdout, stderr := ratelab(t, append([]string{"report", "merge", "--fail-on-leak"}, files...)...)
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, "not shards of one run") || !strings.Contains(stderr, "--as-one-run") {
		t.Fatalf("merged five runs: exit %d, stdout %q, stderr %q; want 2", code, stdout, stderr)
	}
	for _, f := range files {
		if !strings.Contains(stderr, f+" is run ") {
			t.Errorf("stderr %q does not name %s and its run id", stderr, f)
		}
	}

	code, stdout, stderr = ratelab(t, append([]string{"report", "merge", "--as-one-run", "--fail-on-leak", "-o", "json"}, files...)...)
	if code != exitOK {
		t.Fatalf("--as-one-run: exit %d, %s", code, stderr)
	}
	var m bench.Result
	decodeJSON(t, stdout, &m)
	if m.Config.Consumers != 5 || m.Audit == nil || m.Audit.Verdict != audit.Held || m.Audit.Limits[0].Consumers != 5 || m.Audit.Limits[0].OverAdmitted != 0 {
		t.Fatalf("--as-one-run: %d consumers, audit %+v; want five, held", m.Config.Consumers, m.Audit)
	}
	if len(m.Config.Identities) != 5 || m.Config.Identities[3] != "consumer-0 ("+files[3]+")" {
		t.Fatalf("consumer names %q: want each named by its file", m.Config.Identities)
	}
	merged := filepath.Join(dir, "merged.json")
	if err := os.WriteFile(merged, []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := ratelab(t, "report", "merge", merged, "--fail-on-leak"); code != exitOK {
		t.Fatalf("the merge merged again: exit %d, %s", code, stderr)
	}
}

// TestReportMergeRefusesRepeatedRuns: one command run twice, one after the
// other, gives two results of one run id, each the whole run (shard 0 of
// 1): report merge refuses them, exit 2, naming both files, and prints
// nothing; --as-one-run merges them. A file given twice is refused, with
// --as-one-run too: its requests would count twice.
func TestReportMergeRefusesRepeatedRuns(t *testing.T) {
	t.Parallel()
	// The first 10 requests of each key in each run are admitted.
	var mu sync.Mutex
	count := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.URL.Query().Get("apikey")
		if count[key]++; count[key] > 10 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "first.json"), filepath.Join(dir, "again.json")}
	var ids []string
	for _, file := range files {
		mu.Lock()
		clear(count)
		mu.Unlock()
		code, stdout, stderr := ratelab(t, "bench", "http", srv.URL+"/?apikey={consumer}", "--rate", "60", "--requests", "30", "--duration", "0s",
			"--consumers", "2", "--expect-limit", "10/1s", "--no-probes", "-o", "json", "--out", file)
		if code != exitOK {
			t.Fatalf("%s: exit %d (%s) %s", file, code, stderr, stdout)
		}
		var r bench.Result
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		decodeJSON(t, string(b), &r)
		ids = append(ids, r.RunID)
	}
	if ids[0] != ids[1] {
		t.Fatalf("run ids %q: the same command should give one", ids)
	}
	code, stdout, stderr := ratelab(t, "report", "merge", "--fail-on-leak", files[0], files[1])
	want := files[0] + " and " + files[1] + " each claim the whole of run " + ids[0] + " (shard 0 of 1)"
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--as-one-run") {
		t.Fatalf("merged two repeated runs: exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, want)
	}
	code, stdout, stderr = ratelab(t, "report", "merge", "--as-one-run", "--fail-on-leak", "-o", "json", files[0], files[1])
	var m bench.Result
	decodeJSON(t, stdout, &m)
	if code != exitOK || m.Audit == nil || m.Audit.Verdict != audit.Held || len(m.Parts) != 2 {
		t.Fatalf("--as-one-run: exit %d (%s), audit %+v, parts %+v", code, stderr, m.Audit, m.Parts)
	}
	for _, args := range [][]string{{files[0], files[0]}, {"--as-one-run", files[0], files[0]}} {
		code, stdout, stderr := ratelab(t, append([]string{"report", "merge"}, args...)...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "hold the same run") || !strings.Contains(stderr, "give each run once") {
			t.Fatalf("%q: exit %d, stdout %q, stderr %q; want 2, the same run", args, code, stdout, stderr)
		}
	}
}
