package race_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/race"
)

// defaultFaults is the command's default mix.
var defaultFaults = race.Faults{Kill: 0.2, LoseRelease: 0.1, RetryRelease: 0.1}

// inFlightConfig races the three in-flight limiters with a short hold and
// a short lease, so that the trials are quick; the lease's TTL is waited
// for by polling the key.
func inFlightConfig(t testing.TB, faults race.Faults) race.Config {
	t.Helper()
	cfg := config(t, srv.Addr, algorithms.SemaphoreNames()...)
	cfg.Concurrency = 20
	cfg.RequestsPerWorker = 4
	cfg.Trials = 3
	cfg.Hold = 20 * time.Millisecond
	cfg.LeaseTTL = 300 * time.Millisecond
	cfg.Faults = faults
	return cfg
}

func inFlightByName(rep race.Report) map[string]race.InFlightResult {
	m := map[string]race.InFlightResult{}
	for _, r := range rep.InFlight {
		m[r.Limiter] = r
	}
	return m
}

// TestInFlightRace: with the default faults, in every trial, the naive
// semaphore holds more than the limit at once, the incr one leaks the
// slots of its killed holders and lost releases (less those its resent
// releases freed twice, exactly), and the lease holds no more than the
// limit and leaks nothing once its TTL has passed, nor denies a request
// when fewer than the limit could have been held. The barriers make the
// naive one's race certain: every goroutine reads the count before any
// writes it, and the first round's holders are held together.
func TestInFlightRace(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	cfg := race.WithFirstRoundTogether(race.WithReadBarrier(inFlightConfig(t, defaultFaults)))
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 0 || len(rep.InFlight) != 3 || rep.Config.InFlight == nil {
		t.Fatalf("%d rate results, %d in-flight, settings %+v; want the three in-flight limiters", len(rep.Results), len(rep.InFlight), rep.Config.InFlight)
	}
	checkInFlight(t, rep)
	got := inFlightByName(rep)
	for i, tr := range got["semaphore-naive"].TrialResults {
		// Every goroutine read 0 before any INCR: all were admitted, and held together.
		if !tr.Over || tr.MostHeld != int64(cfg.Concurrency) {
			t.Errorf("semaphore-naive trial %d: at most %d held at once, over %t; want all %d", i+1, tr.MostHeld, tr.Over, cfg.Concurrency)
		}
	}
	for i, tr := range got["semaphore-incr"].TrialResults {
		if tr.Leaked < 1 || tr.Faults.Killed < 1 {
			t.Errorf("semaphore-incr trial %d: leaked %d with %d killed, want a leak", i+1, tr.Leaked, tr.Faults.Killed)
		}
	}
	lease := got["semaphore-lease"]
	for i, tr := range lease.TrialResults {
		if tr.Over || tr.MostHeld > cfg.Policy.Limit || tr.Leaked != 0 || tr.WrongfulDenials != 0 {
			t.Errorf("semaphore-lease trial %d: %d held at once, leaked %d after the TTL, %d wrongful denials; want at most %d, 0, 0",
				i+1, tr.MostHeld, tr.Leaked, tr.WrongfulDenials, cfg.Policy.Limit)
		}
	}
	leaks := strings.Join(rep.Leaked(), "; ")
	if !strings.Contains(leaks, "semaphore-naive held") || !strings.Contains(leaks, "semaphore-incr leaked") || strings.Contains(leaks, "semaphore-lease") {
		t.Errorf("Leaked() = %q: want naive over, incr leaking, the lease in neither", leaks)
	}
}

