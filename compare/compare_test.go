package compare_test

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

var srv *redisrun.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

func config(t *testing.T, addr string) compare.Config {
	t.Helper()
	return compare.Config{
		Redis:      &redis.UniversalOptions{Addrs: []string{addr}, MaxRetries: -1},
		Algorithms: algorithms.Algorithms(),
		// A window long beside what the race detector on a loaded machine
		// takes to make a burst's decisions; the workloads but throughput
		// run on a simulated clock, so it costs no time.
		Policy:      algorithms.Policy{Limit: 20, Window: 10 * time.Second},
		Consumer:    redistest.Prefix(t),
		Connections: 8,
		Keys:        200,
		Duration:    200 * time.Millisecond,
		Seed:        1,
		// Enough decisions to judge (a few thousand per algorithm), few
		// enough for the race detector.
		AccuracyClients: 10,
	}
}

func byName(rep compare.Report) map[string]compare.Result {
	m := map[string]compare.Result{}
	for _, r := range rep.Results {
		m[r.Algorithm] = r
	}
	return m
}

func TestCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	c := redistest.Client(t, srv)
	cfg := config(t, srv.Addr)
	rep, err := compare.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := byName(rep)
	limit := cfg.Policy.Limit
	for _, r := range rep.Results {
		if r.BurstOverAdmitted == nil || *r.BurstOverAdmitted != 0 {
			t.Errorf("%s: burst over-admitted %v", r.Algorithm, r.BurstOverAdmitted)
		}
		if r.OpsPerSec == nil || *r.OpsPerSec <= 0 || r.LatencyMicros == nil || r.LatencyMicros.Count < 1 {
			t.Errorf("%s: no throughput measured", r.Algorithm)
		} else if l := *r.LatencyMicros; l.P50 < 1 || l.P50 > l.P99 || l.P99 > l.Max {
			t.Errorf("%s: latency_us %+v: want 1 µs ≤ p50 ≤ p99 ≤ max", r.Algorithm, l)
		}
		if r.RoundTrips == nil || *r.RoundTrips != 1 {
			t.Errorf("%s: %v round trips per decision, want 1 (one EVALSHA)", r.Algorithm, r.RoundTrips)
		}
		if r.RedisCommands == nil || *r.RedisCommands < 1 {
			t.Errorf("%s: %v Redis commands per decision, want at least 1 (the script reads its state)", r.Algorithm, deref(r.RedisCommands))
		}
		if r.AccuracyDecisions < 1000 || r.FalseAllowRate == nil {
			t.Errorf("%s: %d accuracy decisions", r.Algorithm, r.AccuracyDecisions)
		}
		if r.HammerMaxInWindow == nil || r.HammerLockedOut {
			t.Errorf("%s: hammer max %v, locked out %v", r.Algorithm, r.HammerMaxInWindow, r.HammerLockedOut)
		}
		if r.Recommendation == "" {
			t.Errorf("%s: no recommendation", r.Algorithm)
		}
	}
	if got := *res["fixed-window"].BoundaryMaxInWindow; got <= limit {
		t.Errorf("fixed-window admitted %d in one window across the boundary, want more than %d", got, limit)
	}
	for _, name := range []string{"sliding-log", "sliding-counter"} {
		if got := *res[name].BoundaryMaxInWindow; got > limit {
			t.Errorf("%s admitted %d in one window across the boundary, want at most %d", name, got, limit)
		}
	}
	log := res["sliding-log"]
	if *log.FalseAllowRate != 0 || *log.FalseDenyRate != 0 {
		t.Errorf("sliding-log is exact, yet false allow %v, false deny %v", *log.FalseAllowRate, *log.FalseDenyRate)
	}
	if *log.HammerMaxInWindow > limit {
		t.Errorf("sliding-log admitted %d in a window while hammered", *log.HammerMaxInWindow)
	}
	if b := log.BytesPerClient; b["10000"] < 10*b["10"] {
		t.Errorf("sliding-log memory does not grow with the limit: %v", b)
	}
	if b := res["sliding-counter"].BytesPerClient; b["10000"] > b["10"]+64 {
		t.Errorf("sliding-counter memory grows with the limit: %v", b)
	}
	if rep.PingOpsPerSec == nil || *rep.PingOpsPerSec <= 0 || rep.PingLatencyMicros == nil || rep.PingLatencyMicros.Count < 1 {
		t.Errorf("no PING ceiling")
	}
	if keys := c.Keys(context.Background(), "rl:{"+cfg.Consumer+"*").Val(); len(keys) != 0 {
		t.Errorf("left %d keys behind, e.g. %v", len(keys), keys[0])
	}
	for _, r := range rep.Results {
		t.Logf("%s", r.Recommendation)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestCompareOnCluster: every workload runs on a three-master Cluster with
// no CROSSSLOT error, and leaves no key behind.
func TestCompareOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	cl := redistest.Cluster(t, srv)
	cfg := config(t, cl.Addrs()[0])
	cfg.Redis = &redis.UniversalOptions{Addrs: cl.Addrs(), IsClusterMode: true, MaxRetries: -1}
	cfg.AccuracyClients = 5
	rep, err := compare.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if *r.BurstOverAdmitted != 0 || r.OpsPerSec == nil || r.BytesPerClient == nil {
			t.Errorf("%s: burst over %d, ops %v, memory %v", r.Algorithm, *r.BurstOverAdmitted, deref(r.OpsPerSec), r.BytesPerClient)
		}
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer c.Close()
	var left atomic.Int64
	_ = c.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
		left.Add(n.DBSize(ctx).Val())
		return nil
	})
	if left.Load() != 0 {
		t.Errorf("%d keys left on the cluster", left.Load())
	}
}

