package drill_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // the failover client logs what it follows
	os.Exit(m.Run())
}

// need skips (or, under CI, fails) a test without the servers it needs.
func need(t *testing.T, engine, fault string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the drills run for seconds")
	}
	bins := []string{"redis-server"}
	if fault == drill.Failover {
		bins = append(bins, "redis-sentinel")
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			if redistest.InCI() {
				t.Fatalf("under CI: %v", err)
			}
			t.Skip(err)
		}
	}
	if engine == edge.EngineOpenResty {
		if _, _, err := edge.FindNginx(); err != nil {
			if redistest.InCI() {
				t.Fatalf("under CI: %v", err)
			}
			t.Skip(err)
		}
	}
}

// TestDrills runs each fault once per engine (edge's two and the rate limit
// service), with small durations, and holds the JSON's invariants.
func TestDrills(t *testing.T) {
	small := drill.Config{Steady: 500 * time.Millisecond, FaultDuration: 1500 * time.Millisecond, After: time.Second,
		Consumers: 5, Timeout: 500 * time.Millisecond, DownAfter: 500 * time.Millisecond}
	for _, tc := range []struct {
		fault, mode string
		engines     []string
		nodes       int
		batch       int // the go engine's and the rls service's --redis-batch
		check       func(t *testing.T, c drill.Settings, r drill.Row)
	}{
		{drill.ScriptFlush, "open", all, 1, 1, scriptFlushed},
		// Batched: a pipeline's NOSCRIPTs load the script once and only
		// those commands go again.
		{drill.ScriptFlush, "open", []string{edge.EngineGo, drill.EngineRLS}, 1, 16, scriptFlushed},
		{drill.Hang, "closed", all, 1, 1, hangClosed},
		// Batched: the decisions waiting while Redis hangs share pipelines
		// that all time out; none is replayed once Redis is back.
		{drill.Hang, "closed", []string{edge.EngineGo, drill.EngineRLS}, 1, 16, hangClosed},
		{drill.Latency, "open", all, 1, 1, func(t *testing.T, _ drill.Settings, r drill.Row) {
			if r.Errors != 0 || r.OverAdmitted != 0 || r.P50Millis < 20 {
				t.Errorf("latency 20ms under a 3s timeout: %d errors, %d over-admitted, p50 %gms; want none, and the latency seen",
					r.Errors, r.OverAdmitted, r.P50Millis)
			}
		}},
		{drill.Reset, "open", all, 1, 1, func(t *testing.T, _ drill.Settings, r drill.Row) {
			if r.Errors == 0 || r.RecoverMillis == nil {
				t.Errorf("reset: %d errors, recover %v; want the fault seen and left", r.Errors, r.RecoverMillis)
			}
		}},
		{drill.Restart, "open", all, 1, 1, func(t *testing.T, _ drill.Settings, r drill.Row) {
			if r.Errors == 0 || r.OverAdmitted == 0 || r.RecoverMillis == nil {
				t.Errorf("restart, fail open: %d errors, %d over-admitted, recover %v; want the lost state seen", r.Errors, r.OverAdmitted, r.RecoverMillis)
			}
		}},
		{drill.OOM, "closed", all, 1, 1, oomClosed},
		// Batched: each command of a pipeline gets its own OOM error.
		{drill.OOM, "closed", []string{edge.EngineGo, drill.EngineRLS}, 1, 16, oomClosed},
		{drill.Hang, "local", []string{edge.EngineGo}, 2, 1, func(t *testing.T, c drill.Settings, r drill.Row) {
			// Each transition (into the fault, out of it) may admit up to the
			// limit beyond the window's, per consumer: the fleet's share.
			share := 2 * c.Limit * int64(c.Consumers)
			if r.OverAdmitted > share || r.Errors == 0 {
				t.Errorf("hang, local, 2 nodes: %d over-admitted, over the share %d (%d errors)", r.OverAdmitted, share, r.Errors)
			}
		}},
		{drill.Failover, "closed", []string{edge.EngineGo, drill.EngineRLS}, 1, 1, failoverClosed},
		{drill.Failover, "closed", []string{edge.EngineGo, drill.EngineRLS}, 1, 16, failoverClosed},
	} {
		for _, engine := range tc.engines {
			name := tc.fault + "/" + tc.mode + "/" + engine
			if tc.batch > 1 {
				name += fmt.Sprintf("/batch %d", tc.batch)
			}
			t.Run(name, func(t *testing.T) {
				need(t, engine, tc.fault)
				t.Parallel()
				c := small
				c.Engines, c.Faults, c.Modes, c.Nodes = []string{engine}, []string{tc.fault}, []string{tc.mode}, tc.nodes
				c.Latencies = []time.Duration{20 * time.Millisecond}
				c.Batch = tc.batch
				if tc.fault == drill.Latency || tc.fault == drill.ScriptFlush {
					// Far above the latency: the whole suite shares 2 cores under
					// -race, and a decision that times out fails open, which these
					// faults must not be confused with.
					c.Timeout = 3 * time.Second
				}
				if tc.fault == drill.Failover {
					c.FaultDuration = 5 * time.Second // what the sentinel may take
				}
				rep, err := drill.Run(context.Background(), c)
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Results) != 1 {
					t.Fatalf("%d rows, want 1 (skipped: %v)", len(rep.Results), rep.Skipped)
				}
				r := rep.Results[0]
				t.Logf("%s: %+v detect %v recover %v", r.Name(), r, ptr(r.DetectMillis), ptr(r.RecoverMillis))
				if rep.Config.Batch != tc.batch {
					t.Fatalf("the report says batch %d, want %d", rep.Config.Batch, tc.batch)
				}
				if r.Decisions < 50 || r.Fault != tc.fault || r.Engine != engine || r.OnRedisError != tc.mode {
					t.Fatalf("row %+v", r)
				}
				// The timeline adds up to the row, and holds the fault.
				var sum drill.TimelineInterval
				for _, iv := range r.Timeline.Intervals {
					sum.Decisions, sum.Admitted, sum.Errors = sum.Decisions+iv.Decisions, sum.Admitted+iv.Admitted, sum.Errors+iv.Errors
					sum.OverAdmitted, sum.WronglyDenied = sum.OverAdmitted+iv.OverAdmitted, sum.WronglyDenied+iv.WronglyDenied
				}
				if sum.Decisions != r.Decisions || sum.Admitted != r.Admitted || sum.Errors != r.Errors ||
					sum.OverAdmitted != r.OverAdmitted || sum.WronglyDenied != r.WronglyDenied ||
					(r.Timeline.FaultToMillis-r.Timeline.FaultFromMillis-r.FaultMillis)/2 != 0 { // whole ms, each rounded down
					t.Errorf("timeline sums %+v, fault %d–%d ms; the row %+v", sum, r.Timeline.FaultFromMillis, r.Timeline.FaultToMillis, r)
				}
				tc.check(t, rep.Config, r)
			})
		}
	}
}