// TestInFlightRaceWithoutFaults: with no fault, no limiter leaks a slot;
// the atomic ones never hold more than the limit; and the lease never
// denies when fewer than the limit could have been held.
func TestInFlightRaceWithoutFaults(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	rep, err := race.Run(context.Background(), inFlightConfig(t, race.Faults{}))
	if err != nil {
		t.Fatal(err)
	}
	checkInFlight(t, rep)
	for _, r := range rep.InFlight {
		if r.Leaked != 0 || r.FreedTwice != 0 || r.HeldAtEnd != 0 || r.Faults != (race.FaultCounts{}) {
			t.Errorf("%s: leaked %d, freed twice %d, %d held at the end, faults %+v; want none", r.Limiter, r.Leaked, r.FreedTwice, r.HeldAtEnd, r.Faults)
		}
		if r.Limiter != "semaphore-naive" && r.OverTrials != 0 {
			t.Errorf("%s: over the limit in %d trials", r.Limiter, r.OverTrials)
		}
	}
	if w := inFlightByName(rep)["semaphore-lease"].WrongfulDenials; w != 0 {
		t.Errorf("semaphore-lease: %d wrongful denials", w)
	}
}

// checkInFlight asserts what every trial of every in-flight limiter shows,
// whatever the scheduling: the counts add up, no request failed, the
// faults dealt are the shares of the admissions, the counters' keys end at
// exactly what the faults left (a killed holder's and a lost release's
// slot each, less one per release sent twice), and the lease is never over
// the limit.
func checkInFlight(t *testing.T, rep race.Report) {
	t.Helper()
	limit := rep.Config.Limit
	faults := rep.Config.InFlight.Faults
	for _, r := range rep.InFlight {
		if r.Trials != rep.Config.Trials || len(r.TrialResults) != r.Trials || r.Errors != 0 || r.Limit != limit {
			t.Errorf("%s: %d trials (%d results), %d errors, limit %d", r.Limiter, r.Trials, len(r.TrialResults), r.Errors, r.Limit)
		}
		var admitted, leaked, freed int64
		for i, tr := range r.TrialResults {
			admitted += tr.Admitted
			if tr.Requests != tr.Admitted+tr.Denied+tr.Errors || tr.Admitted < 1 {
				t.Errorf("%s trial %d: %d requests, %d admitted, %d denied, %d errors", r.Limiter, i+1, tr.Requests, tr.Admitted, tr.Denied, tr.Errors)
			}
			// Each kind owed ⌈admitted × share⌉, a kill never delayed.
			if want := ceilShare(tr.Admitted, faults.Kill); tr.Faults.Killed != want {
				t.Errorf("%s trial %d: %d killed of %d admitted, want %d", r.Limiter, i+1, tr.Faults.Killed, tr.Admitted, want)
			}
			if tr.Faults.LostReleases > ceilShare(tr.Admitted, faults.LoseRelease) ||
				tr.Faults.RetriedReleases > ceilShare(tr.Admitted, faults.RetryRelease) {
				t.Errorf("%s trial %d: faults %+v of %d admitted", r.Limiter, i+1, tr.Faults, tr.Admitted)
			}
			if tr.MostHeld > tr.MostInFlight || tr.MostInFlight > tr.Admitted || tr.Over != (tr.MostHeld > limit) {
				t.Errorf("%s trial %d: most held %d, in flight %d, admitted %d, over %t", r.Limiter, i+1, tr.MostHeld, tr.MostInFlight, tr.Admitted, tr.Over)
			}
			if tr.LatencyMicros.P50 > tr.LatencyMicros.P99 || tr.LatencyMicros.Max <= 0 {
				t.Errorf("%s trial %d: latency %+v", r.Limiter, i+1, tr.LatencyMicros)
			}
			if r.Limiter != "semaphore-lease" {
				if want := tr.Faults.Killed + tr.Faults.LostReleases - tr.Faults.RetriedReleases; tr.Leaked != want || tr.HeldAtEnd != want {
					t.Errorf("%s trial %d: the key ended at %d (leaked %d), want %d: faults %+v", r.Limiter, i+1, tr.HeldAtEnd, tr.Leaked, want, tr.Faults)
				}
			} else if tr.Over || tr.Leaked != 0 || tr.HeldAtEnd > tr.Faults.Killed+tr.Faults.LostReleases {
				t.Errorf("semaphore-lease trial %d: over %t, leaked %d, %d held at the end with %+v", i+1, tr.Over, tr.Leaked, tr.HeldAtEnd, tr.Faults)
			}
			leaked += max(tr.Leaked, 0)
			freed += max(-tr.Leaked, 0)
		}
		if r.Admitted != admitted || r.Leaked != leaked || r.FreedTwice != freed {
			t.Errorf("%s: admitted %d, leaked %d, freed twice %d; the trials add up to %d, %d, %d", r.Limiter, r.Admitted, r.Leaked, r.FreedTwice, admitted, leaked, freed)
		}
	}
}

