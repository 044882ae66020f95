package reports_test

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/reports"
)

func count(n int64) *int64 { return &n }

// explainedRace is a race of 6 goroutines at a limit of 2, naive and lua,
// each explained, as a run would return it. The naive trace: g1, g2 and g3
// read 0; g1's INCR makes it 1, g2's 2, g3's 3 (over the limit, on a read
// g2 shared); g4 read 1 after g1's INCR and makes it 4; g5 and g6 read 3
// and 4 and are denied. Its trace is cut to 14 of 17 commands. The lua
// trace: each call's commands follow it; the first two admit.
func explainedRace() race.Report {
	naiveKey := "rl:{race-1a2b3c4d-naive-explain}:naive"
	luaKey := "rl:{race-1a2b3c4d-lua-explain}:lua"
	naive := []race.Event{
		{Index: 1, Micros: 3, Goroutine: "g1", Command: "PTTL " + naiveKey, Reply: "-2"},
		{Index: 2, Micros: 8, Goroutine: "g2", Command: "GET " + naiveKey, Reply: "(nil)", Mark: "stale"},
		{Index: 3, Micros: 11, Goroutine: "g2", Command: "PTTL " + naiveKey, Reply: "-2"},
		{Index: 4, Micros: 15, Goroutine: "g3", Command: "GET " + naiveKey, Reply: "(nil)", Mark: "stale"},
		{Index: 5, Micros: 18, Goroutine: "g3", Command: "PTTL " + naiveKey, Reply: "-2"},
		{Index: 6, Micros: 40, Goroutine: "g1", Command: "INCR " + naiveKey, Reply: "1"},
		{Index: 7, Micros: 44, Goroutine: "g1", Command: "PEXPIRE " + naiveKey + " 10000", Reply: "true"},
		{Index: 8, Micros: 52, Goroutine: "g4", Command: "GET " + naiveKey, Reply: "1", Mark: "stale"},
		{Index: 9, Micros: 55, Goroutine: "g4", Command: "PTTL " + naiveKey, Reply: "9999"},
		{Index: 10, Micros: 61, Goroutine: "g2", Command: "INCR " + naiveKey, Reply: "2"},
		{Index: 11, Micros: 66, Goroutine: "g3", Command: "INCR " + naiveKey, Reply: "3", Mark: "over"},
		{Index: 12, Micros: 70, Goroutine: "g5", Command: "GET " + naiveKey, Reply: "3"},
		{Index: 13, Micros: 73, Goroutine: "g5", Command: "PTTL " + naiveKey, Reply: "9998"},
		{Index: 14, Micros: 79, Goroutine: "g4", Command: "INCR " + naiveKey, Reply: "4", Mark: "over"},
	}
	sha := "9061a439f90da1c320146b60c0a2ab2dce1e8c9c"
	var lua []race.Event
	us := int64(0)
	add := func(g, cmd, reply string, script bool) {
		lua = append(lua, race.Event{Index: len(lua), Micros: us, Goroutine: g, Command: cmd, Reply: reply, Script: script})
		us += 3
	}
	for i, g := range []string{"g2", "g5", "g1", "g3", "g4", "g6"} {
		member := "5f1e0c2a9b3d4e6f-" + string(rune('1'+i))
		reply := []string{"[1 1 0]", "[1 0 0]", "[0 0 10000]", "[0 0 10000]", "[0 0 10000]", "[0 0 10000]"}[i]
		add(g, "EVALSHA "+sha+" 1 "+luaKey+" 2 10000 1700000000000 "+member, reply, false)
		add(g, "ZRANGE "+luaKey+" -1 -1 WITHSCORES", "", true)
		add(g, "ZREMRANGEBYSCORE "+luaKey+" -inf 1699999990000", "", true)
		add(g, "ZCARD "+luaKey, "", true)
		if i < 2 {
			add(g, "ZADD "+luaKey+" 1700000000000 "+member, "", true)
			add(g, "PEXPIRE "+luaKey+" 10000", "", true)
		}
		us += 20
	}
	luaLanes := lanesOf(lua)
	lua = lua[:14]
	naiveLanes := lanesOf(slices.Concat([]race.Event{{Micros: 0, Goroutine: "g1", Command: "GET " + naiveKey}}, naive,
		[]race.Event{{Micros: 84, Goroutine: "g6", Command: "GET " + naiveKey}, {Micros: 88, Goroutine: "g6", Command: "PTTL " + naiveKey}}))
	trial := func(admitted, state, trips int64) race.Trial {
		return race.Trial{Admitted: admitted, Expected: 2, Bound: 2, Minimum: 2, ClockFromMillis: 1_700_000_000_000,
			ClockToMillis: 1_700_000_000_001, SpanMicros: 130, RoundTrips: trips, ReportedRoundTrips: trips,
			ReleaseSpreadMicros: 20, ElapsedMicros: 140, StateVerified: truth(state == admitted), State: state}
	}
	result := func(r race.Result, t race.Trial, ex race.Explanation) race.Result {
		t.LatencyMicros = race.TrialLatency{P50: r.LatencyMicros.P50, P99: r.LatencyMicros.P99, Max: r.LatencyMicros.Max}
		r.Trials, r.Requests, r.Admitted, r.ExpectedAdmitted = 1, 6, t.Admitted, t.Expected
		r.OverAdmitted = max(t.Admitted-t.Expected, 0)
		if r.OverAdmitted > 0 {
			r.LeakedTrials = 1
		}
		r.WorstTrialAdmitted, r.WorstTrialExpected, r.MaxTrialExpected = t.Admitted, t.Expected, t.Expected
		r.RoundTrips, r.StateVerified, r.TrialResults, r.Explain = t.RoundTrips, t.StateVerified, []race.Trial{t}, &ex
		return r
	}
	return race.Report{
		Command: "race",
		Redis:   redisrun.Info{Mode: "ephemeral", Version: "7.0.15", Addr: "127.0.0.1:6390"},
		Config: race.Settings{Limiters: []string{"naive", "lua"}, Concurrency: 6, Limit: 2, WindowMillis: 10000, Trials: 1,
			RequestsPerWorker: 1, Clock: "caller", WatchRetries: 100},
		ElapsedMillis: 48,
		Results: []race.Result{
			result(race.Result{Limiter: "naive", Description: "GET the counter, compare, INCR: racy by design",
				Guarantee: "expiry-windows", GuaranteeRule: "at most 2 per 10s key lifetime", Clock: "redis",
				ReleaseSpreadMicros: race.Spread{P50: 20, Max: 20}, ElapsedMillis: 1,
				LatencyMicros: hdr.Percentiles{P50: 95, P90: 120, P95: 120, P99: 120, P999: 120, Max: 120, Count: 6}},
				trial(5, 5, 12), // 6 reads, 5 INCRs, 1 PEXPIRE
				race.Explanation{Node: "127.0.0.1:6390", Key: naiveKey, Trial: trial(4, 4, 11), Decisions: 6, Commands: 17,
					Counts: map[string]int{"GET": 6, "PTTL": 6, "INCR": 4, "PEXPIRE": 1}, SpanMicros: 88,
					Reads: 6, StaleReads: 3, Admitted: 4, OverAdmitted: 2,
					Moments: []race.Moment{
						{Kind: race.MomentOver, Goroutine: "g3",
							Read:       &race.Step{Event: 4, Micros: 15, Goroutine: "g3", Command: "GET", Value: count(0)},
							Write:      &race.Step{Event: 11, Micros: 66, Goroutine: "g3", Command: "INCR", Value: count(3)},
							OtherRead:  &race.Step{Event: 2, Micros: 8, Goroutine: "g2", Command: "GET", Value: count(0)},
							OtherWrite: &race.Step{Event: 10, Micros: 61, Goroutine: "g2", Command: "INCR", Value: count(2)},
							Admission:  3, Allowed: 2, WritesBetween: 2},
						{Kind: race.MomentOver, Goroutine: "g4",
							Read:      &race.Step{Event: 8, Micros: 52, Goroutine: "g4", Command: "GET", Value: count(1)},
							Write:     &race.Step{Event: 14, Micros: 79, Goroutine: "g4", Command: "INCR", Value: count(4)},
							Admission: 4, Allowed: 2, WritesBetween: 2},
					},
					Events: naive, Lanes: naiveLanes}),
			result(race.Result{Limiter: "lua", Atomic: true, Description: "atomic sliding-window log in one Lua script (sliding-log)",
				Guarantee: "sliding-window", GuaranteeRule: "at most 2 in any 10s span", Clock: "caller",
				ReleaseSpreadMicros: race.Spread{P50: 18, Max: 18}, ElapsedMillis: 1,
				LatencyMicros: hdr.Percentiles{P50: 80, P90: 110, P95: 110, P99: 110, P999: 110, Max: 110, Count: 6}},
				trial(2, 2, 6),
				race.Explanation{Node: "127.0.0.1:6390", Key: luaKey, Trial: trial(2, 2, 6), Decisions: 6, Commands: 32,
					Counts:     map[string]int{"EVALSHA": 6, "ZRANGE": 10, "ZREMRANGEBYSCORE": 6, "ZCARD": 6, "ZADD": 2, "PEXPIRE": 2},
					SpanMicros: 300, Reads: 6, Admitted: 2, ScriptCalls: 6,
					Moments: []race.Moment{{Kind: race.MomentAtomic, Goroutine: "g2",
						Call:  &race.Step{Event: 0, Micros: 0, Goroutine: "g2", Command: "EVALSHA"},
						Read:  &race.Step{Event: 3, Micros: 9, Goroutine: "g2", Command: "ZCARD"},
						Write: &race.Step{Event: 4, Micros: 12, Goroutine: "g2", Command: "ZADD"}}},
					Events: lua, Lanes: luaLanes}),
		},
	}
}