var all = drill.Engines()

// hangClosed: Redis hung, failing closed, admits nothing beyond the
// guarantee, and the fault is seen and left.
func hangClosed(t *testing.T, _ drill.Settings, r drill.Row) {
	t.Helper()
	if r.OverAdmitted != 0 || r.Errors == 0 || r.DetectMillis == nil || r.RecoverMillis == nil {
		t.Errorf("hang, fail closed: %d over-admitted, %d errors, detect %v, recover %v; want none over, the fault seen and left",
			r.OverAdmitted, r.Errors, r.DetectMillis, r.RecoverMillis)
	}
}

// oomClosed: Redis full, failing closed, admits nothing beyond the
// guarantee, and the fault is seen and left.
func oomClosed(t *testing.T, _ drill.Settings, r drill.Row) {
	t.Helper()
	if r.OverAdmitted != 0 || r.Errors == 0 || r.RecoverMillis == nil {
		t.Errorf("full Redis, fail closed: %d over-admitted, %d errors, recover %v", r.OverAdmitted, r.Errors, r.RecoverMillis)
	}
}

// failoverClosed: the replica promoted, failing closed, admits nothing
// beyond the guarantee, and the gateway follows it.
func failoverClosed(t *testing.T, _ drill.Settings, r drill.Row) {
	t.Helper()
	if r.FailoverMillis == nil || r.RecoverMillis == nil {
		t.Fatalf("failover: promoted after %v, recovered %v", r.FailoverMillis, r.RecoverMillis)
	}
	// Recovered within the sentinel's failover time plus a margin.
	if *r.RecoverMillis > 2000 || r.OverAdmitted != 0 {
		t.Errorf("failover after %d ms: recovered %d ms after it, %d over-admitted", *r.FailoverMillis, *r.RecoverMillis, r.OverAdmitted)
	}
}

// scriptFlushed: SCRIPT FLUSH costs nothing: the script is loaded again.
func scriptFlushed(t *testing.T, _ drill.Settings, r drill.Row) {
	t.Helper()
	if r.OverAdmitted != 0 || r.Errors != 0 || r.WronglyDenied != 0 {
		t.Errorf("SCRIPT FLUSH: %d over-admitted, %d errors, %d wrongly denied; want none", r.OverAdmitted, r.Errors, r.WronglyDenied)
	}
}

func ptr(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestValidate: bad input names the field, before anything starts.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c     drill.Config
		field string
	}{
		{drill.Config{Faults: []string{"flood"}}, "Faults"},
		{drill.Config{Engines: []string{"envoy"}}, "Engines"},
		{drill.Config{Modes: []string{"maybe"}}, "Modes"},
		{drill.Config{FaultDuration: time.Millisecond}, "FaultDuration"},
		{drill.Config{Consumers: 100_000}, "Consumers"},
		{drill.Config{Nodes: 20}, "Nodes"},
		{drill.Config{Latencies: []time.Duration{1500 * time.Microsecond}}, "Latencies"},
		{drill.Config{Algorithm: "naive"}, "Algorithm"},
		{drill.Config{Batch: -1}, "Batch"},
		{drill.Config{Batch: drill.MaxBatch + 1}, "Batch"},
	} {
		_, err := drill.Run(context.Background(), tc.c)
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error in %s", tc.c, err, tc.field)
		}
	}
}