func ceilShare(n int64, share float64) int64 {
	var k int64
	for k < n && float64(k) < float64(n)*share-1e-9 {
		k++
	}
	return k
}

// TestInFlightConfigErrors: an in-flight race with bad settings, or mixed
// with rate limiters, is refused naming the field, before anything is sent.
func TestInFlightConfigErrors(t *testing.T) {
	t.Parallel()
	base := inFlightConfig(t, defaultFaults)
	base.Redis = redisOptions("127.0.0.1:1") // nothing listens: a run that got past Validate would fail otherwise
	for _, tc := range []struct {
		name  string
		edit  func(*race.Config)
		field string
	}{
		{"mixed", func(c *race.Config) { c.Limiters = []string{"semaphore-lease", "lua"} }, "Limiters"},
		{"mixed with a script", func(c *race.Config) {
			c.Limiters = []string{"semaphore-lease"}
			c.Scripts = []algorithms.UserScript{{Name: "mine"}}
		}, "Limiters"},
		{"no hold", func(c *race.Config) { c.Hold = 0 }, "Hold"},
		{"long trial", func(c *race.Config) { c.Hold, c.RequestsPerWorker = time.Minute, 11 }, "Hold"},
		{"no lease", func(c *race.Config) { c.LeaseTTL = 0 }, "LeaseTTL"},
		{"kill", func(c *race.Config) { c.Faults.Kill = 1.5 }, "Faults.Kill"},
		{"retry", func(c *race.Config) { c.Faults.RetryRelease = -0.1 }, "Faults.RetryRelease"},
		{"sum", func(c *race.Config) { c.Faults = race.Faults{Kill: 0.5, LoseRelease: 0.4, RetryRelease: 0.2} }, "Faults.Kill"},
		{"limit", func(c *race.Config) { c.Policy.Limit = 0 }, "Limit"},
		{"explain", func(c *race.Config) { c.Explain = []string{"naive"} }, "Explain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			_, err := race.Run(context.Background(), cfg)
			var fe *field.Error
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("%v, want an error of %s", err, tc.field)
			}
		})
	}
	// Without the lease, its TTL is not read.
	cfg := base
	cfg.Limiters, cfg.LeaseTTL = []string{"semaphore-incr"}, 0
	if err := cfg.Validate(); err != nil {
		t.Errorf("semaphore-incr alone: %v", err)
	}
}