// lanesOf sorts a whole trace into one lane per goroutine, as a run does.
func lanesOf(events []race.Event) []race.Lane {
	roles := map[string]string{"GET": race.RoleRead, "ZCARD": race.RoleRead, "INCR": race.RoleWrite, "ZADD": race.RoleWrite,
		"EVALSHA": race.RoleCall}
	var lanes []race.Lane
	for g := 1; ; g++ {
		l := race.Lane{Goroutine: fmt.Sprintf("g%d", g)}
		for _, e := range events {
			if e.Goroutine != l.Goroutine || e.Script {
				continue
			}
			name, _, _ := strings.Cut(e.Command, " ")
			role := roles[name]
			if role == "" {
				role = race.RoleOther
			}
			l.Commands = append(l.Commands, race.LaneCommand{Micros: e.Micros, Name: name, Role: role, Mark: e.Mark})
		}
		if l.Commands == nil {
			return lanes
		}
		lanes = append(lanes, l)
	}
}

// TestExplainFixtureAddsUp: the explanations add up as a run's do: the
// commands counted are the trace's, the marks its counts, and the trace's
// admissions the trial's and its key's.
func TestExplainFixtureAddsUp(t *testing.T) {
	for _, r := range explainedRace().Results {
		ex := r.Explain
		sum := 0
		for _, n := range ex.Counts {
			sum += n
		}
		marks := map[string]int64{}
		for i, e := range ex.Events {
			marks[e.Mark]++
			if i > 0 && (e.Index <= ex.Events[i-1].Index || e.Micros < ex.Events[i-1].Micros) {
				t.Errorf("%s: event %d out of order", r.Limiter, e.Index)
			}
		}
		last := ex.Events[len(ex.Events)-1]
		if sum != ex.Commands || last.Index >= ex.Commands || last.Micros > ex.SpanMicros {
			t.Errorf("%s: counts sum to %d of %d commands; last event %d at %dµs of %dµs", r.Limiter, sum, ex.Commands, last.Index, last.Micros, ex.SpanMicros)
		}
		if marks["over"] != ex.OverAdmitted || marks["stale"] != ex.StaleReads {
			t.Errorf("%s: %d over and %d stale marked, %d and %d counted", r.Limiter, marks["over"], marks["stale"], ex.OverAdmitted, ex.StaleReads)
		}
		if ex.Admitted != ex.Trial.Admitted || ex.Trial.State != ex.Admitted || ex.OverAdmitted != max(ex.Admitted-ex.Trial.Expected, 0) {
			t.Errorf("%s: the trace admits %d (%d over), the trial %d (key %d)", r.Limiter, ex.Admitted, ex.OverAdmitted, ex.Trial.Admitted, ex.Trial.State)
		}
		laneMarks, calls := map[string]int64{}, int64(0)
		for _, l := range ex.Lanes {
			for _, c := range l.Commands {
				laneMarks[c.Mark]++
				if c.Role == race.RoleCall {
					calls++
				}
			}
		}
		if int64(len(ex.Lanes)) != ex.Decisions || calls != ex.ScriptCalls || laneMarks["over"] != ex.OverAdmitted || laneMarks["stale"] != ex.StaleReads {
			t.Errorf("%s: %d lanes for %d decisions, %d calls of %d, marks %v", r.Limiter, len(ex.Lanes), ex.Decisions, calls, ex.ScriptCalls, laneMarks)
		}
	}
}

