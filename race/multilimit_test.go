package race_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/race"
)

// TestMultiLimitPair races the pair on a frozen caller clock and windows
// of hours, so that every request of a trial arrives at one instant,
// scheduling cannot change a count, and no trial outlasts a window. Both
// limits, 10/10h and 5/1h, are judged by their own guarantee. Both
// limiters admit exactly 5 in every trial and never over-admit either
// limit; the atomic one leaves each limit holding exactly the 5 admitted,
// while the sequential one leaves the 10/10h limit holding 10: the 5
// requests the 5/1h limit denied each took a slot of it, which later
// requests will be denied for.
func TestMultiLimitPair(t *testing.T) {
	redistest.Client(t, srv)
	cfg := config(t, srv.Addr, "multi-limit-sequential", "multi-limit-atomic")
	cfg.Policy = algorithms.Policy{Limit: 5, Window: time.Hour}
	cfg.Concurrency, cfg.Trials = 40, 10
	frozen := time.UnixMilli(1_700_000_000_000)
	cfg.Now = func() time.Time { return frozen }
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkTrials(t, rep)
	res := byName(rep)
	for _, tc := range []struct {
		name  string
		held  [2]int64
		state bool
	}{
		{"multi-limit-sequential", [2]int64{10, 5}, false},
		{"multi-limit-atomic", [2]int64{5, 5}, true},
	} {
		r := res[tc.name]
		if len(r.Limits) != 2 || r.Limits[0].Policy != "10/10h0m0s" || r.Limits[1].Policy != "5/1h0m0s" {
			t.Fatalf("%s judged on %+v, want 10/10h and 5/1h", tc.name, r.Limits)
		}
		for i, tr := range r.TrialResults {
			if tr.Admitted != 5 || tr.Errors != 0 {
				t.Errorf("%s trial %d admitted %d (%d errors), want 5", tc.name, i+1, tr.Admitted, tr.Errors)
			}
			for j, l := range tr.Limits {
				if l.OverAdmitted != 0 || !l.StateChecked || l.Held != tc.held[j] || l.WronglyConsumed != tc.held[j]-5 {
					t.Errorf("%s trial %d, limit %s: %+v; want held %d, %d wrongly consumed", tc.name, i+1, l.Policy, l, tc.held[j], tc.held[j]-5)
				}
			}
		}
		if r.OverAdmitted != 0 || r.UnderAdmitted != 0 || ptr(r.StateVerified) != tc.state {
			t.Errorf("%s: over %d, under %d, state verified %v; want none, none, %t", tc.name, r.OverAdmitted, r.UnderAdmitted, ptr(r.StateVerified), tc.state)
		}
		wrong := (tc.held[0] - 5) * int64(r.Trials)
		if l := r.Limits[0]; l.WronglyConsumed != wrong || l.LeakedTrials != 0 || (wrong > 0) != (l.TrialsWronglyConsumed == r.Trials) {
			t.Errorf("%s: the 10/10h limit %+v; want %d wrongly consumed over %d trials", tc.name, l, wrong, r.Trials)
		}
	}
}

// TestJudgeLimitsLateRead: a limit's log read back only once its window has
// passed since the trial's first send may have expired meanwhile (here, it
// has: the read waits for the window to pass, and Redis's expiry is played
// by a DEL just before it); it is then not checked, never taken for a key
// that disagreed with what the trial admitted.
func TestJudgeLimitsLateRead(t *testing.T) {
	c := redistest.Client(t, srv)
	ctx := context.Background()
	key := redistest.Prefix(t) + ":log"
	window := 500 * time.Millisecond
	checks := []algorithms.Check{{Key: key, Algorithm: "sliding-log", Policy: algorithms.Policy{Limit: 5, Window: window}, Cost: 1}}
	first := time.Now()
	for _, m := range []string{"a", "b", "c"} {
		if err := c.ZAdd(ctx, key, redis.Z{Score: float64(first.UnixMilli()), Member: m}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c.Del(context.Background(), key) })
	c.AddHook(expireBefore{key: key, at: first.Add(window)})
	tr := race.Trial{Admitted: 3}
	if err := race.JudgeLimits(ctx, c, checks, &tr, 3, first, first, 0, first); err != nil {
		t.Fatal(err)
	}
	if l := tr.Limits[0]; l.StateChecked || (tr.StateVerified != nil && !*tr.StateVerified) {
		t.Fatalf("a log read after its window: %+v, state verified %v; want it not checked", l, ptr(tr.StateVerified))
	}
}

// expireBefore is a go-redis hook that holds a ZCARD of key until the time
// at has passed, and deletes key before it, as Redis expires a key.
type expireBefore struct {
	key string
	at  time.Time
}

func (h expireBefore) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h expireBefore) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "zcard" && len(args) == 2 && args[1] == h.key {
			timer := time.NewTimer(time.Until(h.at) + time.Millisecond)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := next(ctx, redis.NewIntCmd(ctx, "del", h.key)); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h expireBefore) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