// TestWaitOutLeases: once a trial ends, the lease's key is polled until no
// lease counts: a lease that expires is waited out (0 leaked), and one that
// outlives the deadline, by which every lease of the trial had to expire,
// is reported leaked.
func TestWaitOutLeases(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	ctx := context.Background()
	cfg := inFlightConfig(t, defaultFaults)
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	expiring, stuck := algorithms.Key(prefix+"-expiring", "conc"), algorithms.Key(prefix+"-stuck", "conc")
	if err := c.ZAdd(ctx, expiring, redis.Z{Score: float64(now.Add(100 * time.Millisecond).UnixMilli()), Member: "a"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, stuck, redis.Z{Score: float64(now.Add(time.Hour).UnixMilli()), Member: "b"}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := race.WaitOutLeases(ctx, cfg, expiring, time.Now().Add(time.Second)); err != nil || n != 0 {
		t.Errorf("a lease that expires: %d left (%v), want 0", n, err)
	}
	if n, err := race.WaitOutLeases(ctx, cfg, stuck, time.Now().Add(50*time.Millisecond)); err != nil || n != 1 {
		t.Errorf("a lease past its deadline: %d left (%v), want 1", n, err)
	}
}

// TestInFlightExplain: the explained trial of the naive semaphore marks
// the admissions made when more than the limit were surely held, in
// Redis's order, each with how many, and the stale reads they followed; the lease's shows each acquire
// as one script call with nothing between its read and its write, and no
// admission beyond the limit.
func TestInFlightExplain(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	cfg := inFlightConfig(t, defaultFaults)
	cfg.Concurrency, cfg.RequestsPerWorker, cfg.Trials = 8, 2, 1
	cfg.Limiters = []string{"semaphore-naive", "semaphore-lease"}
	cfg.Explain = cfg.Limiters
	cfg = race.WithFirstRoundTogether(race.WithReadBarrier(cfg))
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := inFlightByName(rep)
	naive, lease := got["semaphore-naive"].Explain, got["semaphore-lease"].Explain
	if naive == nil || lease == nil || naive.Skipped != "" || lease.Skipped != "" {
		t.Fatalf("explanations %+v, %+v", naive, lease)
	}
	tr := naive.InFlightTrial
	// The first round's eight INCRs, in Redis's order, each admitted with
	// all before it still held: the sixth to the eighth beyond the limit.
	if tr == nil || !tr.Over || naive.OverAdmitted < int64(cfg.Concurrency)-cfg.Policy.Limit || naive.StaleReads == 0 || naive.Unmatched != 0 {
		t.Fatalf("naive: trial %+v, %d over of %d, %d stale reads, %d unmatched", tr, naive.OverAdmitted, naive.Admitted, naive.StaleReads, naive.Unmatched)
	}
	for _, m := range naive.Moments {
		if m.Kind == race.MomentOver && (m.HeldAtOnce <= cfg.Policy.Limit || m.Allowed != cfg.Policy.Limit || m.Write == nil || m.Write.Command != "INCR") {
			t.Errorf("naive moment %+v: want an INCR made with more than %d held", m, cfg.Policy.Limit)
		}
	}
	if naive.Counts["DECR"] == 0 {
		t.Errorf("naive trace counts %v: no release", naive.Counts)
	}
	if lease.InFlightTrial == nil || lease.OverAdmitted != 0 || lease.ScriptCalls != lease.Decisions || lease.Interleaved != 0 || lease.Counts["ZREM"] == 0 {
		t.Errorf("lease: %d over, %d script calls of %d decisions, %d interleaved, counts %v",
			lease.OverAdmitted, lease.ScriptCalls, lease.Decisions, lease.Interleaved, lease.Counts)
	}
}

// TestInFlightOnCluster: the in-flight race keeps its invariants on a
// three-master Redis Cluster, each holder's connections opened to every
// node, with no error (errors would fail the checks), and the explained
// trial is traced on the node that holds the key.
func TestInFlightOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	cl := redistest.Cluster(t, srv)
	cfg := inFlightConfig(t, defaultFaults)
	cfg.Redis = redisOptions(cl.Addrs()...)
	cfg.Redis.IsClusterMode = true
	cfg.Explain = []string{"semaphore-lease"}
	cfg = race.WithFirstRoundTogether(race.WithReadBarrier(cfg))
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkInFlight(t, rep)
	if ex := inFlightByName(rep)["semaphore-lease"].Explain; ex == nil || ex.Skipped != "" || ex.ScriptCalls == 0 {
		t.Errorf("the lease's explanation on a Cluster: %+v", ex)
	}
}
