package reports_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/reports"
	"github.com/ratelab/ratelab/skew"
)

// leakyRun is a short, audited bench http run of consumers against a server
// that admits twice the limit it advertises: a timeline, histograms and
// audit samples, as a real run has them.
func leakyRun(t *testing.T, consumers int) bench.Result {
	t.Helper()
	var mu sync.Mutex
	count := map[string]int{}
	start := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("X-Consumer-Id") + "/" + strconv.Itoa(int(time.Since(start)/time.Second))
		count[key]++
		w.Header().Set("RateLimit-Policy", `"default";q=5;w=1`)
		if count[key] > 10 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 40, Duration: 2500 * time.Millisecond,
		Consumers: consumers, ConsumerHeader: "X-Consumer-Id", ExpectLimit: 5, ExpectWindow: time.Second, NoProbes: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// chromium finds a Chromium or Chrome to drive; the test is skipped
// without one, and fails under CI.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if redistest.InCI() {
		t.Fatal("under CI: no chromium on PATH (make test installs it)")
	}
	t.Skip("no chromium on PATH")
	return ""
}

// artifacts is where the browser test leaves its screenshots:
// $RATELAB_ARTIFACTS, or ratelab-artifacts in the temporary directory.
func artifacts(t *testing.T) string {
	dir := os.Getenv("RATELAB_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "ratelab-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHTMLInABrowser: the page of every kind of result, opened from disk in
// headless Chromium, logs no error, asks the network for nothing, and draws
// in each chart as many marks as its data implies. Two bench runs are drawn
// together, each in one colour in every chart; the audit chart of a run of
// two consumers draws both, that of twelve the eight admitted most in one
// window, and neither draws a window the run ended inside.
func TestHTMLInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no browser")
	}
	exe := chromium(t)
	run, crowd := leakyRun(t, 2), leakyRun(t, 12)
	runs := []reports.Named[bench.Result]{{Name: "leaky.json", Result: run}, {Name: "crowd.json", Result: crowd}}
	cmp := fixedCompare()
	for i := range cmp.Results {
		cmp.Results[i].BoundaryTimeline = []compare.Decision{{AtMillis: 0, Allowed: true}, {AtMillis: 1, Allowed: true}, {AtMillis: 1, Allowed: false}}
		cmp.Results[i].HammerTimeline = []compare.Decision{{AtMillis: 0, Allowed: true}, {AtMillis: 10, Allowed: false}, {AtMillis: 20, Allowed: true}}
	}
	dr := fixedDrill()
	dr.Results[0].Timeline = &drill.Timeline{IntervalMillis: 250, FaultFromMillis: 500, FaultToMillis: 1000, Intervals: []drill.TimelineInterval{
		{StartMillis: 0, Decisions: 75, Admitted: 30}, {StartMillis: 250, Decisions: 75, Admitted: 30},
		{StartMillis: 500, Decisions: 75, Admitted: 75, OverAdmitted: 45, Errors: 75}, {StartMillis: 750, Decisions: 75, Admitted: 60, OverAdmitted: 30, Errors: 70},
		{StartMillis: 1000, Decisions: 75, Admitted: 30}}}
	page := reports.Page{
		Bench: runs,
		Race: []reports.Named[race.Report]{{Name: "race.json", Result: fixedRace()}, {Name: "explained.json", Result: explainedRace()},
			{Name: "in-flight.json", Result: fixedInFlight()}},
		Compare: []reports.Named[compare.Report]{{Name: "compare.json", Result: cmp}},
		Skew:    []reports.Named[skew.Report]{{Name: "skew.json", Result: fixedSkew()}},
		Drill:   []reports.Named[drill.Report]{{Name: "drill.json", Result: dr}},
	}
	path := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := reports.HTML(f, page); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// What the data implies, counted here from the data, not from the page.
	want := map[string]int{}
	// Per audit chart: each consumer's whole windows (those that end by the
	// end of the run), and its peak.
	audit := map[string]map[string]consumerWindows{}
	leaks := 0
	for i, r := range runs {
		res := r.Result
		iv := len(res.Timeline.Intervals)
		want["bench-throughput"] += iv
		classes := map[string]bool{}
		for _, x := range res.Timeline.Intervals {
			if x.Requests > 0 {
				want["bench-latency"] += 2
			}
			for c, n := range x.Status {
				if n > 0 {
					classes[c] = true
				}
			}
		}
		want[fmt.Sprintf("bench-status-%d", i)] = iv * len(classes)
		want["bench-spectrum"] += 6
		windows, err := res.RollingAdmissions(1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(windows) != res.Config.Consumers {
			t.Fatalf("%s: %d consumers admitted, want all %d", r.Name, len(windows), res.Config.Consumers)
		}
		id := fmt.Sprintf("bench-audit-%d", i)
		audit[id] = map[string]consumerWindows{}
		end := int64(res.DurationSeconds * 1000)
		for _, w := range windows {
			var cw consumerWindows
			for _, p := range w.Points {
				if p.AtMillis+res.Audit.Limits[0].WindowMillis <= end {
					cw.windows++
					cw.peak = max(cw.peak, p.Admitted)
					if p.Admitted > w.Allowed {
						cw.bad++
						leaks++
					}
				}
			}
			audit[id][w.Consumer] = cw
		}
	}
	wantBad := map[string]int{}
	for i, r := range []race.Report{fixedRace(), explainedRace()} {
		for j, res := range r.Results {
			want[fmt.Sprintf("race-admitted-%d", i)] += len(res.TrialResults)
			want[fmt.Sprintf("race-latency-%d", i)] += 6
			want[fmt.Sprintf("race-trial-latency-%d", i)] += len(res.TrialResults)
			if res.Explain == nil {
				continue
			}
			id := fmt.Sprintf("race-lanes-%d-%d", i, j)
			for _, l := range res.Explain.Lanes {
				want[id] += len(l.Commands)
				for _, c := range l.Commands {
					if c.Mark == "over" || c.Mark == "aborted" {
						wantBad[id]++
					}
				}
			}
		}
	}
	for _, res := range fixedInFlight().InFlight { // the third race
		want["race-at-once-2"] += len(res.TrialResults)
		want["race-leaked-2"] += len(res.TrialResults)
		want["race-latency-2"] += 6
	}
	for _, res := range cmp.Results {
		want["compare-boundary-0"] += 2 // two instants with an admission
		want["compare-hammer-0"] += 2   // two admissions
		want["compare-memory-0"] += len(res.BytesPerClient)
	}
	want["skew-0"] = len(fixedSkew().Rows)
	want["drill-0-0"] = 4 * len(dr.Results[0].Timeline.Intervals) // admitted, over, not decided, wrongly refused

	alloc, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(820, 1000))...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var problems, requests []string
	err = chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				problems = append(problems, "console "+string(ev.Type))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+ev.ExceptionDetails.Text)
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	type figure struct {
		ID     string        `json:"id"`
		Title  string        `json:"title"`
		Data   int           `json:"data"`
		Marks  int           `json:"marks"`
		Bad    int           `json:"bad"`
		Axes   int           `json:"axes"`
		Items  int           `json:"legend"`
		Series []drawnSeries `json:"series"`
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+path), chromedp.WaitReady("body")); err != nil {
		t.Fatal(err)
	}
	figs, err := chromedp.Run(ctx, chromedp.Evaluate[[]figure](`Array.from(document.querySelectorAll("figure.chart")).map(f => ({
		id: f.id, title: f.querySelector("text.title").textContent, data: Number(f.dataset.marks),
		marks: f.querySelectorAll("g.series .mark").length,
		bad: f.querySelectorAll("g.series .mark.bad").length, axes: f.querySelectorAll("text.axis").length,
		legend: f.querySelectorAll("g.legend-item").length,
		series: Array.from(f.querySelectorAll("g.series")).map(g => {
			const m = g.querySelector(".mark");
			return {name: g.dataset.series, marks: g.querySelectorAll(".mark").length,
				bad: g.querySelectorAll(".mark.bad").length, colour: m ? getComputedStyle(m).fill : ""};
		})}))`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(artifacts(t), "report.png")
	if err := os.WriteFile(png, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", png)

	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the page logged: %v", problems)
	}
	for _, u := range requests {
		if !strings.HasPrefix(u, "file://") {
			t.Errorf("the page asked the network for %s", u)
		}
	}
	seen := map[string]bool{}
	colours := map[string]map[string]bool{} // run, or compare's algorithm, -> the colours it was drawn in
	for _, f := range figs {
		seen[f.ID] = true
		for _, s := range f.Series {
			who := ""
			switch f.ID {
			case "bench-throughput", "bench-latency", "bench-spectrum": // the runs overlaid
				for _, r := range runs {
					if s.Name == r.Name || strings.HasPrefix(s.Name, r.Name+" ") {
						who = r.Name
					}
				}
			case "compare-boundary-0", "compare-hammer-0", "compare-memory-0":
				who = "compare: " + s.Name
			}
			if who != "" && s.Colour != "" {
				if colours[who] == nil {
					colours[who] = map[string]bool{}
				}
				colours[who][s.Colour] = true
			}
		}
		if consumers, ok := audit[f.ID]; ok {
			checkAuditChart(t, f.ID, f.Title, f.Items, consumers, f.Series)
		}
		if _, ok := audit[f.ID]; ok {
			continue
		}
		w, ok := want[f.ID]
		switch {
		case !ok:
			t.Errorf("chart %s: not expected", f.ID)
		case f.Marks != w || f.Data != w:
			t.Errorf("chart %s: %d marks drawn (%d said), want %d from the data", f.ID, f.Marks, f.Data, w)
		case f.Axes != 2 || (w > 0 && f.Items == 0):
			t.Errorf("chart %s: %d axis labels, %d legend items", f.ID, f.Axes, f.Items)
		}
		if strings.HasPrefix(f.ID, "race-lanes-") && f.Bad != wantBad[f.ID] {
			t.Errorf("chart %s: %d commands outlined, the trace has %d over the guarantee or aborted", f.ID, f.Bad, wantBad[f.ID])
		}
		if f.ID == "drill-0-0" && f.Bad != 2 {
			t.Errorf("the drill chart outlines %d intervals over the guarantee, the data 2", f.Bad)
		}
	}
	for id := range audit {
		want[id] = 0
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("chart %s: missing", id)
		}
	}
	if leaks == 0 {
		t.Error("the leaky server leaked in no whole window")
	}
	byColour := map[string]string{}
	for who, cs := range colours {
		if len(cs) != 1 {
			t.Errorf("%s is drawn in %d colours across the charts: %v", who, len(cs), cs)
		}
		group := "" // runs differ from runs, algorithms from algorithms
		if strings.HasPrefix(who, "compare: ") {
			group = "compare"
		}
		for c := range cs {
			if other, ok := byColour[group+c]; ok {
				t.Errorf("%s and %s are both drawn in %s", who, other, c)
			}
			byColour[group+c] = who
		}
	}
	for _, r := range runs {
		if len(colours[r.Name]) == 0 {
			t.Errorf("no chart names the run %s", r.Name)
		}
	}
}

