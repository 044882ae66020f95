package reports_test

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/reports"
	"github.com/ratelab/ratelab/skew"
)

// onePlural finds a count of one with its noun in the plural ("1 consumers"),
// or a noun left to the reader ("1 gateway(s)").
var onePlural = regexp.MustCompile(`(^|[^0-9.,])1 (?:[A-Za-z]+ ){0,2}(consumer|gateway|run|trial|goroutine|request|node|client|row|decision|` +
	`command|read|admission|denial|write|connection|window|failure|call|member|key|EXEC)s\b|\(s\)`)

// TestCountsOfOne: every count the reports write reads in the singular
// when it is one.
func TestCountsOfOne(t *testing.T) {
	dr := fixedDrill()
	dr.Config.Consumers, dr.Config.Nodes, dr.Config.BreakerFailures = 1, 1, 1
	dr.Results = dr.Results[:1]

	rc := fixedRace()
	rc.Config.Concurrency, rc.Config.Trials = 1, 1
	rc.Results = rc.Results[:1]
	r := &rc.Results[0]
	r.Trials, r.LeakedTrials, r.TrialResults, r.StateMismatches, r.RetriesExhausted, r.TrialsOutlastingWindow = 1, 1, r.TrialResults[:1], 1, 1, 1
	r.Errors = 1
	held := fixedRace().Results[2]
	held.Trials, held.TrialsAboveLimit, held.TrialResults = 1, 1, held.TrialResults[:1]
	rc.Results = append(rc.Results, held)

	ex := explainedRace()
	for i := range ex.Results {
		if e := ex.Results[i].Explain; e != nil {
			e.Decisions, e.Commands, e.Reads, e.StaleReads, e.OverAdmitted, e.Unmatched = 1, 1, 1, 1, 1, 1
			e.AbortedExecs, e.Phantoms, e.PhantomDenials, e.ScriptCalls, e.Interleaved = 1, 1, 1, 1, 1
		}
	}

	sk := fixedSkew()
	sk.Config.Clients, sk.Config.SkewsMillis = 1, []int64{0}
	sk.Rows = sk.Rows[:1]
	sk.Rows[0].Errors = 1

	cp := fixedCompare()
	c := &cp.Config
	c.BurstConcurrency, c.BurstTrials, c.AccuracyClients, c.AccuracyWindows, c.Keys, c.Connections = 1, 1, 1, 1, 1, 1
	for i := range cp.Results {
		cp.Results[i].AccuracyClients = 1
	}

	for _, f := range []reports.Format{reports.Table, reports.Markdown} {
		var b bytes.Buffer
		for _, err := range []error{reports.Drill(&b, dr, f, reports.Options{}), reports.Race(&b, rc, f, reports.Options{}),
			reports.Race(&b, ex, f, reports.Options{}), reports.Skew(&b, sk, f, reports.Options{}),
			reports.Compare(&b, cp, f, reports.Options{})} {
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range onePlural.FindAllString(b.String(), -1) {
			t.Errorf("%s: %q", f, m)
		}
	}
	var page bytes.Buffer
	err := reports.HTML(&page, reports.Page{Race: []reports.Named[race.Report]{{Name: "race.json", Result: rc}, {Name: "explained.json", Result: ex}},
		Compare: []reports.Named[compare.Report]{{Name: "compare.json", Result: cp}}, Skew: []reports.Named[skew.Report]{{Name: "skew.json", Result: sk}},
		Bench: []reports.Named[bench.Result]{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range onePlural.FindAllString(page.String(), -1) {
		t.Errorf("html: %q", m)
	}
}