func TestExplainGolden(t *testing.T) {
	goldens(t, "race_explain", func(w io.Writer, f reports.Format) error {
		return reports.Race(w, explainedRace(), f, reports.Options{})
	})
}

// TestExplainSkipped: a refused MONITOR is said in place of the trace; on
// the embedded server, that it has none.
func TestExplainSkipped(t *testing.T) {
	for _, tc := range []struct {
		mode, skipped string
		want          []string
	}{
		{"external", "the server refused MONITOR (NOPERM this user has no permissions to run the 'monitor' command)",
			[]string{"naive, explained", "No trace: the server refused MONITOR (NOPERM this user has no permissions to run the 'monitor' command)."}},
		{"embedded", "the server does not support MONITOR (ERR unknown command `monitor`, with args beginning with: )",
			[]string{"No trace: the server does not support MONITOR", "The embedded Redis (miniredis) has no MONITOR"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			rep := explainedRace()
			rep.Redis.Mode = tc.mode
			rep.Results[0].Explain = &race.Explanation{Skipped: tc.skipped}
			rep.Results = rep.Results[:1]
			for _, f := range []reports.Format{reports.Table, reports.Markdown} {
				var buf bytes.Buffer
				if err := reports.Race(&buf, rep, f, reports.Options{}); err != nil {
					t.Fatal(err)
				}
				for _, w := range tc.want {
					if !strings.Contains(buf.String(), w) {
						t.Errorf("%s: no %q in\n%s", f, w, buf.String())
					}
				}
				if strings.Contains(buf.String(), "+µs") {
					t.Errorf("%s: a trace header with no trace:\n%s", f, buf.String())
				}
			}
		})
	}
}