// consumerWindows is what a consumer's audit data implies: its windows that
// ended by the end of the run, the most admitted in one, and how many of
// them admitted more than allowed.
type consumerWindows struct{ windows, peak, bad int64 }

// drawnSeries is a series as the browser drew it: its name, its marks,
// those outlined, and the colour of its first mark.
type drawnSeries struct {
	Name   string `json:"name"`
	Marks  int    `json:"marks"`
	Bad    int    `json:"bad"`
	Colour string `json:"colour"`
}

// checkAuditChart: an audit chart draws every consumer, or the eight
// admitted the most in one window and says so, each with one mark per
// window that ended by the end of the run, and in the legend.
func checkAuditChart(t *testing.T, id, title string, legend int, consumers map[string]consumerWindows, drawn []drawnSeries) {
	t.Helper()
	shown := min(len(consumers), 8)
	if len(drawn) != shown || legend != shown {
		t.Errorf("chart %s: %d consumers drawn, %d in the legend; want %d of %d", id, len(drawn), legend, shown, len(consumers))
	}
	says := fmt.Sprintf("the worst %d of %d", shown, len(consumers))
	if cut := shown < len(consumers); cut != strings.Contains(title, says) {
		t.Errorf("chart %s: title %q; want it to say %q when, and only when, some are not drawn", id, title, says)
	}
	lowest := int64(-1)
	names := map[string]bool{}
	for _, d := range drawn {
		c, ok := consumers[d.Name]
		names[d.Name] = true
		switch {
		case !ok:
			t.Errorf("chart %s: %s is not a consumer of the run", id, d.Name)
		case int64(d.Marks) != c.windows:
			t.Errorf("chart %s: %s has %d marks, want its %d windows that ended by the end of the run", id, d.Name, d.Marks, c.windows)
		case int64(d.Bad) != c.bad:
			t.Errorf("chart %s: %s has %d marks outlined, want its %d windows over the limit", id, d.Name, d.Bad, c.bad)
		}
		if lowest < 0 || c.peak < lowest {
			lowest = c.peak
		}
	}
	for name, c := range consumers {
		if !names[name] && c.peak > lowest {
			t.Errorf("chart %s: %s, %d admitted in one window, is not drawn, where one of %d is", id, name, c.peak, lowest)
		}
	}
}