// TestHammerFindsLockOut: a client retrying every 100 ms after hammering is
// let back in by the sliding log, and never by the log that counts denials.
func TestHammerFindsLockOut(t *testing.T) {
	redistest.Client(t, srv)
	cfg := config(t, srv.Addr)
	cfg.Algorithms = []string{"sliding-log", "lua-count-denied"}
	cfg.Workloads = []string{compare.Hammer}
	cfg.Policy = algorithms.Policy{Limit: 5, Window: time.Second}
	rep, err := compare.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := byName(rep)
	if r := res["sliding-log"]; r.HammerLockedOut || r.HammerRecoveryMillis == nil {
		t.Errorf("sliding-log: locked out %v, recovery %v", r.HammerLockedOut, deref(r.HammerRecoveryMillis))
	}
	if r := res["lua-count-denied"]; !r.HammerLockedOut || r.HammerRecoveryMillis != nil {
		t.Errorf("lua-count-denied: locked out %v, recovery %v; want a lock-out", r.HammerLockedOut, deref(r.HammerRecoveryMillis))
	}
}

// TestSimulatedClockOutrun: when decisions take longer than the simulated
// window allows, the workload says so instead of measuring expired keys.
func TestSimulatedClockOutrun(t *testing.T) {
	redistest.Client(t, srv)
	cfg := config(t, srv.Addr)
	cfg.Algorithms = []string{"sliding-log"}
	cfg.Workloads = []string{compare.Boundary}
	cfg.Policy = algorithms.Policy{Limit: 5000, Window: 10 * time.Millisecond}
	_, err := compare.Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "use a longer --window or a lower --limit") {
		t.Fatalf("err = %v, want the workload to refuse", err)
	}
}

// TestUnreachableRedis: a closed port fails before any workload, with the
// address in the error.
func TestUnreachableRedis(t *testing.T) {
	cfg := config(t, "127.0.0.1:1")
	cfg.Redis.DialTimeout = time.Second
	var started atomic.Bool
	cfg.Progress = func(string, string) { started.Store(true) }
	_, err := compare.Run(context.Background(), cfg)
	if err == nil || !strings.HasPrefix(err.Error(), "compare: cannot reach Redis at 127.0.0.1:1: ") {
		t.Fatalf("err = %v, want compare: cannot reach Redis at 127.0.0.1:1", err)
	}
	if started.Load() {
		t.Error("a workload started on an unreachable server")
	}
}

// TestCompareThroughputBatched: with Batch, the throughput workload runs
// once more with the decisions batched, for every algorithm: its figures
// beside the unbatched ones. A pipeline holds at least one decision, so
// there is at most one round trip each. Neither run leaves a key behind.
func TestCompareThroughputBatched(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	c := redistest.Client(t, srv)
	cfg := config(t, srv.Addr)
	cfg.Workloads, cfg.Batch = []string{compare.Throughput}, 16
	rep, err := compare.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Config.Batch != 16 || len(rep.Results) != len(cfg.Algorithms) {
		t.Fatalf("config %+v, %d results", rep.Config, len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.OpsPerSec == nil || r.BatchedOpsPerSec == nil || *r.BatchedOpsPerSec <= 0 || r.BatchedLatencyMicros == nil || r.BatchedLatencyMicros.Count < 1 {
			t.Errorf("%s: no batched throughput measured: %v", r.Algorithm, deref(r.BatchedOpsPerSec))
		}
		if rt := r.BatchedRoundTrips; rt == nil || *rt <= 0 || *rt > 1 {
			t.Errorf("%s: batched, %v round trips per decision, want more than 0 and at most 1", r.Algorithm, deref(rt))
		} else {
			t.Logf("%s: %.0f decisions/s unbatched, %.0f batched at %.2f round trips a decision",
				r.Algorithm, *r.OpsPerSec, *r.BatchedOpsPerSec, *rt)
		}
	}
	if left := c.Keys(context.Background(), "*"+cfg.Consumer+"*").Val(); len(left) > 0 {
		t.Errorf("%d keys left behind, such as %s", len(left), left[0])
	}
}
