package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestReportHTML: saved results of race (explained too) become one page
// with a chart per kind and the explained trial's swimlanes; a file that is
// not a result, a kind the page does not draw, or no --out is refused with
// exit 2 and no page written.
func TestReportHTML(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	dir := t.TempDir()
	code, stdout, stderr := ratelab(t, "race", "--redis", srv.URL(), "--limiters", "naive,lua", "--trials", "2",
		"--concurrency", "20", "--explain", "-o", "json")
	if code != exitOK {
		t.Fatalf("race: exit %d: %s", code, stderr)
	}
	race := filepath.Join(dir, "race.json")
	notResult := filepath.Join(dir, "notes.json")
	other := filepath.Join(dir, "other.json")
	for path, body := range map[string]string{race: stdout, notResult: "[1, 2]", other: `{"command": "ping"}`} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	page := filepath.Join(dir, "report.html")
	if code, _, stderr := ratelab(t, "report", "html", race, "--out", page); code != exitOK {
		t.Fatalf("report html: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="race-admitted-0"`, `id="race-trial-latency-0"`, `id="race-lanes-0-0"`, "naive, explained"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the page has no %s", want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{race}, "--out is required"},
		{[]string{notResult, "--out", page + ".2"}, "notes.json: not a ratelab JSON result"},
		{[]string{other, "--out", page + ".2"}, `other.json: a "ping" result, which report html does not draw`},
		{[]string{filepath.Join(dir, "missing.json"), "--out", page + ".2"}, "missing.json"},
	} {
		code, _, stderr := ratelab(t, append([]string{"report", "html"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("report html %v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
		if _, err := os.Stat(page + ".2"); err == nil {
			t.Errorf("report html %v wrote a page", tc.args)
		}
	}
}

// TestReportHTMLOut: report html writes its page to --out FILE; -o FILE
// still works, with a notice on the error stream (elsewhere -o is the
// output format); with neither it is refused, exit 2.
func TestReportHTMLOut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	result := filepath.Join(dir, "run.json")
	if err := os.WriteFile(result, []byte(`{"command": "bench_http"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag   string
		code   int
		notice bool
	}{
		{"--out", exitOK, false},
		{"-o", exitOK, true},
		{"", exitUsage, false},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			page := filepath.Join(dir, "page"+tc.flag+".html")
			args := []string{"report", "html", result}
			if tc.flag != "" {
				args = append(args, tc.flag, page)
			}
			code, stdout, stderr := ratelab(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, stderr)
			}
			if stdout != "" {
				t.Errorf("printed on the output stream: %q", stdout)
			}
			if said := strings.Contains(stderr, "-o has been deprecated, use --out FILE"); said != tc.notice {
				t.Errorf("stderr %q: deprecation notice %v, want %v", stderr, said, tc.notice)
			}
			_, err := os.Stat(page)
			switch {
			case tc.code == exitOK && err != nil:
				t.Errorf("no page written: %v", err)
			case tc.code != exitOK:
				if !strings.Contains(stderr, "--out is required") {
					t.Errorf("stderr %q does not ask for --out", stderr)
				}
			}
		})
	}
}