// TestExplainColor: the marks are coloured only when colour is asked for,
// in the colours of testdata/race_explain.color.golden.
func TestExplainColor(t *testing.T) {
	colorGolden(t, "race_explain", explainedRace())
}

// TestExplainMore: past the moments told, each kind says how many more
// the trial had, from its counts, not from the moments kept.
func TestExplainMore(t *testing.T) {
	rep := explainedRace()
	ex := rep.Results[0].Explain
	ex.OverAdmitted = 95
	ex.Moments = append(ex.Moments, ex.Moments...) // 4 kept, 3 told
	for _, f := range []reports.Format{reports.Table, reports.Markdown} {
		var buf bytes.Buffer
		if err := reports.Race(&buf, rep, f, reports.Options{}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "… and 92 more admissions beyond the limit.") || strings.Contains(buf.String(), "more script calls") {
			t.Errorf("%s: no count of the admissions not told:\n%s", f, buf.String())
		}
	}
}

// TestExplainSaysWhenTheTraceIsShort: a trace that shows fewer admissions
// than the trial counted says it is not the whole trial.
func TestExplainSaysWhenTheTraceIsShort(t *testing.T) {
	rep := explainedRace()
	rep.Results[0].Explain.Admitted = 3
	var buf bytes.Buffer
	if err := reports.Race(&buf, rep, reports.Table, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "the trial counted 4 admitted and the key held 4, where the trace shows 3: it is not the whole trial") {
		t.Fatalf("the summary does not say the trace is short:\n%s", buf.String())
	}
	buf.Reset()
	if err := reports.Race(&buf, explainedRace(), reports.Table, reports.Options{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "not the whole trial") {
		t.Fatalf("a whole trace said to be short:\n%s", buf.String())
	}
}
