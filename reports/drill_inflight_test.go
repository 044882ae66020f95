package reports_test

import (
	"io"
	"testing"

	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/reports"
)

// fixedInFlightDrill is an in-flight drill report with fixed numbers.
func fixedInFlightDrill() drill.InFlightReport {
	p := func(v int64) *int64 { return &v }
	return drill.InFlightReport{
		Command: "drill", RedisVersion: "7.0.15",
		Config: drill.InFlightSettings{Engines: []string{"go", "openresty"}, InFlight: 5, LeaseMillis: 2000, HoldMillis: 300,
			Consumers: 4, SteadyMillis: 1000, WatchMillis: 4000},
		Results: []drill.InFlightRow{
			{Engine: "go", Kind: drill.KindLease, HeldAtKill: 20, RecoverMillis: p(1850), WatchMillis: 4010, Admitted: 180, Refused: 900},
			{Engine: "go", Kind: drill.KindCounter, HeldAtKill: 20, LeakedAtEnd: 20, WatchMillis: 4020, Refused: 1500},
		},
		Skipped:       []drill.Skip{{Engine: "openresty", Fault: "gateway-kill", Reason: "nginx not found"}},
		ElapsedMillis: 12000,
	}
}

func TestDrillInFlightGolden(t *testing.T) {
	goldens(t, "drill_inflight", func(w io.Writer, f reports.Format) error {
		return reports.DrillInFlight(w, fixedInFlightDrill(), f, reports.Options{})
	})
	if got, want := reports.DrillInFlightVerdict(fixedInFlightDrill()), "1 of 2 runs leaked slots: go, counter: 20 slots leaked"; got != want {
		t.Errorf("verdict %q, want %q", got, want)
	}
}
