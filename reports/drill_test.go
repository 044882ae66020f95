package reports_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/reports"
)

// fixedDrill is a drill report with fixed numbers, as a run would return it.
func fixedDrill() drill.Report {
	p := func(v int64) *int64 { return &v }
	return drill.Report{
		Command: "drill", RedisVersion: "7.0.15", Guarantee: "at most 10 in any 1s span",
		Config: drill.Settings{Engines: []string{"go"}, Faults: []string{"hang", "latency", "failover"}, Modes: []string{"open", "closed"},
			LatenciesMillis: []int64{50}, FaultMillis: 5000, SteadyMillis: 2000, AfterMillis: 3000, Algorithm: "sliding-log", Limit: 10,
			WindowMillis: 1000, Consumers: 20, Load: 1.5, Nodes: 1, RatePerSec: 300, TimeoutMillis: 200, Batch: 1, BreakerFailures: 5, DownAfterMillis: 1000},
		Results: []drill.Row{
			{Fault: "hang", Engine: "go", OnRedisError: "open", Decisions: 3000, Admitted: 2391, OverAdmitted: 683, Errors: 1492,
				DetectMillis: p(201), RecoverMillis: p(4), P50Millis: 0.88, P99Millis: 302.3, FaultMillis: 5000},
			{Fault: "hang", Engine: "go", OnRedisError: "closed", Decisions: 3000, Admitted: 1000, WronglyDenied: 990, Errors: 1496,
				DetectMillis: p(203), RecoverMillis: p(2), P50Millis: 0.84, P99Millis: 303.4, FaultMillis: 5000},
			{Fault: "latency", LatencyMillis: 50, Engine: "go", OnRedisError: "open", Decisions: 3000, Admitted: 2000,
				P50Millis: 65.8, P99Millis: 172.4, FaultMillis: 5001},
			{Fault: "failover", Engine: "go", OnRedisError: "closed", Decisions: 3000, Admitted: 1400, WronglyDenied: 650, Errors: 662,
				DetectMillis: p(2), RecoverMillis: p(80), P50Millis: 0.8, P99Millis: 1.3, FaultMillis: 2152, FailoverMillis: p(2152)},
		},
		Skipped:       []drill.Skip{{Engine: "openresty", Fault: "hang", OnRedisError: "open", Reason: "nginx not found"}},
		ElapsedMillis: 41000,
	}
}

func TestDrillGolden(t *testing.T) {
	goldens(t, "drill", func(w io.Writer, f reports.Format) error { return reports.Drill(w, fixedDrill(), f, reports.Options{}) })
}

// TestDrillJSON: the fields the drill promises, by name.
func TestDrillJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := reports.Drill(&buf, fixedDrill(), reports.JSON, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"command": "drill"`, `"results": [`, `"fault": "hang"`, `"engine": "go"`, `"on_redis_error": "open"`,
		`"decisions": 3000`, `"over_admitted": 683`, `"wrongly_denied": 990`, `"errors": 1492`, `"detect_ms": 201`,
		`"recover_ms": 4`, `"p99_ms": 302.3`, `"detect_ms": null`} {
		if !strings.Contains(buf.String(), f) {
			t.Errorf("the JSON lacks %s", f)
		}
	}
	if got := reports.DrillVerdict(fixedDrill()); !strings.HasPrefix(got, "1 of 4 runs admitted beyond the guarantee: hang, go, fail open: 683") {
		t.Errorf("verdict %q", got)
	}
}

// TestDrillWithoutBreaker: a drill run with the circuit breaker off says so.
func TestDrillWithoutBreaker(t *testing.T) {
	rep := fixedDrill()
	rep.Config.BreakerFailures = 0
	var buf bytes.Buffer
	if err := reports.Drill(&buf, rep, reports.Table, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "Redis timeout 200ms, no circuit breaker\n") || strings.Contains(out, "circuit after") {
		t.Fatalf("the summary does not say the breaker was off:\n%s", out)
	}
}

// TestDrillLegend: the legend says what errors counts under each fail
// mode, and, when a run failed local, that its over-admission is by design.
func TestDrillLegend(t *testing.T) {
	rep := fixedDrill()
	var buf bytes.Buffer
	if err := reports.Drill(&buf, rep, reports.Markdown, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"errors: requests Redis did not decide, whatever the answer: fail open passed them, fail closed answered 503",
		"fail open over-admits by design"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the legend does not say %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "local") {
		t.Errorf("the legend speaks of local, which no run failed:\n%s", buf.String())
	}
	rep.Config.Modes = append(rep.Config.Modes, "local")
	rep.Results = append(rep.Results, drill.Row{Fault: "hang", Engine: "go", OnRedisError: "local", Decisions: 3000, Admitted: 1600,
		OverAdmitted: 100, Errors: 1487, FaultMillis: 5000})
	buf.Reset()
	if err := reports.Drill(&buf, rep, reports.Table, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fail local, the gateway's own limiter answered",
		"fail local over-admits by design too: 1 gateway limits alone to 10 per 1s from an empty count"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the legend does not say %q:\n%s", want, buf.String())
		}
	}
}
