package reports_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/reports"
)

// TestHTMLLabelsBenchRuns: a page of a bench http run and a bench rls run
// draws each under its own command, the rls run's answers by their codes
// (OK, OVER_LIMIT, UNKNOWN), never as 2xx and 429 under bench http; and
// every paragraph of an audit names the run it belongs to. A page of one
// run needs no such names.
func TestHTMLLabelsBenchRuns(t *testing.T) {
	run := func() *audit.Audit {
		return &audit.Audit{Verdict: audit.Held, Reasons: []string{}, Samples: 96, Limits: []audit.LimitAudit{limit(audit.Held)}}
	}
	httpRun := fixedBench(map[string]int64{"200": 30, "429": 66, "503": 2}, 2, run())
	httpRun.Timeline.Intervals = []bench.Interval{{StartMillis: 0, Requests: 50, Status: map[string]int64{"2xx": 20, "429": 28, "5xx": 2}},
		{StartMillis: 1000, Requests: 50, Status: map[string]int64{"2xx": 10, "429": 38, "errors": 2}}}
	rlsRun := fixedRLS(run())
	rlsRun.StatusCounts["500"] = 4
	rlsRun.Timeline.Intervals = []bench.Interval{{StartMillis: 0, Requests: 50, Status: map[string]int64{"2xx": 20, "429": 26, "5xx": 4}},
		{StartMillis: 1000, Requests: 50, Status: map[string]int64{"2xx": 10, "429": 40}}}
	// rls.json first: the page still draws bench http first.
	page := render(t, reports.Page{Bench: []reports.Named[bench.Result]{{Name: "rls.json", Result: rlsRun}, {Name: "http.json", Result: httpRun}}})
	httpPart, rlsPart, ok := strings.Cut(page, "<h2>bench rls</h2>")
	if !ok || !strings.Contains(httpPart, "<h2>bench http</h2>") {
		t.Fatalf("the page has no section of its own for each command:\n%s", page)
	}
	if strings.Contains(httpPart, "rls.json") || strings.Contains(rlsPart, "http.json") {
		t.Fatal("a run is drawn under the other command")
	}
	legend := regexp.MustCompile(`<text class="legend"[^>]*>([^<]*)</text>`)
	series := func(part, chartID string) []string {
		i := strings.Index(part, `id="`+chartID+`"`)
		if i < 0 {
			t.Fatalf("no chart %s", chartID)
		}
		end := strings.Index(part[i:], "</svg>")
		var names []string
		for _, m := range legend.FindAllStringSubmatch(part[i:i+end], -1) {
			names = append(names, m[1])
		}
		return names
	}
	if got := strings.Join(series(rlsPart, "rls-status-0"), " "); got != "OK OVER_LIMIT UNKNOWN" {
		t.Errorf("the rls run's answers are drawn as %q, want OK OVER_LIMIT UNKNOWN", got)
	}
	if got := strings.Join(series(httpPart, "bench-status-0"), " "); got != "2xx 429 5xx errors" {
		t.Errorf("the http run's responses are drawn as %q", got)
	}
	for _, want := range []string{"Answers by code over time: rls.json", "answers/s", "Latency over time (from when each call was due)"} {
		if !strings.Contains(rlsPart, want) {
			t.Errorf("the bench rls section does not say %q", want)
		}
	}
	// Each run's audit paragraphs, named by their run.
	note := regexp.MustCompile(`<p class="note">([^<]*)</p>`)
	audited := 0
	for _, part := range []struct{ text, name string }{{httpPart, "http.json"}, {rlsPart, "rls.json"}} {
		for _, m := range note.FindAllStringSubmatch(part.text, -1) {
			p := m[1]
			if !strings.Contains(p, "Audit") && !strings.Contains(p, "Under-admission") && !strings.Contains(p, "Retry-After") &&
				!strings.Contains(p, "duration_until_reset") {
				continue
			}
			audited++
			if !strings.HasPrefix(p, part.name+": ") {
				t.Errorf("an audit paragraph of %s does not name its run: %q", part.name, p)
			}
		}
	}
	if audited < 4 {
		t.Fatalf("%d audit paragraphs: want each run's", audited)
	}
	// Alone, a run's audit paragraphs need no name.
	alone := render(t, reports.Page{Bench: []reports.Named[bench.Result]{{Name: "rls.json", Result: rlsRun}}})
	if strings.Contains(alone, "<h2>bench http</h2>") || !strings.Contains(alone, `<p class="note">Under-admission`) {
		t.Errorf("a page of one rls run:\n%s", alone)
	}
}

func render(t *testing.T, p reports.Page) string {
	t.Helper()
	var b strings.Builder
	if err := reports.HTML(&b, p); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
